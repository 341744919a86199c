"""The pending pods of this scheduler as the watch shows them: each one's policy, its nomination
as the API says (reconciled with the nominator's), into the queue; out again once bound or gone
(upstream addPodToSchedulingQueue, updatePodInSchedulingQueue, deletePodFromSchedulingQueue).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

from .. import POLICY_LABEL
from ..cache.policies import PolicyState
from ..framework.model.podinfo import PodInfo, parse_pod
from ..framework.queue.nominator import Nominator
from ..framework.queue.scheduling_queue import SchedulingQueue

log = logging.getLogger("policy_scheduler")


class PendingPods:
    """``policy_name(pod)``: the policy a pod names (or its namespace's default); ``policies``:
    every policy by name; ``forget(key)``: the recorder's (its next failure is reported anew);
    ``wake()``: the loop has pods to pop."""

    def __init__(self, queue: SchedulingQueue, nominator: Nominator, policy_name: Callable[[PodInfo], str],
                 policies: Mapping[str, PolicyState], forget: Callable[[str], None], wake: Callable[[], None]) -> None:
        self.queue, self.nominator, self.policy_name, self.policies = queue, nominator, policy_name, policies
        self.forget_reported, self.wake = forget, wake
        self.api_nominated: dict[str, str | None] = {}  # pending pod -> status.nominatedNodeName as last seen
        self.policy_of: dict[str, str] = {}  # pending pod key -> policy it was queued under

    def add(self, body: Mapping[str, Any]) -> None:
        """upstream addPodToSchedulingQueue / updatePodInSchedulingQueue: its policy, its
        nomination as the API says (or as a PostFilter just made it), then the queue."""
        pod = parse_pod(body)
        key = pod.key
        nominator = self.nominator
        policy = self.policy_name(pod)
        api_was = self.api_nominated.get(key)
        self.api_nominated[key] = pod.nominated_node_name
        if pod.nominated_node_name:
            nominator.add(pod, pod.nominated_node_name)
        elif (held := nominator.node_of(key)) is not None:
            if api_was:  # the API took the nomination away
                nominator.remove(key)
            else:
                # upstream UpdateNominatedPod: an update without nominatedNodeName right after a
                # PostFilter nominated the pod in memory (our status patch not applied yet, or an
                # older write seen now) keeps the reservation, else another pod takes its room
                pod.nominated_node_name = held
                nominator.add(pod, held)
        self.policy_of[key] = policy
        queue = self.queue
        active = queue.active_count
        queue.add(pod, policy)  # for a known pod: an update (which may ungate it)
        if queue.active_count > active:
            self.wake()

    def forget(self, key: str) -> None:
        """The pod is bound (as the watch shows it) or gone: out of the queue and the nominator."""
        self.queue.delete(key)
        self.nominator.remove(key)
        self.api_nominated.pop(key, None)
        self.forget_reported(key)
        pol = self.policy_of.pop(key, None)
        if pol:
            st = self.policies.get(pol)
            if st is not None:
                st.dirty = True

    def namespace_default_changed(self, namespace: str) -> int:
        """The namespace's default-policy label changed: its pending pods without a policy label
        now belong to another policy, and are tried again at once under it. Returns how many."""
        prefix = namespace + "/"
        queue = self.queue
        moved = []
        for key, policy in list(self.policy_of.items()):
            if not key.startswith(prefix):
                continue
            qpi = queue.get(key)
            if qpi is None or POLICY_LABEL in qpi.pod.labels:
                continue
            new = self.policy_name(qpi.pod)
            if new != policy:
                queue.add(qpi.pod, new)
                self.policy_of[key] = new
                moved.append(key)
        if moved and queue.activate(moved):
            self.wake()
        return len(moved)
