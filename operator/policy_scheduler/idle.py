"""The CPU priority of background worker processes (the tuner's replays), and their pacing.

``become_idle`` is the worker's initializer. It lives in a module of its own, that imports only
the standard library, because a ``spawn`` worker unpickles its initializer before anything else:
had it lived in the tuner's module, the new process would have imported the tuner, numpy,
pydantic and the whole scheduling core (about a second of CPU) at normal priority first, while
the scheduling loop, the API server and etcd compete for the same cores. Here, the process
lowers itself first and does all its imports, and all its replays, on CPU nobody else wants.

``SCHED_IDLE`` alone still costs a busy scheduler several percent on a small machine (the worker
takes every idle moment of a core, and shares the caches). So the parent also hands the worker a
shared flag, set while its scheduling queue has work (a burst), and the worker calls
``yield_while_busy`` before each step (building its replay world, each replay): while the flag
is up it waits, so that it works at most ``BUSY_SHARE`` of the time (after a step of ``w``
seconds, up to ``w * (1 - BUSY_SHARE) / BUSY_SHARE``, at least ``MIN_YIELD`` and at most
``MAX_YIELD`` seconds). Under sustained load it still makes progress; the evaluation's own time
budget bounds it.

``warm`` imports the modules a worker needs, so that the tuner can start its worker while the
scheduling queue is empty rather than in the middle of a burst. ``new_job`` starts the count of
work over (the time between two jobs is not work).
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Iterable
from typing import Any

BUSY_SHARE = 0.1  # at most this share of the time working while the parent is busy
MIN_YIELD = 2.0  # seconds: the shortest wait for a burst to end, whatever the last step took
MAX_YIELD = 30.0  # the longest
POLL = 0.05

_busy: Any = None  # the parent's flag (a shared ctypes byte), in a worker process
_resumed: float | None = None  # when the last wait ended (time.monotonic())


def become_idle(busy: Any = None) -> None:
    """Lower the calling process to ``SCHED_IDLE`` where the OS has it (Linux), else to the lowest
    nice (or leave it, when neither is allowed), and keep ``busy`` (the parent's flag, with a
    ``value``) for ``yield_while_busy``."""
    global _busy
    _busy = busy
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        try:
            os.nice(19)  # an increment: the kernel caps the value at 19
        except OSError:
            pass


def yield_while_busy(limit: float | None = None) -> float:
    """Wait while the parent's flag is up, at most ``limit`` seconds (default: from the time the
    worker worked since its last wait, see the module doc); the seconds waited (0 in a process
    without a flag)."""
    global _resumed
    t0 = time.monotonic()
    worked = t0 - _resumed if _resumed is not None else 0.0
    _resumed = t0
    if _busy is None or not _busy.value:
        return 0.0
    if limit is None:
        limit = wait_limit(worked)
    while _busy.value and time.monotonic() - t0 < limit:
        time.sleep(POLL)
    _resumed = time.monotonic()
    return _resumed - t0


def new_job() -> None:
    """A job begins: the first wait of it counts no earlier work."""
    global _resumed
    _resumed = None


def wait_limit(worked: float) -> float:
    """The longest wait after ``worked`` seconds of work: working at most ``BUSY_SHARE`` of the
    time, within [``MIN_YIELD``, ``MAX_YIELD``]."""
    return min(MAX_YIELD, max(MIN_YIELD, worked * (1.0 - BUSY_SHARE) / BUSY_SHARE))


def warm(modules: Iterable[str]) -> int:
    """Import ``modules`` (in a worker: before its first job); returns the process id."""
    for name in modules:
        importlib.import_module(name)
    return os.getpid()
