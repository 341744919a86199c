"""SchedulingPolicies: each one parsed, validated and built into a plugin chain; which policy a
pod is scheduled with.

``PolicyStore.on_policy`` gets the raw objects (the engine's informer) and keeps
one PolicyState per policy. A valid generation replaces the chain; an invalid edit of a working
policy keeps the last valid chain (pods keep being scheduled with it) and reports its errors on
the status. The store does no I/O: the engine is told through ``on_change`` (it writes the
status and requeues the waiting pods).

Every generation is judged by ``policy.validate`` (policy/check.py), the admission webhook's
check too: the limits, the models, the chain, the tuning bounds, the rollout candidate. A spec
past the limits of policy/limits.py (too deep, too big, a string or a list too long, the
decoder's ``Unreadable`` marker) is never parsed: the policy is ``unreadable`` (``Ready=False``,
reason ``Unreadable``, the message says why and where), exactly like an invalid one otherwise (a
working policy keeps its last valid chain). Nothing in one object stops the others.

A pod selects its policy by the ``policy-scheduler.io/policy`` label; without it, by its
namespace's ``policy-scheduler.io/default-policy`` label; else ``default`` (the operator's
--default-policy).

A policy with a namespaceSelector admits no pod of a namespace the cache does not hold yet (its
labels are unknown, not empty: a ``NotIn`` or ``DoesNotExist`` selector would admit it). The pod
waits, rejected by POLICY_SELECTION, and the namespace's ADD (a NamespaceChange, NAMESPACE_LABELS)
moves it back to the queue.

A policy belongs to one operator instance: the one whose --scheduler-name is the policy's
``spec.schedulerName`` (default ``policy-scheduler``). Other instances keep only its name and
owner (``foreign``), to tell a pod why they do not use it; they never build it, schedule with it
or write its status.

The last valid chain survives the process through the cluster: every valid generation is recorded
as a ControllerRevision (cache/revisions.py, cluster/revisions.py), and a policy whose current
generation is invalid when the operator starts is given the chain of its newest valid revision
(``restore``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .. import DEFAULT_POLICY_LABEL, POLICY_LABEL, SCHEDULER_NAME
from ..framework.cycle.chain import Chain
from ..framework.cycle.shadow import Shadow, shares_filters
from ..framework.interface import Handle
from ..framework.model.labels import LabelSelector
from ..framework.model.podinfo import PodInfo
from ..framework.registry import Registry
from ..metricsources.manager import MetricSources
from ..plugins import default_registry
from ..policy import Validated, validate
from ..policy.limits import spec_problem
from .rollouts import ABORTED, PROMOTED, PROMOTING, Rollout, candidate_hash

log = logging.getLogger("policy_scheduler")

DEFAULT_POLICY = "default"
POLICY_SELECTION = "PolicySelection"  # pseudo plugin name for pods no usable policy selects
PLURAL_PATH = "/apis/policy-scheduler.io/v1alpha1/schedulingpolicies"


def policy_name(pod: PodInfo) -> str:
    """The policy a pod asks for: its policy label, else DEFAULT_POLICY."""
    return pod.labels.get(POLICY_LABEL) or DEFAULT_POLICY


def policy_owner(spec: Any) -> str:
    """The instance a policy belongs to: its spec.schedulerName, SCHEDULER_NAME when unset. A
    value that cannot be a scheduler name (not a string, longer than 253 characters) leaves the
    policy to the default instance, whose model refuses it."""
    owner = spec.get("schedulerName") if isinstance(spec, dict) else None
    return owner if isinstance(owner, str) and 0 < len(owner) <= 253 else SCHEDULER_NAME


@dataclass(frozen=True)
class RevisionsProblem:
    """Why the policy's revisions cannot be kept (cluster/revisions.py): the condition
    ``RevisionsRecorded=False`` with this reason (NamespaceNotFound, Forbidden, RequestFailed) and
    message, written by policy_status.py."""

    reason: str
    message: str


@dataclass
class PolicyState:
    name: str
    generation: int = 0
    spec_raw: Any = None
    # the chain pods are scheduled with: that of the last valid generation. An invalid edit of a
    # working policy keeps it (and says so in the status) instead of stranding the policy's pods.
    chain: Chain | None = None
    chain_generation: int = 0
    good_spec: Any = None
    errors: list[str] = field(default_factory=list)  # problems of the current generation
    unreadable: str | None = None  # why the current generation cannot be read (then errors holds it too)
    unreadable_reported: tuple[int, str] | None = None  # (generation, why) of the last Warning event posted
    namespace_selector: LabelSelector | None = None
    overcommit: dict[str, float] | None = None  # spec.overcommit of the chain's generation (factors > 1)
    scheduled: int = 0
    last_scheduled_time: str | None = None
    dirty: bool = True
    last_written: dict | None = None
    uid: str = ""  # metadata.uid: the owner of the policy's revisions
    # the revision (cache/revisions.py) the chain was built from, and its generation: known once
    # recorded, or when the chain was restored from it
    revision: int = 0
    revision_generation: int = 0
    # spec.rollout of the chain's generation: the candidate's chain, the shadow comparing it with
    # the chain, and the rollout (cache/rollouts.py; kept after it ended, for the status)
    candidate: Chain | None = None
    shadow: Shadow | None = None
    rollout: Rollout | None = None
    rollout_seen: Any = None  # status.rollout as last read from the cluster (a new leader continues it)
    revisions_problem: RevisionsProblem | None = None  # why its revisions cannot be kept (RevisionsRecorded)

    @property
    def ready(self) -> bool:
        return self.chain is not None and not self.errors

    @property
    def revision_in_use(self) -> int | None:
        """The number of the ControllerRevision pods are scheduled with, when known."""
        if self.chain is None or not self.revision or self.revision_generation != self.chain_generation:
            return None
        return self.revision


def _use(st: PolicyState, got: Validated, generation: int) -> None:
    """Schedule the policy's pods with ``got``'s chain, built from its spec of ``generation``, and
    its candidate (spec.rollout's) beside it."""
    parsed, chain, candidate = got.spec, got.chain, got.candidate
    st.chain, st.chain_generation, st.good_spec = chain, generation, parsed
    st.namespace_selector = got.namespace_selector
    st.overcommit = (parsed.overcommit.factors() if parsed.overcommit is not None else None) or None
    st.candidate = candidate
    ro = parsed.rollout
    if ro is None or candidate is None:
        st.shadow = None
        old = st.rollout
        if old is not None and (old.phase == PROMOTING or old.active):
            cand = old.spec.candidate
            if shares_filters(parsed, cand) and [p.weight for p in parsed.plugins] == [p.weight for p in cand.plugins]:
                # the candidate's chain is the spec's now: promoted (by the operator, or `rollout promote`)
                old.finish(PROMOTED, f"promoted: generation {generation} schedules with the candidate's chain")
            else:
                old.finish(ABORTED, "spec.rollout was removed")
        return
    h = candidate_hash(ro.model_dump(by_alias=True, exclude_none=True))
    if st.rollout is None or st.rollout.hash != h or st.rollout.phase == ABORTED:  # added again: it runs again
        st.rollout = Rollout(ro, h, generation)
        st.rollout.adopt(st.rollout_seen)
    else:
        st.rollout.spec, st.rollout.generation = ro, generation  # thresholds may change on the way
    st.shadow = Shadow(chain, candidate, shares_filters(parsed, ro.candidate))


class PolicyStore:
    """Every SchedulingPolicy by name, with its chain; resolves the policy of a pod.

    ``registry``: the plugins chains are built from (``plugins.default_registry()`` unless
    given: pass another to add out-of-tree plugins). ``sources``: the metric sources, told of
    every policy change. ``handle_for(name)``: the framework Handle of that policy's plugins.
    ``namespaces``: namespace name -> labels (read, never written, for namespaceSelector).
    ``on_change(state)``: called after a policy was created or changed (not on deletion).
    ``on_counts(ready, not_ready)``: called after every change (the operator's readiness gauge).
    """

    def __init__(self, sources: MetricSources, handle_for: Callable[[str], Handle], *,
                 registry: Registry | None = None, namespaces: Mapping[str, Mapping[str, str]] | None = None,
                 on_counts: Callable[[int, int], None] | None = None,
                 on_change: Callable[[PolicyState], None] | None = None,
                 scheduler_name: str = SCHEDULER_NAME, default_policy: str = DEFAULT_POLICY) -> None:
        self.scheduler_name = scheduler_name
        self.default_policy = default_policy
        self.foreign: dict[str, str] = {}  # policies of other instances: name -> their spec.schedulerName
        self.registry = registry if registry is not None else default_registry()
        self.sources = sources
        self.handle_for = handle_for
        self.namespaces = namespaces if namespaces is not None else {}
        self.on_counts = on_counts  # (ready, not ready) after every change: the operator's gauge
        self.on_change = on_change
        self.policies: dict[str, PolicyState] = {}
        # Filter's round-robin start, shared by every policy's chain (upstream: one per scheduler)
        self.round_robin: list[int] = [0]

    def on_policy(self, event: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") if isinstance(body, Mapping) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(meta, dict) or not isinstance(name, str) or not name:
            log.warning("a SchedulingPolicy %s event without a name: ignored", event)
            return
        if event == "DELETED":
            self.foreign.pop(name, None)
            st = self.policies.pop(name, None)
            self.sources.policy_deleted(name)
            if st is not None:
                log.info("SchedulingPolicy %s deleted; its pods wait until a policy selects them", name)
                self._update_gauge()
            return
        gen = meta.get("generation")
        gen = gen if isinstance(gen, int) and not isinstance(gen, bool) else 0
        spec = body.get("spec")
        owner = policy_owner(spec)
        if owner != self.scheduler_name:
            if self.foreign.get(name) != owner:
                log.info("SchedulingPolicy %s belongs to scheduler %s (spec.schedulerName); left alone", name, owner)
            self.foreign[name] = owner
            if self.policies.pop(name, None) is not None:  # handed over to another instance
                self.sources.policy_deleted(name)
                self._update_gauge()
            return
        self.foreign.pop(name, None)
        st = self.policies.get(name)
        status = body.get("status")
        seen = status.get("rollout") if isinstance(status, dict) else None
        if st is not None:
            st.rollout_seen = seen
            if st.rollout is not None:
                st.rollout.adopt(seen)  # what the leader counted (counts only grow)
        unreadable = spec_problem(spec)  # policy/limits.py, before anything else reads the spec
        if st is not None and st.generation == gen and (
                st.spec_raw == spec if unreadable is None else st.unreadable == unreadable):
            return  # our own status write, or a resync
        if st is None:
            st = self.policies[name] = PolicyState(name, rollout_seen=seen)
        st.generation, st.spec_raw, st.dirty = gen, spec if unreadable is None else None, True
        st.uid = str(meta.get("uid") or "")
        st.unreadable = unreadable
        # a plugin constructor's bug is raised: the informer reports the handler's failure
        got = validate(spec, self.registry, self.handle_for(name), raise_bugs=True)
        if isinstance(got, list):
            st.errors = got
        elif problems := self.sources.policy_updated(name, got.spec):
            st.errors = [f"spec.{x}" for x in problems]
        else:
            got.chain.start = self.round_robin  # one round-robin start for all policies, as upstream's
            _use(st, got, gen)
            st.errors = []
        if st.ready and st.chain is not None:  # (ready: a chain and no errors)
            log.info("SchedulingPolicy %s (generation %d) is ready: %s", name, gen,
                     ", ".join(p.name for p in st.chain.resolved))
        elif st.chain is not None:
            self.sources.policy_updated(name, st.good_spec)  # the last valid generation keeps its metrics
            log.warning("SchedulingPolicy %s generation %d is invalid: %s; still scheduling with generation %d",
                        name, gen, "; ".join(st.errors), st.chain_generation)
        else:
            self.sources.policy_deleted(name)  # an invalid policy reads no metrics
            log.warning("SchedulingPolicy %s (generation %d) is invalid: %s", name, gen, "; ".join(st.errors))
        self._update_gauge()
        if self.on_change is not None:
            self.on_change(st)

    def restore(self, name: str, spec: Any, generation: int, revision: int) -> list[str]:
        """Schedule the pods of a policy whose current generation is invalid, and which has no
        chain, with a recorded revision (``spec`` of ``generation``; cluster/revisions.py): after
        a restart or a failover the last valid chain is gone with the process that held it.
        Returns the revision's problems (empty: its chain is in use); a policy that is unknown,
        valid or has a chain is left alone."""
        st = self.policies.get(name)
        if st is None or st.chain is not None or not st.errors:
            return [f"SchedulingPolicy {name} is unknown, valid or has a chain"]
        got = validate(spec, self.registry, self.handle_for(name))  # a plugin's bug: this revision is not usable
        if isinstance(got, list):
            return got
        problems = self.sources.policy_updated(name, got.spec)
        if problems:
            self.sources.policy_deleted(name)
            return [f"spec.{x}" for x in problems]
        got.chain.start = self.round_robin
        _use(st, got, generation)
        st.revision, st.revision_generation, st.dirty = revision, generation, True
        log.warning("SchedulingPolicy %s generation %d is invalid: %s; scheduling with revision %d (generation %d) "
                    "read from the cluster: %s", name, st.generation, "; ".join(st.errors), revision, generation,
                    ", ".join(p.name for p in got.chain.resolved))
        self._update_gauge()
        if self.on_change is not None:
            self.on_change(st)
        return []

    def validate(self, spec: Any) -> list[str]:
        """The problems of ``spec`` (empty: valid), exactly as ``on_policy`` would report them on
        the status, without keeping anything (``policy.validate`` with this store's registry)."""
        got = validate(spec, self.registry)
        return got if isinstance(got, list) else []

    def _update_gauge(self) -> None:
        """Tell ``on_counts`` how many policies are ready and how many are not."""
        if self.on_counts is not None:
            ready = sum(1 for p in self.policies.values() if p.ready)
            self.on_counts(ready, len(self.policies) - ready)

    def default_policy_of(self, namespace: str) -> str:
        """The policy of a namespace's unlabelled pods: its default-policy label, else ours."""
        return (self.namespaces.get(namespace) or {}).get(DEFAULT_POLICY_LABEL) or self.default_policy

    def policy_name(self, pod: PodInfo) -> str:
        """The policy a pod asks for: its policy label, else its namespace's default policy,
        else this instance's default policy."""
        return pod.labels.get(POLICY_LABEL) or self.default_policy_of(pod.namespace)

    def admitted_namespaces(self, st: PolicyState) -> int:
        """How many known namespaces may use the policy (its namespaceSelector)."""
        if st.namespace_selector is None:
            return len(self.namespaces)
        return sum(1 for labels in self.namespaces.values() if st.namespace_selector.matches(labels))

    def resolve_policy(self, pod: PodInfo) -> tuple[PolicyState | None, str]:
        """The policy ``pod`` is scheduled with, or None and why none can be used."""
        name = self.policy_name(pod)
        st = self.policies.get(name)
        if st is None:
            owner = self.foreign.get(name)
            if owner is not None:
                return None, (f"SchedulingPolicy {name!r} belongs to scheduler {owner!r} (its spec.schedulerName), "
                              f"not to {self.scheduler_name!r}")
            if POLICY_LABEL in pod.labels:
                return None, f"SchedulingPolicy {name!r} (label {POLICY_LABEL}) does not exist"
            ns_default = (self.namespaces.get(pod.namespace) or {}).get(DEFAULT_POLICY_LABEL)
            if ns_default:
                return None, (f"SchedulingPolicy {name!r} (label {DEFAULT_POLICY_LABEL} of namespace "
                              f"{pod.namespace!r}) does not exist")
            return None, (f"no SchedulingPolicy selects this pod: it has no {POLICY_LABEL} label "
                          f"and there is no policy named {self.default_policy!r}")
        if st.chain is None:
            return None, f"SchedulingPolicy {name!r} is not Ready: {'; '.join(st.errors)}"
        if st.namespace_selector is not None:
            labels = self.namespaces.get(pod.namespace)
            if labels is None:  # not seen yet (its ADD is on the way): its labels are unknown, not empty
                return None, (f"SchedulingPolicy {name!r} selects namespaces (spec.namespaceSelector) and namespace "
                              f"{pod.namespace!r} is not known yet: not admitted until it is")
            if not st.namespace_selector.matches(labels):
                return None, f"SchedulingPolicy {name!r} does not admit pods of namespace {pod.namespace!r}"
        return st, ""
