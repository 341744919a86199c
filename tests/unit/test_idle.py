"""idle.py: the tuner's worker initializer lowers the process, and importing it pulls in nothing
but the standard library (a spawn worker unpickles its initializer before anything else, so the
heavy imports come after the process is lowered)."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import subprocess
import sys

from policy_scheduler.idle import become_idle


def test_importing_the_initializer_loads_only_the_standard_library():
    code = ("import sys; before = set(sys.modules); import policy_scheduler.idle; "
            "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] not in sys.stdlib_module_names))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == "['policy_scheduler', 'policy_scheduler.idle']", out.stdout


def test_a_spawned_worker_runs_under_sched_idle():
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                initializer=become_idle) as ex:
        assert ex.submit(os.sched_getscheduler, 0).result(60) == os.SCHED_IDLE
    assert os.sched_getscheduler(0) != os.SCHED_IDLE  # the parent keeps its priority
