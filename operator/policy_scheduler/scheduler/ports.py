"""What the scheduling driver (schedule_one.py, group_cycle.py) asks of the world around it. The
operator answers with its event recorder, telemetry, binding tasks, preemptor and suggestions
worker (cluster/); the what-if run with in-memory stand-ins on its virtual clock
(whatif/queue_run.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..framework.instrumentation import NOOP

if TYPE_CHECKING:  # pragma: no cover
    from ..cache.policies import PolicyState
    from ..framework.cycle.chain import Chain
    from ..framework.cycle.podgroup_result import PodGroupInfo
    from ..framework.cycle.schedule import Decision
    from ..framework.instrumentation import CycleRecorder
    from ..framework.interface import CycleState
    from ..framework.model.podinfo import PodInfo
    from ..framework.preemption import PreemptionResult
    from ..framework.queue.subqueues import QueuedPodInfo
    from ..framework.status import Code, Status


class Recorder(Protocol):
    """What the pods are told: a failure (FailedScheduling and the PodScheduled condition), a
    nomination (status.nominatedNodeName; None clears it), an event (Scheduled), and that a pod
    left the queue (its next failure is reported anew)."""

    def failure(self, pod: PodInfo, reason: str, msg: str, code: Code | None, once: bool = False) -> None: ...

    def nominate(self, pod: PodInfo, node: str | None) -> None: ...

    def event(self, pod: PodInfo, type_: str, reason: str, action: str, note: str) -> None: ...

    def forget(self, pod_key: str) -> None: ...


class Attempts(Protocol):
    """What is counted: attempts and their durations, the single-pod algorithm, the pods bound,
    the preemption attempts, and the pod-group cycle's metrics."""

    def attempt(self, result: str, policy: str | None, seconds: float | None = None) -> None: ...

    def cycle_recorder(self, policy: str | None) -> CycleRecorder: ...

    def algorithm(self, policy: str | None, chain: Chain, state: CycleState, decision: Decision) -> None: ...

    def scheduled(self, attempts: int, seconds: float) -> None: ...

    def preemption_attempt(self) -> None: ...

    def pod_group_attempt(self, result: str, policy: str | None, seconds: float) -> None: ...

    def pod_group_algorithm(self, seconds: float) -> None: ...

    def pod_group_preemption(self, code: Code, seconds: float, victims: int | None) -> None: ...


class NoAttempts:
    """Attempts that counts nothing (what-if, tests)."""

    def attempt(self, result: str, policy: str | None, seconds: float | None = None) -> None:
        pass

    def cycle_recorder(self, policy: str | None) -> CycleRecorder:
        return NOOP

    def algorithm(self, policy: str | None, chain: Chain, state: CycleState, decision: Decision) -> None:
        pass

    def scheduled(self, attempts: int, seconds: float) -> None:
        pass

    def preemption_attempt(self) -> None:
        pass

    def pod_group_attempt(self, result: str, policy: str | None, seconds: float) -> None:
        pass

    def pod_group_algorithm(self, seconds: float) -> None:
        pass

    def pod_group_preemption(self, code: Code, seconds: float, victims: int | None) -> None:
        pass


class Hints(Protocol):
    """A pod found no node (its FailedScheduling recorded already): what would place it may be
    searched for later (cluster/suggestions.py: off the scheduling loop's hot path, bounded).
    Called once per failed single-pod attempt; must return at once (no search here)."""

    def unschedulable(self, pod: PodInfo, policy: PolicyState, chain: Chain, decision: Decision) -> None: ...


class NoHints:
    """Hints that searches nothing (what-if, tests, ``run --suggestions=off``)."""

    def unschedulable(self, pod: PodInfo, policy: PolicyState, chain: Chain, decision: Decision) -> None:
        pass


class Binder(Protocol):
    """The binding cycle after Reserve and Permit (assumed on ``assumed.node_name``; ``status``:
    Success, or Wait when a Permit plugin parked the pod): the operator spawns its binding task
    (WaitOnPermit, PreBind, Bind, PostBind); what-if binds at once, or parks the pod at Permit on
    its virtual clock. False: the pod did not go to binding."""

    def start_binding(self, qpi: QueuedPodInfo, st: PolicyState, chain: Chain, state: CycleState,
                      decision: Decision, assumed: PodInfo, status: Status) -> bool: ...


class Victims(Protocol):
    """Carrying out a preemption the driver decided. ``start``: ``pod`` preempts (``victims`` to
    delete): mark it before it is requeued, its PreEnqueue must see it preempting. ``delete``: the
    preemption of ``result`` (nominations written, victims parked at Permit rejected already):
    its ``victims`` still to delete. ``preempt_group``: a pod group's preemption, whole."""

    def start(self, pod: PodInfo, victims: list[PodInfo]) -> None: ...

    def delete(self, pod: PodInfo, result: PreemptionResult, victims: list[PodInfo]) -> None: ...

    def preempt_group(self, info: PodGroupInfo, members: list[PodInfo], victims: list[PodInfo]) -> None: ...


class Rollouts(Protocol):
    """spec.rollout in the cycle: the chain that decides a pod and its arm, what the arm's
    decision counts, and a canary's binding."""

    def chain_for(self, st: PolicyState, pod: PodInfo) -> tuple[Chain, str]: ...

    def decided(self, st: PolicyState, pod: PodInfo, arm: str, decision: Decision, state: CycleState) -> None: ...

    def bound(self, st: PolicyState, pod: PodInfo, seconds: float | None, node: str) -> None: ...
