"""Background tasks owned by one component, cancelled together when it stops."""

from __future__ import annotations

import asyncio
from typing import Coroutine


class Tasks:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task] = set()

    def spawn(self, coro: Coroutine) -> asyncio.Task:
        """Run ``coro`` as a task on the running loop, kept until it ends."""
        t = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)
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
