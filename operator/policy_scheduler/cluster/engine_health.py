"""What the probes read of the engine: live, ready and the details (``/readyz``'s JSON), with the
checks of each endpoint (health.probe_checks). Kept apart from the loop (engine.py): it only reads
the engine's state."""

from __future__ import annotations

from typing import Any

from ..health import probe_checks


def engine_health(engine: Any) -> tuple[bool, bool, dict[str, Any]]:
    """(live, ready, details) of ``engine`` (an engine.Engine) for the probes, from health.probe_checks (``details["checks"]``): live
    unless the loop died; ready once synced (a standby) and, on the leader, once the loop runs."""
    e = engine
    waiting = e.informers.status() if not e.synced else {}
    checks = probe_checks(crashed=e.crashed, leading=e.leadership.leading, scheduling=e.scheduling,
                          listed=e.synced or bool(e.informers.informers) and not waiting,
                          synced=e.synced, waiting=waiting, lost=getattr(e.leadership, "lost", False),
                          stopping=e._stopping)
    live, ready = (all(err is None for _, err in checks[k]) for k in ("livez", "readyz"))
    details: dict[str, Any] = {
        "live": live, "ready": ready, "synced": e.synced, "scheduling": e.scheduling,
        **({"waiting": waiting} if waiting else {}), **e.leadership.describe(),
        "nodes": e.state.table.n, "queued": len(e.queue), "bound": e.bound_by_us,
        "policies": sorted(e.policies), "checks": checks}
    if e.crashed is not None:
        details["error"] = f"the scheduling loop died: {type(e.crashed).__name__}: {e.crashed}"
    return live, ready, details
