"""The operator runs numpy with one BLAS thread (policy_scheduler/__init__.py): OpenBLAS's extra
threads only spin on the scheduler's short vectors, and take CPU from the API server."""

import os
import subprocess
import sys

CODE = "import policy_scheduler.cluster.engine, os, numpy; print(os.environ['OPENBLAS_NUM_THREADS'], " \
       "len(os.listdir('/proc/self/task')))"


def run(env_value=None):
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if env_value is not None:
        env["OPENBLAS_NUM_THREADS"] = env_value
    out = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, check=True)
    setting, threads = out.stdout.split()
    return setting, int(threads)


def test_importing_the_operator_leaves_numpy_one_blas_thread():
    assert run() == ("1", 1)


def test_an_explicit_setting_wins():
    setting, threads = run("2")
    assert setting == "2" and threads >= 2  # a BLAS thread besides the main one
