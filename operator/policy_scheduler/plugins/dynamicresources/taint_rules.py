"""DeviceTaintRules (resource.k8s.io/v1, GA in v1.37 with ``DRADeviceTaintRules``): one taint laid
over every device its selector picks, as if the driver had published it in the ResourceSlice.

upstream ``dynamic-resource-allocation/resourceslice/tracker`` (``applyPatches``): the scheduler
reads the slices with every rule's taint appended to the matching devices' own taints. A rule
without ``spec.deviceSelector`` matches no device; the empty selector matches every device; each
of ``driver``, ``pool`` (the slice's pool name) and ``device`` (the device's name), when set,
must be equal. (``deviceClassName`` and ``selectors`` were dropped from the API in v1.35.) The
taint's effect decides as for a slice's own taint (allocator.py): NoSchedule and NoExecute keep
requests without a toleration off the device, None and unknown effects are informational. A
rule's ``status`` (the eviction controller's conditions) is not read.

Pure: no client, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .objects import DeviceTaint, ResourceSlice, _meta, _obj

MAX_FIELD = 253  # names longer than any valid driver, pool or device name match nothing anyway


@dataclass(frozen=True, slots=True)
class DeviceTaintRule:
    """``selector``: None when the rule has no deviceSelector (it matches nothing); else
    (driver, pool, device), each None when not set."""

    name: str
    resource_version: str
    selector: tuple[str | None, str | None, str | None] | None
    taint: DeviceTaint

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> "DeviceTaintRule":
        meta = _meta(body)
        spec = _obj(body.get("spec"), "spec")
        raw_sel = spec.get("deviceSelector")
        selector = None
        if raw_sel is not None:
            sel = _obj(raw_sel, "spec.deviceSelector")
            selector = (_opt_str(sel.get("driver"), "spec.deviceSelector.driver"),
                        _opt_str(sel.get("pool"), "spec.deviceSelector.pool"),
                        _opt_str(sel.get("device"), "spec.deviceSelector.device"))
        t = _obj(spec.get("taint"), "spec.taint")
        taint = DeviceTaint(str(t.get("key") or "")[:MAX_FIELD * 2], str(t.get("value") or "")[:MAX_FIELD * 2],
                            str(t.get("effect") or "")[:64])
        return cls(str(meta.get("name") or ""), str(meta.get("resourceVersion") or ""), selector, taint)

    def matches(self, driver: str, pool: str, device: str) -> bool:
        if self.selector is None:
            return False
        want_driver, want_pool, want_device = self.selector
        return ((want_driver is None or want_driver == driver) and (want_pool is None or want_pool == pool)
                and (want_device is None or want_device == device))


def _opt_str(v: Any, where: str) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str):
        raise ValueError(f"{where} is not a string")
    return v


def patch_slice(s: ResourceSlice, rules: Iterable[DeviceTaintRule]) -> bool:
    """Set every device's ``taints`` to its own followed by the matching rules' (in ``rules``'
    order); True when some device's taints changed."""
    rules = [r for r in rules if r.selector is not None and r.selector[0] in (None, s.driver)
             and r.selector[1] in (None, s.pool)]
    changed = False
    for dev in s.devices:
        taints = dev.own_taints + tuple(r.taint for r in rules if r.matches(s.driver, s.pool, dev.name))
        if taints != dev.taints:
            dev.taints = taints
            changed = True
    return changed
