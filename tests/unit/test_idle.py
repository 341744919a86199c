"""idle.py: the tuner's worker initializer lowers the process, and importing it pulls in nothing
but the standard library (a spawn worker unpickles its initializer before anything else, so the
heavy imports come after the process is lowered); the worker waits while the parent's busy flag is
up, at most its limit."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import subprocess
import sys
import threading
import time

from policy_scheduler.idle import MAX_YIELD, MIN_YIELD, become_idle, wait_limit, warm, yield_while_busy


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


def test_the_worker_waits_while_the_parent_is_busy_at_most_its_limit():
    ctx = multiprocessing.get_context("spawn")
    busy = ctx.RawValue("b", 0)
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx, initializer=become_idle, initargs=(busy,)) as ex:
        assert ex.submit(yield_while_busy, 5.0).result(60) == 0.0  # not busy: no wait
        busy.value = 1
        assert 0.4 <= ex.submit(yield_while_busy, 0.4).result(60) < 2.0  # busy throughout: the limit
        t0 = time.monotonic()
        threading.Timer(0.5, lambda: setattr(busy, "value", 0)).start()  # the burst ends after 0.5 s
        waited = ex.submit(yield_while_busy, 30.0).result(60)
        assert 0.3 <= waited < 5.0 and time.monotonic() - t0 < 10, waited
    assert yield_while_busy(5.0) == 0.0  # a process without a flag never waits


def test_while_busy_the_worker_works_at_most_a_tenth_of_the_time():
    assert wait_limit(0.0) == MIN_YIELD  # the first wait, and after short steps
    assert abs(wait_limit(1.0) - 9.0) < 1e-9  # 1 s of work, 9 s of waiting
    assert wait_limit(600.0) == MAX_YIELD


def test_warm_imports_in_the_worker():
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                initializer=become_idle) as ex:
        pid = ex.submit(warm, ["policy_scheduler.whatif.tune"]).result(120)
        assert pid != os.getpid()
        assert ex.submit(_imported, "policy_scheduler.whatif.tune").result(60)


def _imported(name: str) -> bool:
    return name in sys.modules


def test_the_work_counted_for_a_wait_starts_over_with_each_job(monkeypatch):
    import types

    from policy_scheduler import idle

    seen = []
    monkeypatch.setattr(idle, "_busy", types.SimpleNamespace(value=1))
    monkeypatch.setattr(idle, "wait_limit", lambda worked: seen.append(worked) or 0.0)
    idle.new_job()
    idle.yield_while_busy()
    time.sleep(0.2)  # a step of work
    idle.yield_while_busy()
    time.sleep(0.2)  # between two jobs: not work
    idle.new_job()
    idle.yield_while_busy()
    assert seen[0] == 0.0 and 0.15 < seen[1] < 1.0 and seen[2] == 0.0, seen
