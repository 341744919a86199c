"""What would place a pending pod, told where users look: the scheduling driver's Hints port
(scheduler/ports.py) answered by the operator.

After a single pod's attempt failed (its FailedScheduling recorded, byte-identical to
kube-scheduler's), the driver calls ``unschedulable``: the pod goes into a bounded queue of pods
to search (one entry per pod key, the latest attempt wins; at most ``queue_size`` entries, the
oldest dropped and counted). ``step`` runs one search (remedies/ ``suggest``, on the live
ClusterState with the failure's chain and the scheduler's nominator) and tells its result:

- a ``SchedulingHint`` event (type Normal; the best suggestion in one sentence) through the event
  recorder, not again for the same pod within ``event_repeat_after`` seconds unless the sentence
  changes;
- the ``policy-scheduler.io/Suggestions`` condition of the pod's status: its message the remedies
  JSON form (schema version 1, with the diagnosis, at most 4 KiB) with ``mac``, its HMAC under the
  decision key (cluster/decision_mac.py) over the form without it; one strategic-merge PATCH of
  pods/status (apicalls.py: leader only, fenced, the pod's UID as precondition), only when the
  text changed and not more often than every ``condition_min_interval`` seconds per pod.
  pods/status is what the shipped ClusterRole grants (kube-scheduler's too, for PodScheduled), so
  tools read it on every install. A 403 (an RBAC without it) switches it off, said once in the
  log and counted (``forbidden``); the events go on.

A pod DynamicResources holds at PreEnqueue (a ResourceClaim that does not exist: upstream gives
it no attempt and posts no FailedScheduling, and neither does the driver) is filed by the queue's
``on_gated`` hook instead (``gated``, O(1); nothing else changes in the queue), in a second bounded
queue, and searched like the others once it has been held ``gated_after`` seconds (5 s: a
template's claim is normally made by the resourceclaim controller within moments) and is still
held then, under its policy's chain; the failed attempts' queue goes first.

How it never delays a placement: nothing is searched when the failure is reported (the port only
files the pod, O(1)). The engine calls ``step`` from its scheduling loop only when the queue has
nothing to pop (activeQ empty, no backoff due), no binding is in flight and no preemption's
victims are being deleted: no search ever starts while a pod waits to be placed or bound, and
its event and condition never compete with a Binding at the API server. One search at a time,
within the per-pod budget of ``Allowance`` (default 20 ms; one simulation may overrun it), then
the loop yields to I/O and pops again, so a pod that arrives during a search waits at most that
one search. ``Allowance`` also caps the searches' share of the loop's time (default 50 ms per
second, 200 ms burst). A search the budget cut short before it found anything is filed again
(twice at most) before it is told. A pod bound, deleted, replaced, or back in the active queue or
in flight by its turn is skipped (``skipped-stale``); one that waited longer
than ``stale_after`` seconds for budget is dropped (``skipped-budget``).

The condition is sent once the same failure's PodScheduled condition has been answered (the
recorder's ``status_settled``): a reader never sees the advice before the failure it is about.
The condition's own write does not requeue the pod: a status-only update is no update to the
scheduling queue (upstream's isPodUpdated strips the status; tests/unit/cluster/
test_suggestion_worker.py checks it). Should a pod be retried anyway, the retry's search finds the
same text and writes nothing: it does not feed back.
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ..framework.queue.scheduling_queue import ACTIVE, GATED
from ..plugins.dynamicresources.dynamic_resources import NAME as DYNAMIC_RESOURCES
from ..remedies import DEFAULT_BUDGET, Allowance, Remedies, dumps, suggest
from ..timefmt import now_rfc3339

if TYPE_CHECKING:  # pragma: no cover
    from ..cache.policies import PolicyState
    from ..cache.state import ClusterState
    from ..framework.cycle.chain import Chain
    from ..framework.cycle.schedule import Decision
    from ..framework.model.podinfo import PodInfo
    from ..framework.queue.nominator import Nominator
    from ..framework.queue.scheduling_queue import SchedulingQueue
    from ..framework.queue.subqueues import QueuedPodInfo
    from .decision_mac import DecisionKey

log = logging.getLogger("policy_scheduler")

HINT_EVENT = "SchedulingHint"
SUGGESTIONS_CONDITION = "policy-scheduler.io/Suggestions"
MAX_DOCUMENT_BYTES = 4096  # the JSON form, before its mac
MAX_ALTERNATIVES = 4  # other policies tried as UsePolicy suggestions
MAX_REMEMBERED = 65536  # pods whose last event and condition are remembered (rate limits)
FOUND, NONE, PARTIAL, SKIPPED_BUDGET, SKIPPED_STALE = "found", "none", "partial", "skipped-budget", "skipped-stale"
RETRIES = 2  # a search cut short before it found anything is tried again this many times
SECONDS_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


@dataclass
class SuggestionConfig:
    """``run --suggestions`` and its budget flags."""

    enabled: bool = True
    per_pod: float = DEFAULT_BUDGET  # seconds of search per pod
    per_second: float = 0.05  # seconds of search per second of loop time
    burst: float = 0.2
    queue_size: int = 1024
    stale_after: float = 120.0  # an entry waiting longer for budget is dropped
    event_repeat_after: float = 300.0
    condition_min_interval: float = 30.0
    gated_after: float = 5.0  # a pod DynamicResources holds at PreEnqueue is searched once held this long


class SuggestionMetrics:
    """policy_scheduler_suggestion_* (leader only: only the leader searches)."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.searches = Counter("policy_scheduler_suggestion_searches", "Searches for what would place a pod that "
                                "found no node, by result: found (a verified suggestion), none, partial (the time "
                                "budget ran out; suggestions may be found), skipped-budget (waited too long for "
                                "search time), skipped-stale (the pod was bound, deleted, replaced or tried again "
                                "first).", ["result"], registry=r)
        self.suggestions = Counter("policy_scheduler_suggestions", "Verified suggestions found (each places the pod "
                                   "when applied), by kind.", ["kind"], registry=r)
        self.candidates = Counter("policy_scheduler_suggestion_candidates", "Candidate changes simulated, by "
                                  "verdict: verified (placed the pod) or rejected (did not: never shown).",
                                  ["verdict"], registry=r)
        self.seconds = Histogram("policy_scheduler_suggestion_search_duration_seconds",
                                 "Time one search took (on the scheduling loop, while no pod waited).",
                                 buckets=SECONDS_BUCKETS, registry=r)
        self.queue = Gauge("policy_scheduler_suggestion_queue_length", "Pods waiting for a search.", registry=r)
        self.dropped = Counter("policy_scheduler_suggestion_queue_dropped", "Pods dropped from the full search "
                               "queue (the oldest first).", registry=r)
        self.writes = Counter("policy_scheduler_suggestion_writes", "What was told, by what (event, condition) "
                              "and result (written, unchanged, rate-limited, failed, forbidden).", ["what", "result"],
                              registry=r)

    def search(self, result: str) -> None:
        self.searches.labels(result).inc()


class _Entry:
    """A pod to search: what the queue holds anyway (the pod, its policy's chain) and two numbers.
    Not the attempt's Decision: the search computes its own verdicts on the state of its turn,
    and a thousand pending pods' per-node diagnoses are not kept for it."""

    __slots__ = ("pod", "policy", "chain", "since", "tries")

    def __init__(self, pod: PodInfo, policy: str, chain: Chain | None, since: float) -> None:
        self.pod, self.policy, self.chain, self.since = pod, policy, chain, since
        self.tries = 0


class SuggestionWorker:
    """The Hints port of the operator. ``event(pod, type, reason, action, note)``: the recorder's;
    ``patch(pod, condition) -> awaitable``: ApiCalls.patch_pod_condition; ``key()``: the
    decision key (None: not loaded yet, the condition is not written); ``spawn``: the engine's
    tasks; ``policies``, ``namespaces``: the policy store's (UsePolicy's alternatives);
    ``settled(pod key) -> awaitable``: the recorder's ``status_settled``, awaited before the
    condition is sent, so it lands after the same failure's PodScheduled condition."""

    def __init__(self, state: ClusterState, queue: SchedulingQueue, nominator: Nominator, *,
                 policies: Mapping[str, PolicyState], namespaces: Mapping[str, Mapping[str, str]],
                 event: Callable[[PodInfo, str, str, str, str], None], patch: Callable[..., Any],
                 key: Callable[[], DecisionKey | None], spawn: Callable[[Any], Any],
                 metrics: SuggestionMetrics | None = None, config: SuggestionConfig | None = None,
                 clock: Callable[[], float] = time.monotonic, search: Callable[..., Remedies] = suggest,
                 settled: Callable[[str], Awaitable[None]] | None = None) -> None:
        self.state, self.queue, self.nominator = state, queue, nominator
        self.settled = settled
        self.policies, self.namespaces = policies, namespaces
        self.event, self.patch, self.key, self.spawn = event, patch, key, spawn
        self.config = config or SuggestionConfig()
        c = self.config
        self.clock, self.search = clock, search
        self.allowance = Allowance(per_second=c.per_second, per_pod=c.per_pod, burst=c.burst, clock=clock)
        self.metrics = metrics
        self._queue: OrderedDict[str, _Entry] = OrderedDict()
        # pods DynamicResources holds at PreEnqueue (a claim that does not exist): no attempt, so no
        # ``unschedulable``; filed by the queue's hook (``gated``), searched from ``since`` on
        self._gated: OrderedDict[str, _Entry] = OrderedDict()
        self._told: OrderedDict[str, tuple[str, str, float]] = OrderedDict()  # key -> (uid, sentence, when)
        self._written: OrderedDict[str, tuple[str, str, float]] = OrderedDict()  # key -> (uid, text, when)
        self.dropped = 0
        self.conditions_forbidden = False  # the API server answered 403 to the condition's PATCH
        if metrics is not None:
            metrics.queue.set_function(lambda: len(self))

    def __len__(self) -> int:
        return len(self._queue) + len(self._gated)

    # ------------------------------------------------------------------ the port (the hot path: O(1))
    def unschedulable(self, pod: PodInfo, policy: PolicyState, chain: Chain, decision: Decision) -> None:
        q = self._queue
        key = pod.key
        q.pop(key, None)  # the latest attempt wins, and goes to the back
        self._gated.pop(key, None)
        q[key] = _Entry(pod, policy.name, chain, self.clock())
        self._bound(q)

    def gated(self, qpi: QueuedPodInfo) -> None:
        """The queue's ``on_gated`` hook (O(1)): a pod a PreEnqueue plugin holds. Upstream posts
        no FailedScheduling for it and it has no attempt; one DynamicResources holds (a
        ResourceClaim that does not exist, or not yet: a template's claim is made by the
        resourceclaim controller within moments) is filed to be searched once it has been held
        ``gated_after`` seconds, under its policy's chain of then. Filed already: its wait goes on."""
        if qpi.gating_plugin != DYNAMIC_RESOURCES:
            return
        key = qpi.key
        old = self._gated.get(key)
        if key in self._queue or (old is not None and old.pod.uid == qpi.pod.uid):
            return
        self._gated.pop(key, None)
        self._gated[key] = _Entry(qpi.pod, qpi.policy, None, self.clock() + max(self.config.gated_after, 0.0))
        self._bound(self._gated)

    def _bound(self, q: OrderedDict[str, _Entry]) -> None:
        while len(q) > max(self.config.queue_size, 1):
            q.popitem(last=False)
            self.dropped += 1
            if self.metrics is not None:
                self.metrics.dropped.inc()

    def forget(self, key: str) -> None:
        """The pod is bound or gone: no search, and its rate limits start over."""
        self._queue.pop(key, None)
        self._gated.pop(key, None)
        self._told.pop(key, None)
        self._written.pop(key, None)

    # ------------------------------------------------------------------ the search, off the hot path
    def retry_in(self) -> float | None:
        """Seconds until the allowance holds a whole search again (None: nothing to search)."""
        if not self._queue and not self._gated:
            return None
        a = self.allowance
        wait = 1.0 if a.per_second <= 0 else min(1.0, max(0.01, (a.per_pod - a.tokens) / a.per_second))
        if not self._queue:  # the first held pod's turn
            due = next(iter(self._gated.values())).since - self.clock()
            wait = max(wait, min(due, max(self.config.gated_after, 0.01)))
        return wait

    def _head(self) -> tuple[OrderedDict[str, _Entry], str, _Entry] | None:
        """The next entry: the failed attempts' first, then the first held pod whose turn came."""
        for q in (self._queue, self._gated):
            if q:
                key, entry = next(iter(q.items()))
                if q is self._queue or self.clock() >= entry.since:
                    return q, key, entry
        return None

    def step(self) -> bool:
        """One search (or one stale entry dropped), when the allowance grants it. Call only while
        no pod waits to be placed. True: something was done (call again after yielding); False:
        nothing to search, or no search time now (``retry_in``)."""
        head = self._head()
        if head is None:
            return False
        q, key, entry = head
        now = self.clock()
        held = q is self._gated
        current = self._current(key, entry, held)
        st = self.policies.get(entry.policy) if held else None
        chain = entry.chain if not held else st.chain if st is not None else None
        if current is None or chain is None:
            del q[key]
            self._count(SKIPPED_STALE)
            return True
        if now - entry.since > self.config.stale_after:
            del q[key]
            self._count(SKIPPED_BUDGET)
            return True
        budget = self.allowance.grant()
        if budget <= 0:
            return False
        del q[key]
        t0 = time.perf_counter()
        try:
            r = self.search(current, self.state, chain, None, nominator=self.nominator,
                            budget=budget, alternatives=self._alternatives(current, entry.policy))
        except Exception as e:  # advice: never the scheduling loop's end (suggest itself does not raise)
            self.allowance.spent(time.perf_counter() - t0)
            log.warning("no suggestions for pod %s: %s: %s", key, type(e).__name__, e)
            self._count(NONE)
            return True
        self.allowance.spent(r.seconds)
        self._record(r)
        if r.partial and not r.suggestions and entry.tries < RETRIES and not q.get(key):
            # cut short before it found anything (a cold first search, a budget granted short):
            # filed again at the back, told nothing yet (a partial condition would hold the
            # complete one back for the condition's interval)
            entry.tries += 1
            entry.since = self.clock()
            q[key] = entry
            return True
        self.tell(current, r)
        return True

    def _current(self, key: str, entry: _Entry, held: bool = False) -> PodInfo | None:
        """The pod as the queue holds it now, if it is still the same pod, waiting in the
        unschedulable pool or in backoff (not bound, deleted, replaced, active or in flight);
        ``held``: still held by DynamicResources at PreEnqueue."""
        qpi = self.queue.get(key)
        if qpi is None or qpi.pod.uid != entry.pod.uid:
            return None
        where = self.queue.state_of(key)
        if held and (where != GATED or qpi.gating_plugin != DYNAMIC_RESOURCES):
            return None
        return None if where == ACTIVE else qpi.pod

    def _alternatives(self, pod: PodInfo, current: str) -> dict[str, Chain]:
        labels = self.namespaces.get(pod.namespace)
        out: dict[str, Chain] = {}
        if labels is None:
            return out
        for name in sorted(self.policies):
            st = self.policies[name]
            if name == current or st.chain is None or st.rollout is not None:
                continue
            if st.namespace_selector is not None and not st.namespace_selector.matches(labels):
                continue
            out[name] = st.chain
            if len(out) >= MAX_ALTERNATIVES:
                break
        return out

    def _count(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.search(result)

    def _record(self, r: Remedies) -> None:
        m = self.metrics
        if m is None:
            return
        m.search(FOUND if r.suggestions else PARTIAL if r.partial else NONE)
        m.seconds.observe(r.seconds)
        for s in r.suggestions:
            m.suggestions.labels(s.kind).inc()
        m.candidates.labels("verified").inc(len(r.suggestions))
        m.candidates.labels("rejected").inc(max(r.rejected, 0))

    def _wrote(self, what: str, result: str) -> None:
        if self.metrics is not None:
            self.metrics.writes.labels(what, result).inc()

    # ------------------------------------------------------------------ telling
    def tell(self, pod: PodInfo, r: Remedies) -> None:
        """The SchedulingHint event and the condition, each rate-limited per pod."""
        now = self.clock()
        sentence = r.text()
        if sentence:
            last = self._told.get(pod.key)
            if last is not None and last[0] == pod.uid and last[1] == sentence and \
                    now - last[2] < self.config.event_repeat_after:
                self._wrote("event", "rate-limited")
            else:
                _remember(self._told, pod.key, (pod.uid, sentence, now))
                self.event(pod, "Normal", HINT_EVENT, "Scheduling", sentence)
                self._wrote("event", "written")
        if self.conditions_forbidden:
            self._wrote("condition", "forbidden")
            return
        text = document_text(r)
        last = self._written.get(pod.key)
        if last is not None and last[0] == pod.uid:
            if last[1] == text:
                self._wrote("condition", "unchanged")
                return
            if now - last[2] < self.config.condition_min_interval:
                self._wrote("condition", "rate-limited")
                return
        key = self.key()
        if key is None:
            self._wrote("condition", "failed")
            return
        _remember(self._written, pod.key, (pod.uid, text, now))
        self.spawn(self._write(pod, text, condition(r, text, key.sign_suggestions(pod.uid, text))))

    async def _write(self, pod: PodInfo, text: str, cond: dict[str, str]) -> None:
        if self.settled is not None:
            await self.settled(pod.key)
        ok = await self.patch(pod, cond)
        if ok is None:
            if not self.conditions_forbidden:
                log.warning("the suggestions condition is off: this ServiceAccount may not patch pods/status (the "
                            "shipped ClusterRole grants it; docs/operations.md#suggestions-what-would-place-a-"
                            "pending-pod); the SchedulingHint events go on")
            self.conditions_forbidden = True
        self._wrote("condition", "written" if ok else "forbidden" if ok is None else "failed")
        if not ok:
            w = self._written.get(pod.key)
            if w is not None and w[1] == text:
                del self._written[pod.key]  # not written: the next search may try again


def document_text(r: Remedies) -> str:
    """The JSON form with the diagnosis, compact, at most 4 KiB: what the mac signs."""
    return dumps(r.to_json(max_bytes=MAX_DOCUMENT_BYTES, blockers=True))


def condition(r: Remedies, text: str, mac: str) -> dict[str, str]:
    """The pod condition: status True with suggestions (reason Found), False without (reason
    Partial when the budget cut the search short, else NoneFound); its message the form of
    ``text`` with ``mac`` added (``split_message`` takes them apart again)."""
    doc = json.loads(text)
    doc["mac"] = mac
    return {"type": SUGGESTIONS_CONDITION, "status": "True" if r.suggestions else "False",
            "reason": "Found" if r.suggestions else "Partial" if r.partial else "NoneFound",
            "message": dumps(doc), "lastTransitionTime": now_rfc3339()}


def split_message(message: Any) -> tuple[dict[str, Any] | None, str, Any]:
    """A condition's message as (the JSON form without its mac, the exact text the mac signs,
    the mac); (None, "", None) when it is no JSON object."""
    if not isinstance(message, str) or len(message) > 2 * MAX_DOCUMENT_BYTES:
        return None, "", None
    try:
        doc = json.loads(message)
    except ValueError:
        return None, "", None
    if not isinstance(doc, dict):
        return None, "", None
    mac = doc.pop("mac", None)
    return doc, dumps(doc), mac


def _remember(d: OrderedDict, key: str, value: Any) -> None:
    d.pop(key, None)
    d[key] = value
    while len(d) > MAX_REMEMBERED:
        d.popitem(last=False)
