"""Binding conditions (``DRADeviceBindingConditions``, beta and on in v1.37, with
``DRAResourceClaimDeviceStatus``): a device that lists ``bindingConditions`` is allocated like any
other (its pool is searched last, allocator.py), the allocation result carries its
``bindingConditions`` and ``bindingFailureConditions``, and PreBind then waits until the driver
reports every binding condition True in the claim's ``status.devices`` entry of that
driver/pool/device.

upstream ``dynamicresources.go``: ``isClaimReadyForBinding``, ``isClaimTimeout``,
``isPodReadyForBinding``, and PreBind's ``wait.PollUntilContextTimeout(5 s, bindingTimeout,
immediate)``. The outcomes, as upstream's error texts:

- every binding condition True, no failure condition True: PreBind succeeds, the pod is bound;
- a failure condition True: ``device binding failed: claim=<c>, reason=<r>, message="<m>"``;
- the claim's ``allocationTimestamp`` + bindingTimeout passed at a poll:
  ``device binding timeout: claim=<c>``; the wait's own deadline:
  ``device binding timeout: context deadline exceeded``.

A failure is an Error status: the binding cycle unreserves (the pod leaves ``reservedFor``, the
allocation stays) and the pod goes to backoff. In the next attempt Filter finds the allocated claim
unavailable on every node (a failure condition True, or not ready after the timeout), and
PostFilter deallocates it (``deallocation of ResourceClaim completed``), as upstream.

The wait is an ``asyncio.sleep`` loop of the binding cycle's own task: the event loop goes on.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import json
from typing import Any, Callable, Mapping, Sequence

from .objects import ResourceClaim

POLL_INTERVAL = 5.0  # upstream PreBind's poll interval
DEFAULT_BINDING_TIMEOUT = 600.0  # upstream DynamicResourcesBindingTimeoutDefault
FAILED = "device binding failed"  # upstream ErrDeviceBindingFailed
TIMEOUT = "device binding timeout"  # upstream ErrDeviceBindingTimeout
PENDING_REASON = "BindingConditionsPending"


class BindingFailed(Exception):
    """A binding failure condition is True: the text is upstream's error."""


def _device_status(claim: ResourceClaim, r: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """upstream getAllocatedDeviceStatus: the claim's status.devices entry of the result's device."""
    for d in ((claim.raw.get("status") or {}).get("devices")) or ():
        if isinstance(d, Mapping) and (d.get("driver"), d.get("pool"), d.get("device")) == \
                (r.get("driver"), r.get("pool"), r.get("device")):
            return d
    return None


def _condition(status: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    for c in status.get("conditions") or ():
        if isinstance(c, Mapping) and c.get("type") == ctype:
            return c
    return None


def wall_clock() -> float:
    return _dt.datetime.now(_dt.timezone.utc).timestamp()


def _go_quote(s: str) -> str:
    """Go's %q for the texts a driver writes (printable text: JSON's escapes are Go's)."""
    return json.dumps(s, ensure_ascii=False)


def claim_ready(claim: ResourceClaim) -> bool:
    """upstream isClaimReadyForBinding: True when every result with binding conditions has them
    all True in status.devices (so also when no result has any); False while one is missing or
    not True, and for a claim without an allocation. Raises BindingFailed when a result's failure
    condition is True."""
    if not claim.allocation:
        return False
    for r in claim.results():
        if not isinstance(r, Mapping) or not r.get("bindingConditions"):
            continue
        ds = _device_status(claim, r)
        if ds is None:
            return False
        for ctype in r.get("bindingFailureConditions") or ():
            c = _condition(ds, ctype)
            if c is not None and c.get("status") == "True":
                raise BindingFailed(f"{FAILED}: claim={claim.name}, reason={c.get('reason') or ''}, "
                                    f"message={_go_quote(str(c.get('message') or ''))}")
        for ctype in r.get("bindingConditions") or ():
            c = _condition(ds, ctype)
            if c is None or c.get("status") != "True":
                return False
    return True


def allocation_time(claim: ResourceClaim) -> float | None:
    """status.allocation.allocationTimestamp as seconds since the epoch (None: unset or unreadable)."""
    ts = (claim.allocation or {}).get("allocationTimestamp")
    if not isinstance(ts, str):
        return None
    try:
        t = _dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    return t.timestamp()


def claim_timed_out(claim: ResourceClaim, timeout: float, now: float) -> bool:
    """upstream isClaimTimeout: a result has binding conditions and allocationTimestamp + timeout
    is before ``now``."""
    at = allocation_time(claim)
    if at is None:
        return False
    return any(isinstance(r, Mapping) and r.get("bindingConditions") is not None for r in claim.results()) \
        and at + timeout < now


def unavailable(claim: ResourceClaim, timeout: float, now: float) -> bool:
    """Filter's check of an allocated claim: a failure condition True, or not ready after the
    timeout (PostFilter may then deallocate it)."""
    try:
        return not claim_ready(claim) and claim_timed_out(claim, timeout, now)
    except BindingFailed:
        return True


def has_binding_conditions(claims: Sequence[ResourceClaim]) -> bool:
    """upstream hasBindingConditions: an allocated device of the claims has binding conditions."""
    return any(isinstance(r, Mapping) and r.get("bindingConditions") for c in claims for r in c.results())


def pod_ready(claims: Sequence[ResourceClaim], lookup: Callable[[ResourceClaim], ResourceClaim | None],
              timeout: float, now: float) -> bool:
    """upstream isPodReadyForBinding over the claims as the cache has them now. Raises
    BindingFailed for a failure condition and for a claim past its timeout."""
    for c in claims:
        cur = lookup(c)
        if cur is None:
            raise BindingFailed(f'resourceclaim.resource.k8s.io "{c.name}" not found')
        if not claim_ready(cur):
            if claim_timed_out(cur, timeout, now):
                raise BindingFailed(f"{TIMEOUT}: claim={cur.name}")
            return False
    return True


async def wait_for_binding(claims: Sequence[ResourceClaim], lookup: Callable[[ResourceClaim], ResourceClaim | None],
                           timeout: float, interval: float = POLL_INTERVAL,
                           clock: Callable[[], float] | None = None) -> str | None:
    """PreBind's wait: None once every binding condition is met, else upstream's error text.
    Polls at once, then every ``interval`` seconds, until ``timeout`` seconds passed."""
    loop = asyncio.get_running_loop()
    wall = clock or wall_clock
    deadline = loop.time() + timeout
    while True:
        try:
            if pod_ready(claims, lookup, timeout, wall()):
                return None
        except BindingFailed as e:
            return str(e)
        left = deadline - loop.time()
        if left <= interval:  # the deadline comes before the next poll
            await asyncio.sleep(max(left, 0.0))
            return f"{TIMEOUT}: context deadline exceeded"
        await asyncio.sleep(interval)
