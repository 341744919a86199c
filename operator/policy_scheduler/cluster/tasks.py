"""Background tasks owned by one component, cancelled together when it stops.

A task that fails is reported when it ends (a done-callback), not when the task object is
garbage-collected (asyncio's "Task exception was never retrieved", which may come much later or
never): it is logged with its traceback, named by its coroutine, and counted in ``FAILED`` (task
name -> failures), which telemetry.py exports as ``policy_scheduler_background_task_failures_total``.
The names come from the code (coroutine qualnames), so the counter's keys are bounded.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Coroutine

from prometheus_client.core import CounterMetricFamily

log = logging.getLogger("policy_scheduler")

FAILED: collections.Counter[str] = collections.Counter()  # coroutine qualname -> failed tasks


def task_name(coro: Coroutine) -> str:
    """The coroutine's qualified name (``Revisions.run``), what the log and the metric call it."""
    return getattr(coro, "__qualname__", None) or type(coro).__name__


def _report(name: str, t: asyncio.Task) -> None:
    """Done-callback: a task that raised is logged and counted (retrieving its exception, so
    asyncio does not report it again at garbage collection). Cancellation is not a failure."""
    if t.cancelled():
        return
    e = t.exception()
    if e is None:
        return
    FAILED[name] += 1
    log.error("background task %s failed: %s: %s", name, type(e).__name__, e, exc_info=e)


class TaskFailures:
    """A collector (telemetry.py registers it): ``FAILED`` read at scrape time."""

    def describe(self):
        return []

    def collect(self):
        m = CounterMetricFamily("policy_scheduler_background_task_failures",
                                "Background tasks that ended with an exception, by coroutine.", labels=["task"])
        for name, n in sorted(FAILED.items()):
            m.add_metric([name], n)
        yield m


class Tasks:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task] = set()

    def spawn(self, coro: Coroutine) -> asyncio.Task:
        """Run ``coro`` as a task on the running loop, kept until it ends; a failure is logged and
        counted when it ends (``_report``)."""
        name = task_name(coro)
        t = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)
        t.add_done_callback(lambda t: _report(name, t))
        return t

    async def cancel_all(self) -> None:
        """Cancel every task still running and wait for them to end."""
        tasks = list(self._tasks)
        for t in tasks:
            if not t.done():
                t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def __len__(self) -> int:
        return len(self._tasks)
