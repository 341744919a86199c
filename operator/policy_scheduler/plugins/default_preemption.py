"""DefaultPreemption: when no node fits, find the node where evicting the fewest, least
important lower-priority pods makes room, and nominate it (upstream
plugins/defaultpreemption/default_preemption.go, v1.37; the decision is framework/preemption.py).

PostFilter, and PreEnqueue as upstream's with asynchronous preemption (on since v1.33): while
the operator is still deleting a preemptor's victims (``Handle.is_pod_running_preemption``), the
preemptor is gated with ``waiting for the preemption for this pod to be finished``, so it is not
tried again, and does not preempt again, before its victims are gone. It registers AssignedPod
Delete with a hint that always skips: the gated pod is re-checked on those events, and the plugins
that rejected it (NodeResourcesFit, ...) decide whether it goes.

Returns Success with the nominated node, or Unschedulable with upstream's
message prefixed ``preemption: `` (e.g. ``preemption: not eligible due to
preemptionPolicy=Never.``, ``preemption: 0/3 nodes are available: 1 No preemption victims found
for incoming pod, 2 Preemption is not helpful for scheduling.``).

The decision (``framework.preemption.PreemptionResult``: the nominated node, the victims, the
lower-priority pods whose nomination to clear) is written into the CycleState under
``RESULT_KEY``; the operator acts on it after the cycle (deleting the victims, clearing
nominations). PDBs come from ``Handle.pdbs()``.

Args (upstream DefaultPreemptionArgs): ``minCandidateNodesPercentage`` (default 10, 0..100)
and ``minCandidateNodesAbsolute`` (default 100, >= 0), not both 0: the dry run looks for
max(nodes x percentage / 100, absolute) candidates (capped at the nodes where preemption
may help) before picking one.

"""

from __future__ import annotations

from pydantic import Field, model_validator

from ..framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint, Resource
from ..framework.interface import (CycleState, EnqueueExtensions, NodeToStatus, PluginArgs, PostFilterPlugin,
                                   PreEnqueuePlugin)
from ..framework.model.nodetable import NodeTable
from ..framework.model.podinfo import PodInfo
from ..framework.preemption import PDB, PreemptionResult, preempt
from ..framework.cycle.schedule import NODE_FILTER_KEY, NodeFilter
from ..framework.group_preemption import GroupPreemption, pod_group_post_filter
from ..framework.status import Code, Status
from ..framework.validation import int32_errors, invalid, raise_if

NAME = "DefaultPreemption"
RESULT_KEY = f"{NAME}/result"  # CycleState key of the PreemptionResult of the last PostFilter
WAITING_MESSAGE = "waiting for the preemption for this pod to be finished"


def _skip(_pod, _old, _new) -> QueueingHint:
    """upstream isPodSchedulableAfterAssignedPodDeletion: always Skip; the plugins whose failure
    the preemption resolves decide when the pod goes."""
    return QueueingHint.SKIP


class DefaultPreemptionArgs(PluginArgs):
    """upstream DefaultPreemptionArgs and ValidateDefaultPreemptionArgs."""

    min_candidate_nodes_percentage: int = Field(10, alias="minCandidateNodesPercentage", strict=True)
    min_candidate_nodes_absolute: int = Field(100, alias="minCandidateNodesAbsolute", strict=True)

    @model_validator(mode="after")
    def _validate(self) -> "DefaultPreemptionArgs":
        pct, ab = self.min_candidate_nodes_percentage, self.min_candidate_nodes_absolute
        pp, ap = "minCandidateNodesPercentage", "minCandidateNodesAbsolute"
        errs = int32_errors(pp, pct) + int32_errors(ap, ab)
        if errs:
            raise_if(errs)
        if not 0 <= pct <= 100:
            errs.append(invalid(pp, pct, "not in valid range [0, 100]"))
        if ab < 0:
            errs.append(invalid(ap, ab, "not in valid range [0, inf)"))
        if pct == 0 and ab == 0:
            errs.append(invalid(pp, pct, "cannot be zero at the same time as minCandidateNodesAbsolute"))
            errs.append(invalid(ap, ab, "cannot be zero at the same time as minCandidateNodesPercentage"))
        raise_if(errs)
        return self


class DefaultPreemption(PreEnqueuePlugin, PostFilterPlugin, EnqueueExtensions):
    NAME = NAME
    Args = DefaultPreemptionArgs
    args: DefaultPreemptionArgs  # what Args parsed

    def pre_enqueue(self, pod: PodInfo) -> Status:
        if pod.uid and self.handle.is_pod_running_preemption(pod.uid):
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (WAITING_MESSAGE,))
        return Status.success()

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent(Resource.ASSIGNED_POD, ActionType.DELETE), _skip)]

    def post_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable,
                    statuses: NodeToStatus) -> tuple[Status, str | None]:
        node_filter = state.read(NODE_FILTER_KEY)
        if node_filter is None:
            return Status.error("no node filter in the cycle state (PostFilter outside schedule_one)"), None
        args = self.args
        pdbs = [b if isinstance(b, PDB) else PDB.from_dict(b) for b in self.handle.pdbs()]
        result: PreemptionResult = preempt(pod, nodes, statuses, pdbs, node_filter,
                                           args.min_candidate_nodes_percentage,
                                           args.min_candidate_nodes_absolute)
        state.write(RESULT_KEY, result)
        st = result.status
        if st.code == Code.SUCCESS:
            # upstream (v1.35+) says what it found; it ends up in the FailedScheduling message
            return Status(Code.SUCCESS, (f"preemption: found a potential placement for pod on node "
                                         f"{result.nominated_node}, preempting {len(result.victims)} victims",)), \
                result.nominated_node
        msg = st.message()
        if msg:
            st = Status(st.code, (f"preemption: {msg}",))
        return st, None

    def pod_group_post_filter(self, cycle, res) -> GroupPreemption:
        """PodGroupPostFilter: workload-aware preemption for an unschedulable pod group
        (framework/group_preemption.py)."""
        pdbs = [b if isinstance(b, PDB) else PDB.from_dict(b) for b in self.handle.pdbs()]
        return pod_group_post_filter(cycle, res, [m.pod for m in res.members], self.handle.native_pod_groups(), pdbs,
                                     NodeFilter(cycle.chain, cycle.nominator))


PLUGIN = DefaultPreemption
