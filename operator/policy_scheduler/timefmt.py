"""RFC 3339 timestamps as the API server writes metav1.Time: UTC, whole seconds, a "Z" suffix
(e.g. "2025-01-01T12:00:00Z"). The one format of status times, Event and condition times,
decision records (explain), snapshots and metric sample times. A leaf: the standard library only.

MicroTime (Events' eventTime) and the JSON log lines' timestamps carry fractions of a second and
are written where they are used (cluster/recorder.py, logs.py)."""

from __future__ import annotations

from datetime import datetime, timezone

RFC3339 = "%Y-%m-%dT%H:%M:%SZ"


def rfc3339(t: float) -> str:
    """A Unix time (seconds) as RFC 3339, truncated to the second."""
    return datetime.fromtimestamp(t, timezone.utc).strftime(RFC3339)


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime(RFC3339)


def parse_rfc3339(v: str) -> float:
    """The Unix time of an RFC 3339 string in this format ("Z", whole seconds); ValueError
    otherwise."""
    return datetime.strptime(v, RFC3339).replace(tzinfo=timezone.utc).timestamp()
