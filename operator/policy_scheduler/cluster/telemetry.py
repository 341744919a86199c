"""Telemetry: the operator's own metrics, exported on /metrics.

Where kube-scheduler has a metric of the same meaning, it has kube-scheduler's name, labels,
label values and buckets (pkg/scheduler/metrics/metrics.go, v1.37), with ``profile`` = the policy
name, so dashboards and alerts written for kube-scheduler work as they are. The operator's own
metrics keep the ``policy_scheduler_`` prefix.

A ``profile`` label only ever takes the name of a policy that exists (``known_policies``, the
engine's policy store), else ``unknown``: pods naming random policies add no series. Labelled
children are looked up once per label set and cached, so the scheduling loop pays a dict lookup
and an observe per metric.

Not to be confused with metricsources/ (the Prometheus data the usage-aware plugins read) or
framework/metricview.py (the plugins' read-only view of those values).

Leader-only: the scheduling series (attempts, durations, SLI, extension points, plugins, pending
and unschedulable pods, queue moves, preemption, pod groups, binding, tuning, rollouts, dropped
writes) live in a registry collected only while this replica leads (``is_leader``), so a standby
exports none of them and a sum over replicas counts the leader's alone; a leader that steps down
clears its gauges (``stepped_down``). Both replicas export the cache (``policy_scheduler_nodes``,
``policy_scheduler_policies``, ``scheduler_cache_size``, ``scheduler_event_handling_duration_seconds``),
``leader_election_master_status``, ``process_*``, ``python_*``, ``rest_client_*`` and
``policy_scheduler_build_info``. No ``*_created`` series (``disable_created_metrics``), as kube
components export none. The list of kube-scheduler 1.37's families and which are not exported,
with why: docs/operations.md, "Metrics"."""

from __future__ import annotations

import random
from time import perf_counter
from typing import Any, Callable, Mapping

from prometheus_client import (CollectorRegistry, Counter, Gauge, GCCollector, Histogram, PlatformCollector,
                               ProcessCollector, disable_created_metrics)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..framework.instrumentation import DEFAULT_SAMPLE_PERCENT, POST_FILTER, CycleRecorder
from ..framework.status import Code
from .tasks import TaskFailures
from .telemetry_collectors import (EVENT_ACTIONS, CacheSize, ContentCaches, LeaderOnly, PluginEvaluations,
                                   RestClientMetrics, build_info, event_resource)

disable_created_metrics()  # no *_created series: kube components export none (prometheus_client's default adds them)

UNKNOWN = "unknown"  # the profile label of a policy that does not exist


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """Prometheus' ExponentialBuckets (what upstream's buckets are made of)."""
    return tuple(start * factor ** i for i in range(count))


_LATENCY = exponential_buckets(0.0005, 2, 16)  # 0.5 ms .. ~16 s (binding requests)
ATTEMPT_BUCKETS = exponential_buckets(0.001, 2, 15)
SLI_BUCKETS = exponential_buckets(0.01, 2, 20)
EXTENSION_POINT_BUCKETS = exponential_buckets(0.0001, 2, 12)
PLUGIN_BUCKETS = exponential_buckets(0.00001, 1.5, 20)
POD_ATTEMPTS_BUCKETS = exponential_buckets(1, 2, 5)
MAX_ATTEMPTS_LABEL = 15  # upstream getAttemptsLabel: "15+" from 15 attempts on


def attempts_label(attempts: int) -> str:
    return f"{MAX_ATTEMPTS_LABEL}+" if attempts >= MAX_ATTEMPTS_LABEL else str(attempts)


def event_label(label: str) -> str:
    """A cluster event's label for ``queue_incoming_pods_total``: the per-policy suffix of our
    own events (``PolicyChange/<name>``) is dropped, so the series stay few."""
    return label.split("/", 1)[0]


class _QueueIncoming:
    """``scheduler_queue_incoming_pods_total{queue,event}``, read at scrape time from the
    queue's own counters (``SchedulingQueue.incoming``): the loop pays one dict increment per
    move, nothing here. Also 1.37's ``scheduler_queue_incoming_entities_total{queue,event,type}``
    with the same counts under ``type="pod"``: the queue's entities are pods (a pod group's
    members are queued one by one)."""

    NAME = "scheduler_queue_incoming_pods"
    HELP = "Number of pods added to scheduling queues by event and queue type."
    ENTITIES = "scheduler_queue_incoming_entities"
    ENTITIES_HELP = "Number of entities (pods or pod groups) added to scheduling queues by event, queue and type."

    def __init__(self) -> None:
        self.source: Callable[[], Mapping[tuple[str, str], int]] | None = None

    def describe(self):
        return [CounterMetricFamily(self.NAME, self.HELP, labels=["queue", "event"]),
                CounterMetricFamily(self.ENTITIES, self.ENTITIES_HELP, labels=["queue", "event", "type"])]

    def collect(self):
        fam = CounterMetricFamily(self.NAME, self.HELP, labels=["queue", "event"])
        entities = CounterMetricFamily(self.ENTITIES, self.ENTITIES_HELP, labels=["queue", "event", "type"])
        totals: dict[tuple[str, str], int] = {}
        if self.source is not None:
            for (queue, event), n in dict(self.source()).items():  # a copy: the loop keeps counting
                key = (queue, event_label(event))
                totals[key] = totals.get(key, 0) + n
        for (queue, event), n in sorted(totals.items()):
            fam.add_metric([queue, event], n)
            entities.add_metric([queue, event, "pod"], n)
        yield fam
        yield entities


class _QueuedEntities:
    """1.37's ``scheduler_queued_entities{queue,type}``: ``scheduler_pending_pods``' values under
    ``type="pod"`` (the queue holds pods only), read from that gauge at scrape time."""

    NAME = "scheduler_queued_entities"
    HELP = "Number of pending entities (pods or pod groups) in the scheduling queues, by the queue and type."

    def __init__(self, pending: Gauge) -> None:
        self.pending = pending

    def describe(self):
        return [GaugeMetricFamily(self.NAME, self.HELP, labels=["queue", "type"])]

    def collect(self):
        fam = GaugeMetricFamily(self.NAME, self.HELP, labels=["queue", "type"])
        for metric in self.pending.collect():
            for s in metric.samples:
                fam.add_metric([s.labels["queue"], "pod"], s.value)
        yield fam


class _Both:
    """Two histogram children observed together."""

    __slots__ = ("a", "b")

    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b

    def observe(self, seconds: float) -> None:
        self.a.observe(seconds)
        self.b.observe(seconds)


class TelemetryRecorder(CycleRecorder):
    """A cycle's timings into the Telemetry's histograms, for one profile; ``sampled`` fixed
    (the Telemetry keeps one of each per profile and picks one per cycle)."""

    __slots__ = ("_points", "_plugins", "_point_metric", "_plugin_metric", "_profile", "_evaluation")

    def __init__(self, telemetry: "Telemetry", profile: str, sampled: bool) -> None:
        super().__init__(sampled)
        self._profile = profile
        self._point_metric = telemetry.extension_point_duration
        self._evaluation = telemetry.preemption_evaluation
        self._plugin_metric = telemetry.plugin_duration
        self._points: dict[tuple[str, Code], Any] = {}
        self._plugins = telemetry._plugin_children  # shared: the plugin histogram has no profile

    def point(self, point: str, code: Code, seconds: float) -> None:
        child = self._points.get((point, code))
        if child is None:
            child = self._points[(point, code)] = self._point_metric.labels(point, str(code), self._profile)
            if point == POST_FILTER:  # and DefaultPreemption's evaluation (upstream Evaluator.evaluate)
                child = _Both(child, self._evaluation.labels("pod", str(code)))
                self._points[(point, code)] = child
        child.observe(seconds)

    def plugin(self, plugin: str, point: str, code: Code, seconds: float) -> None:
        key = (plugin, point, code)
        child = self._plugins.get(key)
        if child is None:
            child = self._plugins[key] = self._plugin_metric.labels(plugin, point, str(code))
        child.observe(seconds)


class WebhookMetrics:
    """The admission webhooks' server (webhook_server.py), exported by every replica that serves
    them. Updated from the server's own thread (prometheus_client's metrics are thread-safe)."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.requests = Counter("policy_scheduler_webhook_requests", "Admission requests answered, by webhook path "
                                "and answer (allowed, denied).", ["path", "answer"], registry=r)
        self.refused = Counter("policy_scheduler_webhook_refused_requests",
                               "Admission requests refused by a cap of the webhook server, by reason: too_large "
                               "(body over the limit), busy (no slot in time), budget (buffered bytes), deadline "
                               "(body not read in time).", ["reason"], registry=r)
        self.inflight = Gauge("policy_scheduler_webhook_inflight_requests",
                              "Admission requests being read or decided.", registry=r)
        self.buffered = Gauge("policy_scheduler_webhook_buffered_bytes",
                              "Bytes of admission request bodies held by the webhook server.", registry=r)
        self.certificate_expiry = Gauge("policy_scheduler_webhook_certificate_expiry_seconds",
                                        "Seconds until the webhook certificate expires, by certificate (serving, "
                                        "ca), as of its last check.", ["certificate"], registry=r)
        self.certificate_errors = Counter("policy_scheduler_webhook_certificate_check_errors",
                                          "Failed periodic checks of the webhook certificate (the last one "
                                          "loaded keeps serving).", registry=r)
        self._answers: dict[tuple[str, bool], Any] = {}

    def answered(self, path: str, allowed: bool) -> None:
        child = self._answers.get((path, allowed))
        if child is None:
            child = self._answers[(path, allowed)] = self.requests.labels(path, "allowed" if allowed else "denied")
        child.inc()


class Telemetry:
    """The operator's own metrics, exported on /metrics."""

    def __init__(self, registry: CollectorRegistry | None = None, *,
                 plugin_sample_percent: float = DEFAULT_SAMPLE_PERCENT,
                 known_policies: Mapping[str, Any] | None = None, rng: random.Random | None = None,
                 is_leader: Callable[[], bool] | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry  # what every replica exports
        self.leader_only = LeaderOnly(lambda: self.is_leader())
        self.is_leader: Callable[[], bool] = is_leader or (lambda: True)
        r.register(self.leader_only)
        lr = self.leader_only.registry  # what only the leader exports
        # kube-scheduler's metrics
        self.attempts = Counter("scheduler_schedule_attempts",
                                "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod "
                                "could not be scheduled, while 'error' means an internal scheduler problem.",
                                ["result", "profile"], registry=lr)
        self.attempt_duration = Histogram("scheduler_scheduling_attempt_duration_seconds",
                                          "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
                                          ["result", "profile"], buckets=ATTEMPT_BUCKETS, registry=lr)
        self.algorithm_duration = Histogram("scheduler_scheduling_algorithm_duration_seconds",
                                            "Scheduling algorithm latency in seconds", buckets=ATTEMPT_BUCKETS,
                                            registry=lr)
        self.sli_duration = Histogram("scheduler_pod_scheduling_sli_duration_seconds",
                                      "E2e latency for a pod being scheduled, from the time the pod enters the "
                                      "scheduling queue and might involve multiple scheduling attempts.",
                                      ["attempts"], buckets=SLI_BUCKETS, registry=lr)
        self.pod_attempts = Histogram("scheduler_pod_scheduling_attempts",
                                      "Number of attempts to successfully schedule a pod.",
                                      buckets=POD_ATTEMPTS_BUCKETS, registry=lr)
        self.extension_point_duration = Histogram(
            "scheduler_framework_extension_point_duration_seconds",
            "Latency for running all plugins of a specific extension point.",
            ["extension_point", "status", "profile"], buckets=EXTENSION_POINT_BUCKETS, registry=lr)
        self.plugin_duration = Histogram(
            "scheduler_plugin_execution_duration_seconds",
            "Duration for running a plugin at a specific extension point (sampled scheduling cycles).",
            ["plugin", "extension_point", "status"], buckets=PLUGIN_BUCKETS, registry=lr)
        self.plugin_evaluations = PluginEvaluations()
        lr.register(self.plugin_evaluations)
        self.pending = Gauge("scheduler_pending_pods",
                             "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; "
                             "'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in "
                             "unschedulablePods that the scheduler attempted to schedule and failed; 'gated' is "
                             "the number of unschedulable pods that the scheduler never attempted to schedule "
                             "because they are gated.", ["queue"], registry=lr)
        self.unschedulable = Gauge("scheduler_unschedulable_pods",
                                   "The number of unschedulable pods broken down by plugin name. A pod will "
                                   "increment the gauge for all plugins that caused it to not schedule and so this "
                                   "metric have meaning only when broken down by plugin.",
                                   ["plugin", "profile"], registry=lr)
        lr.register(_QueuedEntities(self.pending))
        self.queue_incoming = _QueueIncoming()
        lr.register(self.queue_incoming)
        self.preemption_attempts = Counter("scheduler_preemption_attempts",
                                           "Total preemption attempts in the cluster till now", registry=lr)
        self.preemption_victims = Histogram("scheduler_preemption_victims", "Number of selected preemption victims",
                                            buckets=exponential_buckets(1, 2, 7), registry=lr)
        self.preemption_evaluation = Histogram("scheduler_preemption_evaluation_duration_seconds",
                                               "Duration in seconds for identifying the target preemption victims.",
                                               ["preemptor", "result"], buckets=exponential_buckets(0.001, 2, 16),
                                               registry=lr)
        self.workload_preemption_attempts = Counter(
            "scheduler_workload_preemption_attempts",
            "Total preemption attempts initiated by workload (including pod groups) in the cluster till now.",
            ["result"], registry=lr)
        self.workload_preemption_victims = Histogram(
            "scheduler_workload_preemption_victims", "Number of pod preemption victims caused by workload preemption.",
            buckets=exponential_buckets(1, 2, 11), registry=lr)
        # 1.37's pod-group cycle (upstream: with the GenericWorkload gate; here: native PodGroups)
        self.pod_group_attempts = Counter(
            "scheduler_podgroup_schedule_attempts",
            "Number of attempts to schedule pod group, by the result. 'unschedulable' means a pod group could not "
            "be scheduled, while 'error' means an internal scheduler problem.", ["result", "profile"], registry=lr)
        self.pod_group_duration = Histogram("scheduler_podgroup_scheduling_attempt_duration_seconds",
                                            "Pod group scheduling attempt latency in seconds", ["result", "profile"],
                                            buckets=ATTEMPT_BUCKETS, registry=lr)
        self.pod_group_algorithm_duration = Histogram("scheduler_podgroup_scheduling_algorithm_duration_seconds",
                                                      "Pod group scheduling algorithm latency in seconds",
                                                      buckets=ATTEMPT_BUCKETS, registry=lr)
        # cache and event handlers: every replica keeps its cache warm
        self.cache_size = CacheSize()
        r.register(self.cache_size)
        r.register(ContentCaches(lambda: self.cache_size.table() if self.cache_size.table is not None else None))
        self.event_handling = Histogram("scheduler_event_handling_duration_seconds",
                                        "Event handling latency in seconds.", ["event"],
                                        buckets=EXTENSION_POINT_BUCKETS, registry=r)
        # the operator's own
        self.binding_duration = Histogram("policy_scheduler_binding_duration_seconds",
                                          "Time of the pods/binding request.", buckets=_LATENCY, registry=lr)
        self.bind_errors = Counter("policy_scheduler_binding_errors", "Failed bindings by HTTP status.",
                                   ["code"], registry=lr)
        self.nodes = Gauge("policy_scheduler_nodes", "Nodes in the scheduler's cache.", registry=r)
        self.policies = Gauge("policy_scheduler_policies", "SchedulingPolicies by readiness.", ["ready"], registry=r)
        # client-go's leader election metric, under its name (k8s.io/client-go/tools/leaderelection)
        self.leader = Gauge("leader_election_master_status",
                            "Gauge of if the reporting system is master of the relevant lease, 0 indicates "
                            "backup, 1 indicates master. 'name' is the string used to identify the lease.",
                            ["name"], registry=r)
        # leader writes dropped unsent at the fence (their lease's renew deadline had passed when
        # they were about to be sent: kubeclient's fence): a deposed leader's, so not leader-only
        self.fenced_writes = Counter("policy_scheduler_fenced_writes",
                                     "API writes not sent because the leader lease's renew deadline had passed "
                                     "when they were about to go out, by HTTP verb.", ["verb"], registry=r)
        self.events_dropped = Counter("policy_scheduler_events_dropped",
                                      "Kubernetes Events or status writes that failed.", ["kind"], registry=lr)
        # drift made visible (informer.py, tasks.py): watch handlers that raised, the relists that repair
        # the cache, the objects a relist could not handle either, and background tasks that failed
        self.informer_handler_errors = Counter(
            "policy_scheduler_informer_handler_errors", "Watch events and listed objects whose handler raised, "
            "by informer (each schedules a relist of that informer).", ["informer"], registry=r)
        self.informer_relists = Counter(
            "policy_scheduler_informer_relists", "Relists after the first LIST, by informer and reason: "
            "handler_error (a handler raised), gone (410: resourceVersion too old), error (a LIST or WATCH failed).",
            ["informer", "reason"], registry=r)
        self.informer_quarantined = Gauge(
            "policy_scheduler_informer_quarantined_objects", "Objects whose handler raised again in the relist "
            "meant to repair them, by informer: no further relist for them until they change or are deleted.",
            ["informer"], registry=r)
        r.register(TaskFailures())
        # the tuner (cluster/tuner.py): evaluations that replayed a window, their replays and time
        self.tuning_evaluations = Counter("policy_scheduler_tuning_evaluations",
                                          "Tuner evaluations that replayed a window of pods, by policy.",
                                          ["policy"], registry=lr)
        self.tuning_replays = Counter("policy_scheduler_tuning_replays", "Replays the tuner ran, by policy.",
                                      ["policy"], registry=lr)
        self.tuning_duration = Histogram("policy_scheduler_tuning_evaluation_duration_seconds",
                                         "Time of one tuner evaluation (its replays, off the scheduling loop).",
                                         ["policy"], buckets=exponential_buckets(0.05, 2, 12), registry=lr)
        # rollouts (cluster/rollout_controller.py)
        self.rollout_phase = Gauge("policy_scheduler_rollout_phase",
                                   "1 for the phase a policy's rollout is in (Shadowing, Progressing, Promoting, "
                                   "Promoted, RolledBack, Aborted), 0 for the others.", ["policy", "phase"],
                                   registry=lr)
        self.rollout_attempts = Counter("policy_scheduler_rollout_attempts",
                                        "Scheduling attempts of a canary rollout's pods, by arm (stable, canary) and "
                                        "result (scheduled, unschedulable).", ["policy", "arm", "result"], registry=lr)
        self.rollout_shadow = Counter("policy_scheduler_rollout_shadow_decisions",
                                      "Decisions a shadowed candidate made beside the stable chain, by outcome "
                                      "(same, changed).", ["policy", "outcome"], registry=lr)
        self.rollout_rollbacks = Counter("policy_scheduler_rollout_rollbacks",
                                         "Candidates rolled back by the canary analysis.", ["policy"], registry=lr)
        self.rollout_promotions = Counter("policy_scheduler_rollout_promotions",
                                          "Candidates promoted (written to spec.plugins).", ["policy"], registry=lr)
        # decision annotations not signed by this scheduler's key (cluster/decision_mac.py): every replica
        self.forged_decisions = Counter("policy_scheduler_forged_decisions",
                                        "Bound pods whose decision annotation names a policy's rollout but whose "
                                        "policy-scheduler.io/decision-mac does not verify (written by someone else, "
                                        "or signed with another replica's key): not counted, once per pod.",
                                        ["policy"], registry=r)
        self.decision_key_shared = Gauge("policy_scheduler_decision_key_shared",
                                         "1 when decision annotations are signed with the key every replica shares "
                                         "(its Secret), 0 with a key of this process only.", registry=r)
        # the process (process_*, python_*), the API client (rest_client_*), the build
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        self.rest_client = RestClientMetrics(r)
        self.build_info = build_info(r)

        self.known_policies: Mapping[str, Any] = known_policies if known_policies is not None else {}
        self.plugin_sample_percent = plugin_sample_percent
        self._rng = rng or random.Random()  # never the engine's: sampling must not shift its tie-breaking
        self._attempt_children: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._group_children: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._sli_children: dict[str, Any] = {}
        self._plugin_children: dict[tuple[str, str, Code], Any] = {}
        self._recorders: dict[tuple[str, bool], TelemetryRecorder] = {}
        self._unschedulable_set: set[tuple[str, str]] = set()
        self._event_children: dict[str, Any] = {}
        self._webhooks: WebhookMetrics | None = None

    # ------------------------------------------------------------------ labels
    def webhook_metrics(self) -> WebhookMetrics:
        """The admission webhooks' metrics, registered on first use (only a replica that serves
        them exports them)."""
        if self._webhooks is None:
            self._webhooks = WebhookMetrics(self.registry)
        return self._webhooks

    def profile(self, policy: str | None) -> str:
        """The ``profile`` label of ``policy``: its name if it exists, else ``unknown``."""
        return policy if policy is not None and policy in self.known_policies else UNKNOWN

    # ------------------------------------------------------------------ the scheduling loop
    def attempt(self, result: str, policy: str | None, seconds: float | None = None) -> None:
        """Count one scheduling attempt (and its duration, when given); the labelled children are
        looked up once per (result, profile), not per pod."""
        self._count(self._attempt_children, self.attempts, self.attempt_duration, result, policy, seconds)

    def _count(self, cache: dict, counter: Any, histogram: Any, result: str, policy: str | None,
               seconds: float | None) -> None:
        """``counter`` +1 and ``histogram`` observes ``seconds`` under (result, profile), their
        children looked up in ``cache`` once per label set."""
        profile = self.profile(policy)
        children = cache.get((result, profile))
        if children is None:
            children = cache[(result, profile)] = (counter.labels(result, profile), histogram.labels(result, profile))
        children[0].inc()
        if seconds is not None:
            children[1].observe(seconds)

    def scheduled(self, attempts: int, seconds: float) -> None:
        """A pod was bound: ``seconds`` since it first entered activeQ, after ``attempts`` attempts."""
        label = attempts_label(attempts)
        child = self._sli_children.get(label)
        if child is None:
            child = self._sli_children[label] = self.sli_duration.labels(label)
        child.observe(seconds)
        self.pod_attempts.observe(attempts)

    def algorithm(self, policy: str | None, chain: Any, state: Any, decision: Any) -> None:
        """One single-pod scheduling cycle ended (upstream schedulingAlgorithm): its duration, and
        its plugins' evaluations (PluginEvaluations.cycle)."""
        self.algorithm_duration.observe(decision.duration)
        self.plugin_evaluations.cycle(self.profile(policy), chain, state.skip_filter, state.skip_score,
                                      decision.evaluated, decision.feasible)

    def preemption_attempt(self) -> None:
        """DefaultPreemption chose (or found no) node for a pod: one preemption attempt."""
        self.preemption_attempts.inc()

    def pod_group_attempt(self, result: str, policy: str | None, seconds: float) -> None:
        """A pod-group cycle ended (upstream podGroupCycle): ``result`` scheduled, unschedulable,
        waiting_on_preemption or error, ``seconds`` since the cycle started."""
        self._count(self._group_children, self.pod_group_attempts, self.pod_group_duration, result, policy, seconds)

    def pod_group_algorithm(self, seconds: float) -> None:
        """A pod-group cycle's algorithm (the hierarchy's placements, before PodGroupPostFilter)."""
        self.pod_group_algorithm_duration.observe(seconds)

    def pod_group_preemption(self, code: Code, seconds: float, victims: int | None) -> None:
        """DefaultPreemption's PodGroupPostFilter ran for ``seconds`` and ended with ``code``;
        ``victims``: the victims it chose (None: it found none)."""
        self.workload_preemption_attempts.labels(str(code)).inc()
        self.preemption_evaluation.labels("podgroup", str(code)).observe(seconds)
        if victims is not None:
            self.workload_preemption_victims.observe(victims)

    # ------------------------------------------------------------------ the informers
    def timed_handler(self, kind: str, handler: Callable[[str, Mapping[str, Any]], None]
                      ) -> Callable[[str, Mapping[str, Any]], None]:
        """``handler`` (an informer's callback for ``kind``) timed into
        ``scheduler_event_handling_duration_seconds{event}``, with upstream's event labels
        (``NodeAdd``, ``UnscheduledPodUpdate``, ``AssignedPodDelete``, ...)."""
        children = self._event_children
        hist = self.event_handling

        def handle(event: str, body: Mapping[str, Any]) -> None:
            t = perf_counter()
            try:
                handler(event, body)
            finally:
                label = event_resource(kind, body) + EVENT_ACTIONS.get(event, event.title())
                child = children.get(label)
                if child is None:
                    child = children[label] = hist.labels(label)
                child.observe(perf_counter() - t)

        return handle

    def attach(self, policies: Mapping[str, Any], queue_incoming: Callable[[], Mapping[tuple[str, str], int]],
               table: Callable[[], Any], is_leader: Callable[[], bool], client: Any) -> None:
        """The engine's parts: the policies (the ``profile`` label's names), the queue's move
        counters and the node table (read at scrape time), whether this replica leads (the
        leader-only series), and the API client (its requests into ``rest_client_*``)."""
        self.known_policies = policies
        self.queue_incoming.source = queue_incoming
        self.cache_size.table = table
        self.is_leader = is_leader
        client.metrics = self.rest_client
        client.on_fenced = lambda verb: self.fenced_writes.labels(verb).inc()

    # ------------------------------------------------------------------ leadership
    def stepped_down(self, lease: str | None = None) -> None:
        """This replica no longer leads: ``leader_election_master_status`` 0 for ``lease``, and its
        scheduling gauges cleared (the leader-only registry is not collected any more either), so
        no stale value is summed with the new leader's."""
        if lease is not None:
            self.leader.labels(lease).set(0)
        self.pending.clear()
        self.unschedulable.clear()
        self._unschedulable_set.clear()
        self.rollout_phase.clear()

    def cycle_recorder(self, policy: str | None) -> TelemetryRecorder:
        """The recorder for one cycle of ``policy``'s pod: plugin calls timed in
        ``plugin_sample_percent`` % of cycles (upstream samples 10 %)."""
        pct = self.plugin_sample_percent
        sampled = pct >= 100 or (pct > 0 and self._rng.random() * 100 < pct)
        profile = self.profile(policy)
        rec = self._recorders.get((profile, sampled))
        if rec is None:
            rec = self._recorders[(profile, sampled)] = TelemetryRecorder(self, profile, sampled)
        return rec

    # ------------------------------------------------------------------ the status loop
    def set_unschedulable(self, counts: Mapping[tuple[str, str], int]) -> None:
        """``scheduler_unschedulable_pods`` from (policy, plugin) -> pods in the unschedulable
        pool (gated ones included, under their PreEnqueue plugin). Series that had pods and have
        none any more go to 0, as upstream's gauge does."""
        by_label: dict[tuple[str, str], int] = {}
        for (policy, plugin), n in counts.items():
            key = (plugin, self.profile(policy))
            by_label[key] = by_label.get(key, 0) + n
        for key in self._unschedulable_set - by_label.keys():
            self.unschedulable.labels(*key).set(0)
        for key, n in by_label.items():
            self.unschedulable.labels(*key).set(n)
        self._unschedulable_set |= by_label.keys()
