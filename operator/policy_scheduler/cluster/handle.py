"""The operator's framework Handle: what plugins may ask of the world outside the pure core,
answered from the engine's caches (namespace labels, workload selectors, metric sources, the
waiting pods, the volume cache, the PodGroups), and the calls that reach the API server, for
bind-side plugins in the binding cycle: ``bind_pod`` (Bind) and ``api_request`` (VolumeBinding's
PreBind); ``patch_pod_group_status`` (Coscheduling's PodGroup status, written by the engine's
PodGroupStatusWriter), ``activate_pods`` (the queue) and ``pod_event`` (the event recorder)."""

from __future__ import annotations

from typing import Any, TYPE_CHECKING, Mapping, Sequence

from ..framework.binding import WaitingPods
from ..framework.interface import Handle
from ..framework.metricview import SOURCE as METRICS_SOURCE
from ..framework.native_podgroups import api_path as native_pod_groups_path
from ..framework.podgroups import API_PATH as POD_GROUPS_PATH
from ..framework.podinfo import PodInfo
from ..framework.status import Code, Status
from ..plugins.node_resources_fit import OVERCOMMIT_ANYWHERE, OVERCOMMIT_SOURCE

if TYPE_CHECKING:  # pragma: no cover
    from .engine import Engine


class OperatorHandle(Handle):
    """Plugins' view of the world outside the core, answered from the engine's caches."""

    def __init__(self, engine: "Engine") -> None:
        self.engine = engine

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        return self.engine.namespaces.get(namespace)

    def all_namespace_labels(self) -> Mapping[str, Mapping[str, str]]:
        return self.engine.namespaces

    def default_spread_selector(self, pod: PodInfo):
        return self.engine.workloads.default_selector(pod)

    def source(self, name: str):
        return self.engine.sources.view(name)

    def waiting_pods(self) -> WaitingPods:
        return self.engine.waiting

    def pdbs(self):
        return list(self.engine.pdbs.values())

    def is_pod_running_preemption(self, uid: str) -> bool:
        return self.engine.is_pod_running_preemption(uid)

    def volumes(self):
        return self.engine.volumes

    def pod_groups(self):
        return self.engine.pod_groups

    async def patch_pod_group_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Merge PATCH of the PodGroup's status subresource; only the leader writes (a standby's
        call raises, and the writer keeps the group for later)."""
        if not self.engine.leadership.valid():
            raise RuntimeError("not the leader: no API writes")
        await self.engine.client.merge_patch(f"{POD_GROUPS_PATH.rsplit('/', 1)[0]}/namespaces/{namespace}/"
                                             f"podgroups/{name}/status", {"status": dict(status)})

    def native_pod_groups(self):
        return self.engine.native_pod_groups

    async def patch_native_pod_group_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Merge PATCH of a scheduling.k8s.io PodGroup's status (its conditions); the leader only."""
        if not self.engine.leadership.valid():
            raise RuntimeError("not the leader: no API writes")
        path = native_pod_groups_path(self.engine.native_pod_groups_version)
        await self.engine.client.merge_patch(f"{path.rsplit('/', 1)[0]}/namespaces/{namespace}/podgroups/{name}/status",
                                             {"status": dict(status)})

    def activate_pods(self, keys: Sequence[str]) -> int:
        q = self.engine.queue
        moved = q.activate([k for k in keys if k in q])  # pods in flight (waiting at Permit) stay as they are
        if moved:
            self.engine.wake()
        return moved

    def pod_event(self, pod: PodInfo, reason: str, message: str) -> None:
        self.engine.recorder.failure(pod, reason, message, code=Code.UNSCHEDULABLE)

    async def api_request(self, method: str, path: str, body: Any = None) -> Any:
        """The operator's API client; a PATCH is a merge patch. Only the leader writes."""
        if not self.engine.leadership.valid():
            raise RuntimeError("not the leader: no API writes")
        ct = "application/merge-patch+json" if method.upper() == "PATCH" else "application/json"
        return await self.engine.client.request(method.upper(), path, body, content_type=ct)

    async def bind_pod(self, pod: PodInfo, node_name: str, annotations: Mapping[str, str]) -> Status:
        from .binder import post_binding

        return await post_binding(self.engine, pod, node_name, dict(annotations))


class PolicyHandle(OperatorHandle):
    """The handle of one policy's plugins: ``source(metricview.SOURCE)`` is that policy's metrics,
    ``source("overcommit")`` its spec.overcommit factors (NodeResourcesFit)."""

    def __init__(self, engine: "Engine", policy: str) -> None:
        super().__init__(engine)
        self.policy = policy

    def source(self, name: str):
        if name == METRICS_SOURCE:
            return self.engine.sources.view(self.policy)
        if name == OVERCOMMIT_SOURCE:
            st = self.engine.policies.get(self.policy)
            return st.overcommit if st is not None else None
        if name == OVERCOMMIT_ANYWHERE:
            return any(st.overcommit for st in self.engine.policies.values())
        return None
