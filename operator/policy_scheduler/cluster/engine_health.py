"""What the probes read of the engine: live, ready and the details (``/readyz``'s JSON), with the
checks of each endpoint (health.probe_checks). Kept apart from the loop (engine.py): it only reads
the engine's state."""

from __future__ import annotations

from typing import Any

from ..health import probe_checks, warnings


def engine_health(engine: Any) -> tuple[bool, bool, dict[str, Any]]:
    """(live, ready, details) of ``engine`` (an engine.Engine) for the probes, from
    health.probe_checks (``details["checks"]``, and ``details["warnings"]``): live unless the loop
    died; ready once synced (a standby) and, on the leader, once the loop runs, while no informer
    reports a problem (``informer/<name>``). Revisions that cannot be written only warn."""
    e = engine
    checks_revisions = revisions_check(e.revisions)
    problems = e.informers.problems()
    waiting = e.informers.status() if not e.synced else {}
    checks = probe_checks(crashed=e.crashed, leading=e.leadership.leading, scheduling=e.scheduling,
                          listed=e.synced or bool(e.informers.informers) and not waiting,
                          synced=e.synced, waiting=waiting, lost=getattr(e.leadership, "lost", False),
                          stopping=e._stopping, informers=problems,
                          revisions=checks_revisions)
    live, ready = (all(err is None for _, err in checks[k]) for k in ("livez", "readyz"))
    details: dict[str, Any] = {
        "live": live, "ready": ready, "synced": e.synced, "scheduling": e.scheduling,
        **({"waiting": waiting} if waiting else {}), **e.leadership.describe(),
        "nodes": e.state.table.n, "queued": len(e.queue), "bound": e.bound_by_us,
        "policies": sorted(e.policies), "checks": checks, "warnings": {"readyz": warnings(checks_revisions)}}
    if e.revisions.enabled:
        details["revisions"] = {"namespace": e.revisions.namespace, "recording": e.revisions.problem is None,
                                **({"reason": e.revisions.problem.reason, "message": e.revisions.problem.message}
                                   if e.revisions.problem is not None else {})}
    drift = {name: why for name, why in problems.items() if why}
    if drift:
        details["informers"] = drift
    if e.crashed is not None:
        details["error"] = f"the scheduling loop died: {type(e.crashed).__name__}: {e.crashed}"
    return live, ready, details


def revisions_check(revisions: Any) -> str | None | bool:
    """health.probe_checks' ``revisions``: False when off (no namespace), else why they cannot be
    kept (None: they are)."""
    if not revisions.enabled:
        return False
    p = revisions.problem
    return None if p is None else f"{p.reason}: {p.message}"
