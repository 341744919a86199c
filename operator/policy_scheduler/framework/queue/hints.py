"""The queue's questions to a policy's plugins, apart from the sub-queue moves they decide
(scheduling_queue.py): PreEnqueue (may a pod enter activeQ or backoffQ, or does it wait gated in
the pool?) and the queueing hints (may this cluster event, or this update of the pod, have made a
waiting pod schedulable? upstream isPodWorthRequeuing, podMatchesEvent and isPodUpdated). Nothing
here moves a pod; the answers are the queueing strategies below.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Protocol, Sequence

from ..cycle.runtime import Abort, call, status_code
from ..events import DEFAULT_REGISTRATION, ClusterEvent, ClusterEventWithHint, QueueingHint, call_hint
from ..instrumentation import NOOP, PRE_ENQUEUE
from ..model.podinfo import PodInfo
from ..status import Status
from .subqueues import QueuedPodInfo

# queueing strategies (upstream queueingStrategy)
SKIP, AFTER_BACKOFF, IMMEDIATELY = 0, 1, 2


class QueueProfile(Protocol):
    """What the queue reads of a policy's chain (framework.cycle.chain.Chain has all of it)."""

    queue_sort: Any  # a QueueSortPlugin or None
    pre_enqueue: Sequence[Any]  # PreEnqueuePlugins, in order
    events: Mapping[str, Sequence[ClusterEventWithHint]]  # rejecting plugin -> its registrations


class _NoProfile:
    queue_sort = None
    pre_enqueue: Sequence[Any] = ()
    events: Mapping[str, Sequence[ClusterEventWithHint]] = {}


NO_PROFILE = _NoProfile()  # a policy without a chain: no PreEnqueue, no registrations


_IGNORED_METADATA = ("resourceVersion", "generation", "managedFields", "finalizers")
_KEPT_STATUS = ("resourceClaimStatuses", "extendedResourceClaimStatus")


def _strip(raw: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in raw.items() if k not in ("metadata", "status")}
    out["metadata"] = {k: v for k, v in (raw.get("metadata") or {}).items() if k not in _IGNORED_METADATA}
    status = raw.get("status") or {}
    out["status"] = {k: status[k] for k in _KEPT_STATUS if k in status}
    return out


def is_pod_updated(old: PodInfo, new: PodInfo) -> bool:
    """upstream isPodUpdated: did the pod change in a way that may make it schedulable?

    Ignores resourceVersion, generation, managedFields, finalizers and the status (except
    resource-claim statuses), so the scheduler's own PodScheduled condition write does not
    pull a pod out of the unschedulable pool."""
    if old.raw is None or new.raw is None:
        return old != new
    return _strip(old.raw) != _strip(new.raw)


def _first(plugins: Sequence[Any], name: str) -> list[Any]:
    """``plugins`` with the one named ``name`` first."""
    return [p for p in plugins if p.NAME == name] + [p for p in plugins if p.NAME != name]


def _named(plugins: Sequence[Any], name: str) -> Any:
    """The plugin of ``plugins`` named ``name``, or None."""
    return next((p for p in plugins if p.NAME == name), None)


class Hints:
    """The answers of one queue's policies. ``profile(policy)``: the policy's chain as the queue
    reads it (its PreEnqueue plugins and its plugins' event registrations); ``pseudo``: the
    registrations of rejector names that are not plugins."""

    def __init__(self, profile: Callable[[str], QueueProfile],
                 pseudo: Mapping[str, Sequence[ClusterEventWithHint]]) -> None:
        self._profile = profile
        self._pseudo = pseudo
        # (_first or _named, id of a chain's PreEnqueue plugins, plugin name) -> (those plugins,
        # what the function returned for them)
        self._per_chain: dict[tuple[Callable[..., Any], int, str], tuple[Sequence[Any], Any]] = {}

    def _registrations(self, qpi: QueuedPodInfo, plugin: str) -> Sequence[ClusterEventWithHint]:
        regs = self._profile(qpi.policy).events.get(plugin)
        if regs is None:
            regs = self._pseudo.get(plugin)
        return DEFAULT_REGISTRATION if regs is None else regs

    def pre_enqueue(self, qpi: QueuedPodInfo) -> Status | None:
        """upstream runPreEnqueuePlugins: the recorded gating plugin first, then the others in
        order; the first non-success gates the pod. Returns that status, or None (may go)."""
        plugins: Sequence[Any] = self._profile(qpi.policy).pre_enqueue
        gating = qpi.gating_plugin
        if gating is not None and len(plugins) > 1 and plugins[0].NAME != gating:
            plugins = self._gating_first(plugins, gating)
        for p in plugins:
            try:
                st = call(NOOP, p.NAME, PRE_ENQUEUE, PRE_ENQUEUE, status_code, p.pre_enqueue, qpi.pod, log_key=qpi.key)
            except Abort as a:  # a broken PreEnqueue gates the pod and says why
                st = a.status
            if not st.is_success:
                qpi.gating_plugin = p.NAME
                qpi.gating_message = st.message()
                qpi.unschedulable_plugins.add(p.NAME)  # upstream: Insert, the rejectors stay
                return st
        qpi.gating_plugin = None
        qpi.gating_message = ""
        return None

    def _gating_first(self, plugins: Sequence[Any], gating: str) -> Sequence[Any]:
        """``plugins`` with the one named ``gating`` first."""
        return self._chain_memo(_first, plugins, gating)

    def _chain_memo(self, build: Callable[[Sequence[Any], str], Any], plugins: Sequence[Any], name: str) -> Any:
        """``build(plugins, name)``, kept per chain's PreEnqueue plugins and plugin name (a gated
        pod is checked on every event its gate registered); at most 256 kept."""
        k = (build, id(plugins), name)
        hit = self._per_chain.get(k)
        if hit is not None and hit[0] is plugins:
            return hit[1]
        if len(self._per_chain) > 256:
            self._per_chain.clear()
        out = build(plugins, name)
        self._per_chain[k] = (plugins, out)
        return out

    def still_gated(self, qpi: QueuedPodInfo) -> bool:
        """The plugin that gates ``qpi`` still rejects it, with the same message: running
        ``pre_enqueue`` would gate it again exactly as it is (that plugin runs first)."""
        gating = qpi.gating_plugin
        if gating is None:
            return False
        p = self._plugin(self._profile(qpi.policy).pre_enqueue, gating)
        if p is None:
            return False
        try:
            st = call(NOOP, gating, PRE_ENQUEUE, PRE_ENQUEUE, status_code, p.pre_enqueue, qpi.pod, log_key=qpi.key)
        except Abort as a:
            st = a.status
        return not st.is_success and st.message() == qpi.gating_message

    def _plugin(self, plugins: Sequence[Any], name: str) -> Any:
        """The PreEnqueue plugin of ``plugins`` named ``name`` (None if none)."""
        return self._chain_memo(_named, plugins, name)

    def _matching(self, qpi: QueuedPodInfo, plugin: str, event: ClusterEvent,
                  cache: dict | None) -> Sequence[ClusterEventWithHint]:
        """The plugin's registrations (in the pod's policy) that match ``event``; ``cache``
        keeps them for the other pods of one event (they depend on the policy and plugin only)."""
        k = (qpi.policy, plugin)
        regs = cache.get(k) if cache is not None else None
        if regs is None:
            regs = tuple(r for r in self._registrations(qpi, plugin) if r.event.matches(event))
            if cache is not None:
                cache[k] = regs
        return regs

    def strategy(self, qpi: QueuedPodInfo, event: ClusterEvent, old: Any, new: Any,
                 cache: dict | None = None) -> int:
        """upstream isPodWorthRequeuing: only the hints of the plugins that rejected the pod,
        for events they registered, count. No rejector: after backoff. A wildcard event: after
        backoff. A QUEUE from a Pending plugin: immediately."""
        unschedulable, pending = qpi.unschedulable_plugins, qpi.pending_plugins
        if (not unschedulable and not pending) or event.is_wildcard:
            return AFTER_BACKOFF
        rejectors = unschedulable | pending if pending else unschedulable
        result = SKIP
        pod = qpi.pod
        for plugin in rejectors:
            for reg in self._matching(qpi, plugin, event, cache):
                if call_hint(reg, pod, old, new) == QueueingHint.QUEUE:
                    if plugin in qpi.pending_plugins:
                        return IMMEDIATELY
                    result = AFTER_BACKOFF
                    break
        return result

    def gated_interested(self, qpi: QueuedPodInfo, event: ClusterEvent, cache: dict | None = None) -> bool:
        if event.is_wildcard:
            return True
        return bool(self._matching(qpi, qpi.gating_plugin or "", event, cache))
