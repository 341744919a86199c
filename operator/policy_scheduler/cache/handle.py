"""The one framework Handle: plugins' view of the world outside the pure core, answered from a
ClusterState (namespace labels, workload selectors, PDBs, the waiting pods, storage objects, the
PodGroups), the policy store (a policy's overcommit factors) and the metric sources.

upstream: ``framework.Handle`` as ``frameworkImpl`` implements it (``runtime/framework.go``):
listers over the scheduler's cache, plus ``ClientSet()`` for bind-side plugins. What reaches
outside the process (the API server, the queue, the event recorder) is behind ``Actions``: the
operator passes its own (cluster/apicalls.py); what-if passes none, and then a plugin that asks
to write gets the framework's defaults (no binding, no requests, nothing activated).
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence

from ..framework.interface import Handle
from ..framework.metricview import SOURCE as METRICS_SOURCE
from ..framework.model.podinfo import PodInfo
from ..framework.status import Status
from ..metricsources.manager import MetricSources
from ..plugins.node_resources_fit import OVERCOMMIT_ANYWHERE, OVERCOMMIT_SOURCE
from .policies import PolicyStore
from .state import ClusterState


class Actions(Protocol):
    """What a Handle may do beyond reading the state: the operator's API writes and queue."""

    async def bind_pod(self, pod: PodInfo, node_name: str, annotations: Mapping[str, str]) -> Status: ...

    async def api_request(self, method: str, path: str, body: Any = None) -> Any: ...

    async def nominate_for_expectation(self, pod: PodInfo, node_name: str) -> None: ...

    async def patch_pod_group_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None: ...

    async def patch_native_pod_group_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None: ...

    def activate_pods(self, keys: Sequence[str]) -> int: ...

    def pod_event(self, pod: PodInfo, reason: str, message: str) -> None: ...

    def pod_normal_event(self, pod: PodInfo, reason: str, message: str) -> None: ...

    def is_pod_running_preemption(self, uid: str) -> bool: ...

    def spawn(self, coro: Any) -> None: ...


class StateHandle(Handle):
    """The Handle of one policy's plugins (``policy``; None for the implicit plugins of pods
    without a usable policy) over ``state``."""

    def __init__(self, state: ClusterState, store: PolicyStore | None = None, sources: MetricSources | None = None,
                 policy: str | None = None, actions: Actions | None = None) -> None:
        self.state = state
        self.store = store
        self.sources = sources
        self.policy = policy
        self.actions = actions

    # ------------------------------------------------------------------ reads
    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        return self.state.namespaces.get(namespace)

    def all_namespace_labels(self) -> Mapping[str, Mapping[str, str]]:
        return self.state.namespaces

    def default_spread_selector(self, pod: PodInfo):
        return self.state.workloads.default_selector(pod)

    def source(self, name: str) -> Any:
        """``metricview.SOURCE``: this policy's metrics; OVERCOMMIT_SOURCE: its spec.overcommit
        factors; OVERCOMMIT_ANYWHERE: whether any policy overcommits (NodeResourcesFit)."""
        if name == METRICS_SOURCE:
            return None if self.sources is None or self.policy is None else self.sources.view(self.policy)
        policies = self.store.policies if self.store is not None else {}
        if name == OVERCOMMIT_SOURCE:
            st = policies.get(self.policy) if self.policy is not None else None
            return st.overcommit if st is not None else None
        if name == OVERCOMMIT_ANYWHERE:
            return any(st.overcommit for st in policies.values())
        return None

    def waiting_pods(self):
        return self.state.waiting

    def pdbs(self):
        return list(self.state.pdbs.values())

    def volumes(self):
        return self.state.volumes

    def pod_groups(self):
        return self.state.pod_groups

    def dra(self):
        return self.state.dra

    def native_pod_groups(self):
        return self.state.native_pod_groups

    # ------------------------------------------------------------------ actions (the operator's)
    def is_pod_running_preemption(self, uid: str) -> bool:
        return self.actions is not None and self.actions.is_pod_running_preemption(uid)

    async def bind_pod(self, pod: PodInfo, node_name: str, annotations: Mapping[str, str]) -> Status:
        if self.actions is None:
            return await super().bind_pod(pod, node_name, annotations)
        return await self.actions.bind_pod(pod, node_name, annotations)

    async def nominate_for_expectation(self, pod: PodInfo, node_name: str) -> None:
        if self.actions is not None:
            await self.actions.nominate_for_expectation(pod, node_name)

    async def api_request(self, method: str, path: str, body: Any = None) -> Any:
        if self.actions is None:
            return await super().api_request(method, path, body)
        return await self.actions.api_request(method, path, body)

    async def patch_pod_group_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        if self.actions is not None:
            await self.actions.patch_pod_group_status(namespace, name, status)

    async def patch_native_pod_group_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        if self.actions is not None:
            await self.actions.patch_native_pod_group_status(namespace, name, status)

    def spawn(self, coro: Any) -> None:
        if self.actions is None:
            coro.close()
        else:
            self.actions.spawn(coro)

    def activate_pods(self, keys: Sequence[str]) -> int:
        return 0 if self.actions is None else self.actions.activate_pods(keys)

    def pod_event(self, pod: PodInfo, reason: str, message: str) -> None:
        if self.actions is not None:
            self.actions.pod_event(pod, reason, message)

    def pod_normal_event(self, pod: PodInfo, reason: str, message: str) -> None:
        if self.actions is not None:
            self.actions.pod_normal_event(pod, reason, message)
