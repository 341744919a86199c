"""Which Services and controllers select a pod: upstream's helper.DefaultSelector, used by
PodTopologySpread's default constraints (system defaults, or a policy's defaultConstraints).

The selector is the union of the selectors of every Service in the pod's namespace that selects
it, plus the selector of its controller when that is a ReplicationController, ReplicaSet or
StatefulSet. An empty result means no default spreading applies to the pod.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..framework.model.labels import LabelSelector, Requirement, SelectorError
from ..framework.model.podinfo import PodInfo

_CONTROLLERS = {("v1", "ReplicationController"): "rc", ("apps/v1", "ReplicaSet"): "rs",
                ("apps/v1", "StatefulSet"): "ss"}


class WorkloadIndex:
    def __init__(self) -> None:
        self.services: dict[str, dict[str, dict[str, str]]] = {}  # ns -> name -> spec.selector
        self.controllers: dict[str, dict[tuple[str, str], LabelSelector]] = {"rc": {}, "rs": {}, "ss": {}}

    def on_service(self, event: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        sel = (body.get("spec") or {}).get("selector")
        if event == "DELETED" or sel is None:
            self.services.get(ns, {}).pop(name, None)
        else:
            self.services.setdefault(ns, {})[name] = dict(sel)

    def _controller(self, kind: str, event: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        sel = (body.get("spec") or {}).get("selector")
        if event == "DELETED" or sel is None:
            self.controllers[kind].pop(key, None)
            return
        try:
            parsed = (LabelSelector(tuple(Requirement(k, "In", (str(v),)) for k, v in sel.items()))
                      if kind == "rc" else LabelSelector.parse(sel, "spec.selector"))
        except SelectorError:
            self.controllers[kind].pop(key, None)
            return
        self.controllers[kind][key] = parsed

    def on_replication_controller(self, event: str, body: Mapping[str, Any]) -> None:
        self._controller("rc", event, body)

    def on_replica_set(self, event: str, body: Mapping[str, Any]) -> None:
        self._controller("rs", event, body)

    def on_stateful_set(self, event: str, body: Mapping[str, Any]) -> None:
        self._controller("ss", event, body)

    def default_selector(self, pod: PodInfo) -> LabelSelector | None:
        merged: dict[str, str] = {}
        for sel in self.services.get(pod.namespace, {}).values():
            if all(pod.labels.get(k) == v for k, v in sel.items()):
                merged.update(sel)
        reqs = [Requirement(k, "In", (v,)) for k, v in merged.items()]
        for ref in ((pod.raw or {}).get("metadata") or {}).get("ownerReferences") or []:
            if not ref.get("controller"):
                continue
            kind = _CONTROLLERS.get((ref.get("apiVersion"), ref.get("kind")))
            if kind is None:
                continue
            owner = self.controllers[kind].get((pod.namespace, ref.get("name", "")))
            if owner is not None and not owner.nothing:
                reqs.extend(owner.requirements)
            break
        return LabelSelector(tuple(reqs)) if reqs else None
