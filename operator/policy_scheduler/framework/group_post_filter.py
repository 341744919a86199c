"""The PodGroupPostFilter extension point as kube-scheduler 1.37 runs it for an unschedulable
pod group (framework/runtime/framework.go RunPodGroupPostFilterPlugins), over the policy's
PostFilter plugins that have a pod-group part, in the policy's order:

- DynamicResources (dynamicresources.go PodGroupPostFilter): nothing for a CompositePodGroup nor
  for a PodGroup with ``schedulingConstraints`` (plain Unschedulable, no reason); otherwise each
  queued member whose DynamicResources PreFilter ran in the cycle gets its PostFilter
  (deallocateOrDeletePodClaims: one unavailable claim reserved for nobody else is deallocated),
  and the answer is Unschedulable ``deallocation and deletion of ResourceClaims completed``. No
  member reached its PreFilter (the group failed PlacementFeasible before any member): upstream
  finds no state in the group's cycle state, an Error ``not found``.
- DefaultPreemption: workload-aware preemption (framework/group_preemption.py).

A Success answers at once (the earlier reasons are dropped), as does UnschedulableAndUnresolvable;
Unschedulable reasons are collected, and the result is Unschedulable with all of them (none: no
reason at all); any other code is an Error ``error in "<plugin>" PodGroupPostFilter plugins:
<message>``. Pure.
"""

from __future__ import annotations

from typing import Any, Callable

from .cycle.podgroup_result import GroupCycleRunner, GroupResult, GroupStatus
from .status import Code

DRA = "DynamicResources"
DRA_DONE = "deallocation and deletion of ResourceClaims completed"
NOT_FOUND = "not found"  # upstream fwk.ErrNotFound's text


def dra_pod_group_post_filter(plugin: Any, cycle: GroupCycleRunner, res: GroupResult, composite: bool) -> GroupStatus:
    """DynamicResources' PodGroupPostFilter for the root result ``res`` (its plugin's per-pod
    PostFilter does the deallocation, on each member's cycle state)."""
    if composite or res.info.topology_key:
        return GroupStatus(Code.UNSCHEDULABLE)
    ran = False
    for m in res.members:
        st, _ = plugin.post_filter(m.state, m.pod, cycle.nodes, None)
        if st.code == Code.ERROR and st.message() == NOT_FOUND:
            continue  # no PreFilter state for this member
        ran = True
        if st.code == Code.ERROR:
            return GroupStatus.error(st.message())
    if not ran:
        return GroupStatus.error(NOT_FOUND)
    return GroupStatus(Code.UNSCHEDULABLE, [DRA_DONE])


def run_pod_group_post_filters(chain: Any, cycle: GroupCycleRunner, res: GroupResult,
                               composite: bool) -> tuple[Any, GroupStatus]:
    """(DefaultPreemption's GroupPreemption, None when it did not run; the combined status,
    Unschedulable without a reason when the policy has no PodGroupPostFilter plugin)."""
    reasons: list[str] = []
    preemption = None
    for p in getattr(chain, "post_filter", ()):
        if p.NAME == DRA and hasattr(p, "post_filter"):
            st = dra_pod_group_post_filter(p, cycle, res, composite)
        else:
            runner: Callable[[GroupCycleRunner, GroupResult], Any] | None = getattr(p, "pod_group_post_filter", None)
            if runner is None:
                continue
            preemption = runner(cycle, res)
            st = preemption.status
        if st.is_success or st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            return preemption, st
        if st.code == Code.UNSCHEDULABLE:
            reasons += ([st.err] if st.err is not None else []) + st.reasons
            continue
        return preemption, GroupStatus.error(f'error in "{p.NAME}" PodGroupPostFilter plugins: {st.message()}')
    return preemption, GroupStatus(Code.UNSCHEDULABLE, reasons)
