"""RFC 3339 timestamps as the API server writes metav1.Time: UTC, whole seconds, a "Z" suffix
(e.g. "2025-01-01T12:00:00Z"). The one format of status times, Event and condition times,
decision records (explain), snapshots and metric sample times. A leaf: the standard library only.

MicroTime (Events' eventTime: ``now_micro``) carries microseconds; the JSON log lines' timestamps
are written where they are used (logs.py)."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

RFC3339 = "%Y-%m-%dT%H:%M:%SZ"


def rfc3339(t: float) -> str:
    """A Unix time (seconds) as RFC 3339, truncated to the second."""
    return datetime.fromtimestamp(t, timezone.utc).strftime(RFC3339)


_now: list[Any] = [-1, ""]  # [int, str]: the last second formatted, and its text: a pod's events and status ask several times a second


def _second(s: int) -> str:
    if s != _now[0]:
        _now[1] = rfc3339(s)
        _now[0] = s
    return _now[1]


def now_rfc3339() -> str:
    return _second(int(time.time()))


def now_micro() -> str:
    """Now as a MicroTime (an Event's eventTime): RFC 3339 with microseconds."""
    t = time.time()
    s = int(t)
    return f"{_second(s)[:-1]}.{int((t - s) * 1e6):06d}Z"


def parse_rfc3339(v: str) -> float:
    """The Unix time of an RFC 3339 string in this format ("Z", whole seconds); ValueError
    otherwise."""
    return datetime.strptime(v, RFC3339).replace(tzinfo=timezone.utc).timestamp()
