"""The CPU priority of background worker processes (the tuner's replays).

``become_idle`` is the worker's initializer. It lives in a module of its own, that imports only
the standard library, because a ``spawn`` worker unpickles its initializer before anything else:
had it lived in the tuner's module, the new process would have imported the tuner, numpy,
pydantic and the whole scheduling core (about a second of CPU) at normal priority first, while
the scheduling loop, the API server and etcd compete for the same cores. Here, the process
lowers itself first and does all its imports, and all its replays, on CPU nobody else wants.
"""

from __future__ import annotations

import os


def become_idle() -> str:
    """Lower the calling process to ``SCHED_IDLE`` where the OS has it (Linux), else to the lowest
    nice; returns which (``"SCHED_IDLE"``, ``"nice 19"``, or ``""`` when neither was allowed)."""
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
