"""The CPU priority of background worker processes (the tuner's replays), and their pacing.

``become_idle`` is the worker's initializer. It lives in a module of its own, that imports only
the standard library, because a ``spawn`` worker unpickles its initializer before anything else:
had it lived in the tuner's module, the new process would have imported the tuner, numpy,
pydantic and the whole scheduling core (about a second of CPU) at normal priority first, while
the scheduling loop, the API server and etcd compete for the same cores. Here, the process
lowers itself first and does all its imports, and all its replays, on CPU nobody else wants.

``SCHED_IDLE`` alone still costs a busy scheduler a few percent on a small machine (the worker
takes every idle moment of a core, and shares the caches). So the parent also hands the worker a
shared flag, set while its scheduling queue has work (a burst), and the worker calls
``yield_while_busy`` before each replay: it waits while the flag is up, at most ``MAX_YIELD``
seconds at a time, so that under sustained load it still makes progress (its own time budget
bounds the evaluation).
"""

from __future__ import annotations

import os
import time
from typing import Any

MAX_YIELD = 2.0  # seconds a worker waits for the parent's burst to end before its next replay
POLL = 0.05

_busy: Any = None  # the parent's flag (a shared ctypes byte), in a worker process


def become_idle(busy: Any = None) -> str:
    """Lower the calling process to ``SCHED_IDLE`` where the OS has it (Linux), else to the lowest
    nice, and keep ``busy`` (the parent's flag, with a ``value``) for ``yield_while_busy``.
    Returns which priority (``"SCHED_IDLE"``, ``"nice 19"``, or ``""`` when neither was allowed)."""
    global _busy
    _busy = busy
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return "SCHED_IDLE"
    except (AttributeError, OSError):
        pass
    try:
        os.nice(19)  # an increment: the kernel caps the value at 19
        return "nice 19"
    except OSError:
        return ""


def yield_while_busy(limit: float = MAX_YIELD) -> float:
    """Wait while the parent's flag is up, at most ``limit`` seconds; the seconds waited (0 in a
    process without a flag)."""
    if _busy is None or not _busy.value:
        return 0.0
    t0 = time.monotonic()
    while _busy.value and time.monotonic() - t0 < limit:
        time.sleep(POLL)
    return time.monotonic() - t0
