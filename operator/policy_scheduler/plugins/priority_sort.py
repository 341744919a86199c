"""PrioritySort (upstream plugins/queuesort/priority_sort.go).

Less(a, b): the pod with the higher priority (``spec.priority``, 0 when unset) goes first; on
equal priority the one queued earlier (its queue timestamp, not its creation time) goes first.
"""

from __future__ import annotations

from typing import Any

from ..framework.interface import QueueSortPlugin

NAME = "PrioritySort"


class PrioritySort(QueueSortPlugin):
    NAME = NAME
    Args = None

    def less(self, a: Any, b: Any) -> bool:
        pa, pb = a.pod.priority, b.pod.priority
        return pa > pb or (pa == pb and a.timestamp < b.timestamp)


PLUGIN = PrioritySort
