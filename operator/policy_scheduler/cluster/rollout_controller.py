"""RolloutController: a policy's spec.rollout in the operator (cache/rollouts.py holds the data).

The engine asks it which chain decides a pod (``chain_for``: the candidate for a canary pod) and
tells it what happened (``decided`` after every cycle, ``bound`` after every binding). It runs
the shadow comparison (framework/cycle/shadow.py) right after the stable cycle, on the same
table, before the pod is assumed; judges the canary after each of its failures (so a candidate
that rejects everything is rolled back within a few pods) and every ``interval`` seconds; and
acts on a verdict:

- a breach: phase RolledBack, a Warning event ``RolloutRolledBack`` on the policy, the rollbacks
  counter, and the policy's waiting pods tried again at once, now with the stable chain;
- a promotion: phase Promoting, then a merge patch of the policy's spec (plugins, disabled and
  percentageOfNodesToScore become the candidate's; rollout is removed) on the resourceVersion
  of a fresh read whose spec.rollout is still the one judged: an edit of the policy meanwhile
  (409) is read again; a changed spec.rollout stops the write (another candidate: the watch
  brings its rollout; other thresholds: judged again). The next generation ends it as Promoted.
  A patch that fails is tried again at the next tick, by this leader or the next one (the phase
  is in the status).

Only the leader decides pods, so only it counts attempts; what it counted reaches the status
every few seconds, where a new leader picks it up (PolicyStore feeds ``Rollout.adopt``). Bound
pods are counted from the cluster on every replica (``seen_bound``), but only those whose
decision annotation this scheduler's binder signed (cluster/decision_mac.py): an annotation a
tenant wrote on its own pods is ignored, counted in ``policy_scheduler_forged_decisions_total``
and logged once per pod.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import Any, Callable, Mapping

import numpy as np
import orjson

from ..cache.policies import PLURAL_PATH, PolicyState
from ..cache.rollouts import (ACTIVE, CANARY, PROGRESSING, PROMOTING, ROLLED_BACK, SHADOWING, STABLE,
                              Rollout, candidate_hash)
from ..cache.state import ClusterState
from ..explain import DECISION_ANNOTATION, ROLLOUT_KEY
from ..framework.cycle.chain import Chain
from ..framework.cycle.decision import Decision
from ..framework.interface import CycleState
from ..framework.model.nodetable import CPU, MEMORY
from ..framework.model.podinfo import PodInfo
from ..framework.queue.nominator import Nominator
from ..policy.rollout import RolloutSpec
from .decision_mac import DecisionKey
from .kubeclient import REQUEST_ERRORS, ApiError
from .recorder import EventRecorder
from .telemetry import Telemetry

log = logging.getLogger("policy_scheduler")

ZONE_LABEL = "topology.kubernetes.io/zone"
PHASES = ("Shadowing", "Progressing", "Promoting", "Promoted", "RolledBack", "Aborted")
MAX_EARLY = 100_000  # rollout pods listed before the policies, kept until the first tick judges them
MAX_FORGED_REMEMBERED = 10_000  # pods whose forged annotation was counted and logged (the oldest go first)
PROMOTION_CONFLICTS = 5  # a promotion's read and patch, tried again this many times on 409


class RolloutController:
    """``policies``: name -> PolicyState (live); ``requeue(name)``: try the policy's waiting pods
    again now; ``write_status(st)``: write its status soon; ``patch_spec(name, patch)``: a
    leader-only merge patch of the policy (ApiCalls); ``read(path)``: a GET (the promotion's fresh
    read; None: the patch goes without a precondition); ``key``: the binder's DecisionKey, which
    verifies the decision annotations of bound pods."""

    def __init__(self, state: ClusterState, policies: Mapping[str, PolicyState], nominator: Nominator,
                 recorder: EventRecorder, telemetry: Telemetry, patch_spec: Callable[[str, dict], Any],
                 requeue: Callable[[str], None], write_status: Callable[[PolicyState], None],
                 may_write: Callable[[], bool], interval: float = 1.0, *, key: DecisionKey | None = None,
                 read: Callable[[str], Any] | None = None) -> None:
        self.state, self.policies, self.nominator = state, policies, nominator
        self.recorder, self.telemetry = recorder, telemetry
        self.patch_spec, self.requeue, self.write_status, self.may_write = patch_spec, requeue, write_status, may_write
        self.interval = interval
        self.key = key or DecisionKey()
        self.read = read
        self._forged: OrderedDict[str, None] = OrderedDict()  # UIDs of pods counted as forged (bounded)
        # pods seen before any policy was listed: uid -> (policy, candidate, arm, verified, pod), for the first tick
        self._early: dict[str, tuple[str, str, str, bool, str]] = {}
        self._promoting: set[str] = set()  # policies whose promotion patch is in flight
        self._promoted: set[tuple[str, str]] = set()  # (policy, candidate) promotions written

    # ------------------------------------------------------------------ the scheduling cycle
    @staticmethod
    def chain_for(st: PolicyState, pod: PodInfo) -> tuple[Chain, str]:
        """The chain that decides ``pod`` and its arm: the candidate's for a canary pod."""
        ro = st.rollout
        if ro is None or st.candidate is None or ro.phase != PROGRESSING:
            return st.chain, STABLE  # type: ignore[return-value]
        arm = ro.arm(pod.uid)
        return (st.candidate if arm == CANARY else st.chain), arm  # type: ignore[return-value]

    def decided(self, st: PolicyState, pod: PodInfo, arm: str, decision: Decision, state: CycleState) -> None:
        """After a cycle, before the pod is assumed: the shadow's decision, or the canary's count."""
        ro = st.rollout
        if ro is None:
            return
        if ro.phase == SHADOWING and st.shadow is not None:
            r = st.shadow.compare(pod, self.state.table, state, decision, nominator=self.nominator)
            ro.shadow(r)
            self.telemetry.rollout_shadow.labels(st.name, "changed" if r.changed else "same").inc()
        elif ro.phase == PROGRESSING:
            state.write(ROLLOUT_KEY, {"arm": arm, "candidate": ro.hash})  # into the decision annotation
            failed = not decision.scheduled
            ro.attempt(arm, failed)
            self.telemetry.rollout_attempts.labels(st.name, arm, "unschedulable" if failed else "scheduled").inc()
            if failed and arm == CANARY:
                self.judge(st)

    def bound(self, st: PolicyState, pod: PodInfo, seconds: float | None, node: str) -> None:
        """This process bound a canary rollout's pod: its time to scheduled and node (the window)."""
        ro = st.rollout
        if ro is None or ro.phase != PROGRESSING:
            return
        ro.bound(ro.arm(pod.uid), seconds, node)

    def seen_bound(self, body: Mapping[str, Any]) -> None:
        """A bound pod as the watch delivers it (every replica): a pod a canary decided names the
        arm and the candidate in its decision annotation, and counts as bound in that arm when this
        scheduler's binder signed that annotation for that pod and node (decision_mac.py); on the
        leader, reaching ``promote.pods`` promotes."""
        meta = body.get("metadata") or {}
        ann = (meta.get("annotations") or {}).get(DECISION_ANNOTATION)
        if not isinstance(ann, str) or '"rollout":' not in ann:
            return
        try:
            d = orjson.loads(ann)
            policy, ro_ann = d["policy"], d["rollout"]
            arm, chash = ro_ann["arm"], ro_ann["candidate"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return
        if not (isinstance(policy, str) and isinstance(arm, str) and isinstance(chash, str)) \
                or len(policy) > 253 or len(arm) > 16 or len(chash) > 64:  # none of ours: kept small
            return
        uid = str(meta.get("uid") or "")
        st = self.policies.get(policy)
        if st is None:  # pods listed before the policies (a start): judged by the first tick
            if not self.policies and uid and len(self._early) < MAX_EARLY:
                self._early[uid] = (policy, chash, arm, self.key.verify_pod(body),
                                    f"{meta.get('namespace')}/{meta.get('name')}")
            return
        ro = st.rollout
        if ro is None or ro.hash != chash or ro.counted(uid):
            return
        if not self.key.verify_pod(body):
            self._forged_seen(st.name, uid, f"{meta.get('namespace')}/{meta.get('name')}", arm)
            return
        self._count(st, ro, arm, uid)

    def _count(self, st: PolicyState, ro: Rollout, arm: str, uid: str) -> None:
        if not ro.count_bound(arm, uid):
            return
        promote = ro.spec.promote
        if arm == CANARY and ro.phase == PROGRESSING and promote is not None and promote.pods is not None \
                and ro.arms[CANARY].bound >= promote.pods and self.may_write():
            self.judge(st)  # type: ignore[arg-type]

    def _forged_seen(self, policy: str, uid: str, who: str, arm: str) -> None:
        """A bound pod whose decision annotation names ``policy``'s rollout without our MAC: counted
        and logged once per pod (the last MAX_FORGED_REMEMBERED pods are remembered)."""
        if not uid or uid in self._forged:
            return
        self._forged[uid] = None
        if len(self._forged) > MAX_FORGED_REMEMBERED:
            self._forged.popitem(last=False)
        self.telemetry.forged_decisions.labels(policy).inc()
        log.warning("pod %s: its %s annotation names SchedulingPolicy %s's rollout (arm %s) but was not written by "
                    "this scheduler (no valid policy-scheduler.io/decision-mac; key: %s): not counted",
                    ascii(who[:300]), DECISION_ANNOTATION, policy, ascii(arm[:40]),
                    "shared" if self.key.shared else "this process only")

    def _count_early(self) -> None:
        """The pods the informers listed before the SchedulingPolicies (a new leader recounts what
        the old one bound): counted, or refused as forged, as ``seen_bound`` would have. The leader
        ticks once synced: a policy unknown now is gone."""
        early, self._early = self._early, {}
        for uid, (policy, chash, arm, verified, who) in early.items():
            st = self.policies.get(policy)
            if st is None or st.rollout is None or st.rollout.hash != chash:
                continue
            if verified:
                self._count(st, st.rollout, arm, uid)
            else:
                self._forged_seen(policy, uid, who, arm)

    # ------------------------------------------------------------------ verdicts
    def judge(self, st: PolicyState) -> None:
        """Analyse the canary now and act on its verdict."""
        ro = st.rollout
        if ro is None or ro.phase != PROGRESSING:
            return
        zones = sorted({z for z in self.state.table.label_column(ZONE_LABEL) if z})
        v = ro.analyze(self._zone_of, zones, self._allocation_of)
        if v.breach:
            self.rollback(st, ro, v.breach)
        elif v.promote:
            self.promote(st, ro, v.promote)

    def rollback(self, st: PolicyState, ro: Rollout, why: str) -> None:
        ro.finish(ROLLED_BACK, f"rolled back: {why}; every pod is scheduled with the stable chain")
        c = ro.arms[CANARY]
        log.warning("SchedulingPolicy %s: candidate %s rolled back after %d canary attempts (%d failed): %s",
                    st.name, ro.hash, c.attempts, c.failures, why)
        self.telemetry.rollout_rollbacks.labels(st.name).inc()
        self.recorder.policy_event(st.name, st.uid or None, "Warning", "RolloutRolledBack", "Analysis",
                                   f"candidate {ro.hash} rolled back: {why}")
        self._gauge(st, ro)
        st.dirty = True
        self.write_status(st)
        self.requeue(st.name)  # the canary's failed pods, with the stable chain now

    def promote(self, st: PolicyState, ro: Rollout, why: str) -> None:
        ro.finish(PROMOTING, f"promoting: {why}")
        log.info("SchedulingPolicy %s: promoting candidate %s: %s", st.name, ro.hash, why)
        self.recorder.policy_event(st.name, st.uid or None, "Normal", "RolloutPromoting", "Analysis",
                                   f"candidate {ro.hash}: {why}; its chain becomes spec.plugins")
        self._gauge(st, ro)
        st.dirty = True
        self.write_status(st)
        self.requeue(st.name)  # nobody is a canary pod any more
        self._start_promotion(st, ro)

    def _start_promotion(self, st: PolicyState, ro: Rollout) -> None:
        """Write the promotion, once per candidate in this process (a new leader that finds the
        phase Promoting writes it again: the patch is idempotent)."""
        key = (st.name, ro.hash)
        if st.name in self._promoting or key in self._promoted or not self.may_write():
            return
        self._promoting.add(st.name)
        asyncio.get_running_loop().create_task(self._write_promotion(st, ro))

    async def _write_promotion(self, st: PolicyState, ro: Rollout) -> None:
        cand = ro.spec.candidate.model_dump(by_alias=True, exclude_none=True)
        patch: dict[str, Any] = {
            "spec": {"plugins": cand["plugins"], "disabled": cand.get("disabled") or None,
                     "percentageOfNodesToScore": cand.get("percentageOfNodesToScore"), "rollout": None}}
        try:
            for attempt in range(PROMOTION_CONFLICTS):
                if self.read is not None:
                    rv = await self._still_judged(st, ro)
                    if rv is None:
                        return
                    patch["metadata"] = {"resourceVersion": rv}  # the API server refuses it after any edit
                try:
                    await self.patch_spec(st.name, patch)
                    break
                except ApiError as e:
                    if e.status != 409 or attempt + 1 == PROMOTION_CONFLICTS:
                        raise
                    log.info("SchedulingPolicy %s changed while candidate %s was promoted: read again",
                             st.name, ro.hash)
            self._promoted.add((st.name, ro.hash))
            self.telemetry.rollout_promotions.labels(st.name).inc()
            self.recorder.policy_event(st.name, st.uid or None, "Normal", "RolloutPromoted", "Promote",
                                       f"candidate {ro.hash} promoted: spec.plugins is its chain")
        except REQUEST_ERRORS as e:  # tried again at the next tick
            log.warning("SchedulingPolicy %s: promotion of candidate %s not written: %s", st.name, ro.hash, e)
        except Exception as e:  # NotLeader: the next leader writes it
            log.warning("SchedulingPolicy %s: promotion of candidate %s not written: %s", st.name, ro.hash, e)
        finally:
            self._promoting.discard(st.name)

    async def _still_judged(self, st: PolicyState, ro: Rollout) -> str | None:
        """The policy's resourceVersion, read now, when its spec.rollout is the one the verdict was
        about; else None and nothing is written: another candidate (or none) ends this rollout
        through the watch; the same candidate under other thresholds is judged again."""
        obj = await self.read(f"{PLURAL_PATH}/{st.name}")  # type: ignore[misc]
        raw = ((obj or {}).get("spec") or {}).get("rollout")
        rv = ((obj or {}).get("metadata") or {}).get("resourceVersion")
        try:  # the hash of the parsed spec, as the policy store computes it
            now = RolloutSpec.model_validate(raw) if isinstance(raw, dict) else None
        except ValueError:
            now = None
        if now is None or candidate_hash(now.model_dump(by_alias=True, exclude_none=True)) != ro.hash:
            log.warning("SchedulingPolicy %s: spec.rollout changed since candidate %s was judged: not promoted",
                        st.name, ro.hash)
            return None
        if now != ro.spec:
            log.warning("SchedulingPolicy %s: spec.rollout of candidate %s changed since it was judged: judged again",
                        st.name, ro.hash)
            if ro.phase == PROMOTING:
                ro.finish(PROGRESSING, "spec.rollout changed after the verdict: judged again")
                st.dirty = True
                self.write_status(st)
            return None
        return rv if isinstance(rv, str) else None

    def _gauge(self, st: PolicyState, ro: Rollout | None) -> None:
        for ph in PHASES:
            self.telemetry.rollout_phase.labels(st.name, ph).set(1 if ro is not None and ro.phase == ph else 0)

    # ------------------------------------------------------------------ measures of the table
    def _zone_of(self, node: str) -> str:
        table = self.state.table
        row = table.index.get(node)
        return (table.specs[row].labels.get(ZONE_LABEL) or "") if row is not None else ""

    def _allocation_of(self, node: str) -> float | None:
        """The mean of cpu and memory requested / allocatable, as simulate's imbalance."""
        table = self.state.table
        row = table.index.get(node)
        if row is None:
            return None
        alloc = table.allocatable[row, [CPU, MEMORY]].astype(float)
        req = table.requested[row, [CPU, MEMORY]].astype(float)
        shares = np.divide(req, alloc, out=np.zeros(2), where=alloc > 0)
        return float(shares.mean())

    # ------------------------------------------------------------------ the periodic loop
    def tick(self) -> None:
        """Judge every canary (time-based promotion, a window's measures), carry on a promotion
        a previous leader or a failed write left, and set the phase gauge."""
        if self._early:
            self._count_early()
        for st in list(self.policies.values()):
            ro = st.rollout
            if ro is None:
                continue
            if ro.phase == PROGRESSING:
                self.judge(st)
            if ro.phase == PROMOTING:
                self._start_promotion(st, ro)
            if ro.phase in ACTIVE or ro.phase == PROMOTING:
                st.dirty = True  # the counts move: the status writer writes what changed
            self._gauge(st, ro)

    async def run(self) -> None:
        """``tick`` every ``interval`` seconds, until cancelled (the leader's loop)."""
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.tick()
            except Exception:  # a bug here must not stop scheduling
                log.exception("rollout tick failed")
