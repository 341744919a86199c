"""policy-scheduler command line: run the operator (its flags; serve.py builds and runs
it), print the CRD, explain a decision (explain.py prints the record), snapshot the cluster, simulate
policies on it and tune a policy's weights offline (whatif/ computes and writes their results), a
policy's revisions (rollout: cluster/rollout.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys

from . import SCHEDULER_NAME, __version__
from .logs import LOG_FORMATS

LOG_LEVELS = ("debug", "info", "warning", "error")
KUBECONFIG_HELP = ("kubeconfig file (default: $KUBECONFIG, several files merged as kubectl does, else "
                   "~/.kube/config, else the in-cluster service account). Client certificates, tokens, token "
                   "files and exec credential plugins; expiring tokens are renewed")
CONTEXT_HELP = "kubeconfig context to use (default: the kubeconfig's current-context)"


def _setup_logging(level: str, log_format: str = "text") -> None:
    """Text or JSON lines on stderr, for every logger (kopf's included): see logs.py."""
    from .logs import setup

    setup(level, log_format)


def _startup_error(a: argparse.Namespace, msg: str) -> None:
    """A reason not to start: plain on stderr, or a JSON line with --log-format json."""
    if a.log_format == "json":
        logging.getLogger("policy_scheduler").error(msg)
    else:
        print(f"policy-scheduler: {msg}", file=sys.stderr)


def cmd_run(a: argparse.Namespace) -> int:
    from .cluster.kubeclient import load_credentials
    from .serve import election_config, serve
    from .plugins import registry_with

    _setup_logging(a.log_level, a.log_format)
    if a.leader_elect:
        problems = election_config(a).check()
        if problems:
            _startup_error(a, "invalid leader election flags: " + "; ".join(problems))
            return 2
    try:
        creds = load_credentials(a.kubeconfig, a.context)
    except (RuntimeError, KeyError, ValueError) as e:
        _startup_error(a, f"cannot load credentials: {e}")
        return 2
    try:
        registry, added = registry_with(a.plugin_module)
    except Exception as e:  # an import error, or a name that clashes: say which module
        _startup_error(a, f"cannot load plugin modules {a.plugin_module}: {type(e).__name__}: {e}")
        return 2
    if added:
        logging.getLogger("policy_scheduler").info("out-of-tree plugins registered: %s", ", ".join(added))
    return asyncio.run(serve(a, creds, registry))


def cmd_crd(a: argparse.Namespace) -> int:
    from .api.crd import crd_yaml

    sys.stdout.write(crd_yaml())
    return 0


def cmd_explain(a: argparse.Namespace) -> int:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from .cluster.kubeclient import client_configuration
    from .explain import DECISION_ANNOTATION, print_decision

    if "/" in a.pod:
        ns, name = a.pod.split("/", 1)
    else:
        ns, name = "default", a.pod
    try:
        cfg = client_configuration(a.kubeconfig, a.context)
    except RuntimeError as e:  # no kubeconfig, unknown context, a failing exec plugin
        print(f"policy-scheduler explain: cannot load credentials: {e}", file=sys.stderr)
        return 1
    try:
        core = client.CoreV1Api(client.ApiClient(cfg))
        pod = core.read_namespaced_pod(name, ns)
    except ApiException as e:
        print(f"policy-scheduler explain: cannot read pod {ns}/{name}: HTTP {e.status} {e.reason}", file=sys.stderr)
        return 1
    except Exception as e:  # an unreachable server
        print(f"policy-scheduler explain: {e}", file=sys.stderr)
        return 1
    print(f"pod {ns}/{name}: scheduler {pod.spec.scheduler_name}, node {pod.spec.node_name or '(none)'}")
    ann = (pod.metadata.annotations or {}).get(DECISION_ANNOTATION)
    if ann:
        try:
            d = json.loads(ann)
        except ValueError:
            print(f"  unreadable {DECISION_ANNOTATION} annotation")
            return 1
        if a.output == "json":
            print(json.dumps(d, indent=2))
        else:
            print_decision(d, sys.stdout)
            # a preemptor: which pods it preempted, where, and why that node (its Preempting event)
            try:
                evs = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
            except ApiException:
                evs = []
            for e in evs:
                if e.reason == "Preempting" and (not pod.metadata.uid or e.involved_object.uid == pod.metadata.uid):
                    print(f"  preemption: {e.message}")
        return 0
    cond = next((c for c in (pod.status.conditions or []) if c.type == "PodScheduled"), None)
    if cond is not None and cond.status == "False":
        print(f"  not scheduled ({cond.reason}): {cond.message}")
    else:
        print("  no decision recorded by policy-scheduler for this pod")
    evs = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    for e in sorted(evs, key=lambda e: str(e.last_timestamp or e.event_time or ""))[-5:]:
        print(f"  event {e.type} {e.reason}: {e.message}")
    return 0


def _live_snapshot(a: argparse.Namespace, who: str):
    """A snapshot of the cluster the kubeconfig names (None after printing why not)."""
    from .cluster.kubeclient import KubeClient, load_credentials
    from .whatif import snapshot

    try:
        creds = load_credentials(a.kubeconfig, a.context)
    except (RuntimeError, KeyError, ValueError) as e:
        print(f"policy-scheduler {who}: cannot load credentials: {e}", file=sys.stderr)
        return None

    async def take():
        client = KubeClient(creds)
        try:
            return await snapshot.take(client, scheduler_name=a.scheduler_name, default_policy=a.default_policy,
                                       prometheus_url=a.prometheus_url,
                                       warn=lambda m: print(f"policy-scheduler {who}: warning: {m}", file=sys.stderr))
        finally:
            await client.close()

    try:
        return asyncio.run(take())
    except Exception as e:  # an unreachable server, a denied list
        print(f"policy-scheduler {who}: cannot read the cluster: {type(e).__name__}: {e}", file=sys.stderr)
        return None


def _quiet_operator_logs() -> None:
    """The policy store logs every policy it loads; a simulation reports problems itself."""
    logging.getLogger("policy_scheduler").setLevel(logging.ERROR)


def cmd_snapshot(a: argparse.Namespace) -> int:
    _quiet_operator_logs()
    snap = _live_snapshot(a, "snapshot")
    if snap is None:
        return 1
    text = snap.dumps()
    if a.output in (None, "-"):
        sys.stdout.write(text)
    else:
        try:
            with open(a.output, "w") as f:
                f.write(text)
        except OSError as e:
            print(f"policy-scheduler snapshot: cannot write {a.output}: {e.strerror or e}", file=sys.stderr)
            return 1
        print(f"snapshot of {len(snap.nodes)} nodes, {len(snap.pods)} bound pods, {len(snap.pending_pods)} pending "
              f"pods, {len(snap.volumes['persistentvolumes'])} persistent volumes, "
              f"{len(snap.volumes['persistentvolumeclaims'])} claims, {len(snap.policies)} policies, "
              f"{sum(len(m['samples']) for m in snap.metrics)} metric values written to {a.output}", file=sys.stderr)
    return 0


def _is_file_arg(v: str) -> bool:
    return os.path.exists(v) or v.endswith((".yaml", ".yml", ".json")) or os.sep in v


def cmd_simulate(a: argparse.Namespace) -> int:
    from .whatif import report, snapshot
    from .whatif.pods import InputError, load_pods, load_policy_documents
    from .whatif.simulate import simulate
    from .whatif.world import PolicyError, World

    _quiet_operator_logs()
    if a.pods and a.pending:
        print("policy-scheduler simulate: --pods and --pending exclude each other", file=sys.stderr)
        return 2
    if not a.pods and not a.pending:
        print("policy-scheduler simulate: say which pods to place: --pods FILE or --pending", file=sys.stderr)
        return 2
    if a.replicas is not None and a.replicas < 1:
        print("policy-scheduler simulate: --replicas must be at least 1", file=sys.stderr)
        return 2
    try:
        if a.snapshot:
            snap = snapshot.load(a.snapshot)
            source = a.snapshot
        else:
            snap = _live_snapshot(a, "simulate")
            if snap is None:
                return 1
            source = "the live cluster"
        world = World(snap)
        names: list[str] = []
        for arg in a.policy or [snap.default_policy]:
            if _is_file_arg(arg):
                docs = load_policy_documents(arg)
                if not docs:
                    raise PolicyError(f"{arg}: no SchedulingPolicy in the file")
                for doc in docs:
                    names.append(world.add_policy(doc, arg))
            else:
                world.usable_policy(arg)
                names.append(arg)
        for n in names:
            world.usable_policy(n)
        names = list(dict.fromkeys(names))
        if a.pods:
            podset = load_pods(a.pods, a.replicas)
            pods = podset.pods
            world.add_workloads(podset.workloads)
        else:
            pods = snap.pending_pods
            if not pods:
                print(f"policy-scheduler simulate: no pending pods of scheduler {snap.scheduler_name} in {source}",
                      file=sys.stderr)
                return 1
    except (snapshot.SnapshotError, PolicyError, InputError) as e:
        print(f"policy-scheduler simulate: {e}", file=sys.stderr)
        return 2
    bar = None
    if not a.json and sys.stderr.isatty():
        from tqdm import tqdm

        # shown only when the run takes longer than about 2 s
        bar = tqdm(total=len(pods) * len(names), unit="pod", delay=2.0, file=sys.stderr, leave=False,
                   desc="simulating")
    try:
        sim = simulate(world, names, pods, seed=a.seed, keep_decisions=a.explain, source=source,
                       progress=bar.update if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()
    if a.report:
        try:
            with open(a.report, "w") as f:
                f.write(report.html_report(sim))
        except OSError as e:
            print(f"policy-scheduler simulate: cannot write {a.report}: {e.strerror or e}", file=sys.stderr)
            return 1
    if a.json:
        json.dump(sim.to_dict(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif a.explain:
        for run in sim.runs:
            report.write_explain(run, sys.stdout)
    else:
        report.write_text(sim, sys.stdout)
    if a.report and not a.json:
        print(f"\nreport written to {a.report}")
    return 0


def cmd_tune(a: argparse.Namespace) -> int:
    from .whatif import snapshot, tune
    from .whatif.pods import InputError, load_pods, load_policy_documents
    from .whatif.world import PolicyError, World

    _quiet_operator_logs()
    if not 0 <= a.holdout < 1:
        print("policy-scheduler tune: --holdout must be in [0, 1)", file=sys.stderr)
        return 2
    try:
        snap = snapshot.load(a.snapshot)
        world = World(snap)
        if _is_file_arg(a.policy):
            docs = load_policy_documents(a.policy)
            if len(docs) != 1:
                raise PolicyError(f"{a.policy}: one SchedulingPolicy expected, found {len(docs)} documents")
            name = world.add_policy(docs[0], a.policy)
        else:
            name = a.policy
        st = world.usable_policy(name)
        tuning = st.good_spec.tuning if st.good_spec is not None else None
        if tuning is None:
            raise PolicyError(f'SchedulingPolicy "{name}" has no spec.tuning: it names the objective and the bounds '
                              "(docs/policy-reference.md#spectuning)")
        podset = load_pods(a.pods, a.replicas)
        world.add_workloads(podset.workloads)
        pods = podset.pods
    except (snapshot.SnapshotError, PolicyError, InputError) as e:
        print(f"policy-scheduler tune: {e}", file=sys.stderr)
        return 2
    cut = len(pods) - int(round(len(pods) * a.holdout))
    if a.holdout and not 0 < cut < len(pods):
        print(f"policy-scheduler tune: {len(pods)} pods cannot be split with --holdout {a.holdout}", file=sys.stderr)
        return 2
    window, held_out = pods[:cut], pods[cut:]
    if a.max_replays is not None:
        tuning = tuning.model_copy(update={"max_replays": a.max_replays})
    if a.seed is not None:
        tuning = tuning.model_copy(update={"seed": a.seed})

    async def go():
        await world.prepare()
        res = await tune.search(world, name, window, tuning)
        check = None
        if held_out:
            objective = tuning.objective.weights()
            cur = await tune.replay(world, name, held_out, res.current.weights, objective, seed=tuning.seed)
            rec = await tune.replay(world, name, held_out, res.recommended.weights, objective, seed=tuning.seed)
            check = (cur, rec)
        return res, check

    res, check = asyncio.run(go())
    if a.json:
        out = {"policy": name, "snapshot": a.snapshot, "pods": len(pods), "objective": tuning.objective.weights(),
               **res.to_dict()}
        if check is not None:
            out["heldOut"] = {"pods": len(held_out), "current": check[0].to_dict(), "recommended": check[1].to_dict(),
                              "gain": round(tune.relative(check[1].objective, check[0].objective), 6)}
        json.dump(out, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    tune.write_text(res, sys.stdout, policy=name, objective=tuning.objective.weights(), nodes=len(world.node_specs),
                    held_out=check, held_out_pods=len(held_out))
    return 0


def _duration(v: str) -> float:
    from .api.models import duration_seconds

    try:
        return duration_seconds(v)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _bool(v: str) -> bool:
    if v.lower() in ("true", "1", "yes"):
        return True
    if v.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{v!r} is not true or false")


def _namespaced(v: str) -> tuple[str, str]:
    ns, sep, name = v.partition("/")
    if not sep or not ns or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"{v!r} is not NAMESPACE/NAME")
    return ns, name


def _url(v: str) -> str:
    if not v.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"{v!r} is not an http(s) URL")
    return v


def build_parser() -> argparse.ArgumentParser:
    from .cluster.leader import LEASE_DURATION, RENEW_DEADLINE, RESOURCE_NAMESPACE, RETRY_PERIOD
    from .cache.policies import DEFAULT_POLICY
    from .cache.revisions import DEFAULT_HISTORY_LIMIT, default_namespace
    from .cluster.rollout import add_parser as add_rollout_parser, non_negative

    p = argparse.ArgumentParser(
        prog="policy-scheduler",
        description="A Kubernetes scheduler whose policies are SchedulingPolicy custom resources. "
                    "Pods with spec.schedulerName: policy-scheduler are placed by the policy named in their "
                    "label policy-scheduler.io/policy (else the policy named 'default').")
    p.add_argument("--version", action="version", version=f"policy-scheduler {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run the scheduler (the operator)",
                       description="Watch nodes, pods, namespaces and SchedulingPolicies; schedule pending pods "
                                   "of this scheduler and bind them. Install the CRD first (crds/).")
    r.add_argument("--kubeconfig", default=None, metavar="FILE", help=KUBECONFIG_HELP)
    r.add_argument("--context", default=None, help=CONTEXT_HELP)
    r.add_argument("--namespace", "-n", action="append", default=[],
                   help="only schedule pods of this namespace (repeatable; default: all). Bound pods of every "
                        "namespace still count against node capacity.")
    r.add_argument("--scheduler-name", default=SCHEDULER_NAME,
                   help="spec.schedulerName of the pods to schedule; this instance also loads only the "
                        "SchedulingPolicies whose spec.schedulerName is this name, and writes only their status "
                        f"(default {SCHEDULER_NAME})")
    r.add_argument("--default-policy", default=DEFAULT_POLICY, metavar="NAME",
                   help="the policy of pods without the policy-scheduler.io/policy label "
                        f"(default {DEFAULT_POLICY!r})")
    r.add_argument("--revision-namespace", default=default_namespace(), metavar="NAMESPACE",
                   help="where every valid generation of a policy is recorded as a ControllerRevision (default: "
                        "$POD_NAMESPACE, else policy-scheduler-system)")
    r.add_argument("--revision-history-limit", type=non_negative, default=DEFAULT_HISTORY_LIMIT, metavar="N",
                   help=f"revisions kept per policy (default {DEFAULT_HISTORY_LIMIT}; 0: none recorded)")
    le = r.add_argument_group(
        "leader election", "Replicas share a coordination.k8s.io Lease: one leads and schedules, the others keep "
                           "their caches warm and take over when it stops renewing. Same flags and defaults as "
                           "kube-scheduler's.")
    le.add_argument("--leader-elect", type=_bool, nargs="?", const=True, default=True, metavar="true|false",
                    help="run for leader before scheduling (default true); --leader-elect=false for a single "
                         "instance that needs no Lease")
    le.add_argument("--leader-elect-lease-duration", type=_duration, default=LEASE_DURATION, metavar="DURATION",
                    help="how long a standby waits, after it last saw the Lease renewed, before it takes the "
                         "Lease (default 15s)")
    le.add_argument("--leader-elect-renew-deadline", type=_duration, default=RENEW_DEADLINE, metavar="DURATION",
                    help="how long the leader retries renewing before it stops scheduling and exits; shorter "
                         "than the lease duration (default 10s)")
    le.add_argument("--leader-elect-retry-period", type=_duration, default=RETRY_PERIOD, metavar="DURATION",
                    help="time between attempts to take or renew the Lease (default 2s)")
    le.add_argument("--leader-elect-resource-name", default=None, metavar="NAME",
                    help="the Lease's name (default: --scheduler-name)")
    le.add_argument("--leader-elect-resource-namespace", default=RESOURCE_NAMESPACE, metavar="NAMESPACE",
                    help=f"the Lease's namespace (default {RESOURCE_NAMESPACE}, as kube-scheduler's)")
    wh = r.add_argument_group(
        "admission webhooks", "Served by every replica over HTTPS with a certificate the operator makes and keeps in "
                              "a Secret; the caBundle is written into the webhook configurations (manifests/). "
                              "Off unless --webhook-port is set.")
    wh.add_argument("--webhook-port", type=int, default=0,
                    help="HTTPS port of the admission webhooks: policy validation, pod defaulting in namespaces "
                         "labelled policy-scheduler.io/inject=enabled, tenancy (default 0: off)")
    wh.add_argument("--webhook-address", default="0.0.0.0")
    wh.add_argument("--webhook-secret", type=_namespaced, default=("policy-scheduler-system",
                                                                   "policy-scheduler-webhook-tls"),
                    metavar="NAMESPACE/NAME",
                    help="the Secret holding the CA and serving certificate (created if missing; default "
                         "policy-scheduler-system/policy-scheduler-webhook-tls)")
    wh.add_argument("--webhook-service", type=_namespaced, default=("policy-scheduler-system",
                                                                    "policy-scheduler-webhook"),
                    metavar="NAMESPACE/NAME", help="the webhook Service: its DNS names go in the certificate")
    wh.add_argument("--webhook-host", action="append", default=[], metavar="HOST",
                    help="another DNS name or IP address for the certificate (repeatable), for webhook "
                         "configurations that call a URL")
    wh.add_argument("--webhook-configuration", default="policy-scheduler", metavar="NAME",
                    help="the Validating- and MutatingWebhookConfiguration whose caBundle the operator writes "
                         "(default policy-scheduler; empty: none)")
    wh.add_argument("--webhook-manage-certs", type=_bool, nargs="?", const=True, default=True, metavar="true|false",
                    help="create and renew the certificates (default true); false: only read the Secret, e.g. "
                         "one cert-manager fills")
    r.add_argument("--cache-sync-timeout", type=_duration, default=60.0, metavar="DURATION",
                   help="time the informers have to list everything; past it the operator logs which one is "
                        "stuck and why (e.g. 403 on list services), stays unready and keeps retrying (default 1m)")
    r.add_argument("--log-level", choices=LOG_LEVELS, default="info",
                   help="least severe level logged (default info); debug adds every decision (policy, node, "
                        "top scores), every binding, queue moves and kopf's own logs")
    r.add_argument("--log-format", choices=LOG_FORMATS, default="text",
                   help="text (default): '<time> <LEVEL> <logger>: <message>' then the line's fields as "
                        "key=value; json: one JSON object per line with ts (RFC 3339 UTC, milliseconds), level, "
                        "logger, msg, the line's fields (pod, policy, node, ...) and exc for a traceback. "
                        "Applies to every logger, kopf's included")
    r.add_argument("--qps", type=float, default=500.0, help="client requests per second to the API server "
                                                            "(bindings, events, status); 0 = unlimited")
    r.add_argument("--burst", type=int, default=1000, help="client burst above --qps")
    r.add_argument("--bind-concurrency", type=int, default=64, help="bindings in flight at once")
    r.add_argument("--metrics-port", type=int, default=8081, help="Prometheus /metrics port (0 = off)")
    r.add_argument("--metrics-address", default="0.0.0.0")
    r.add_argument("--plugin-metrics-sample-percent", type=float, default=10.0, metavar="PCT",
                   help="share of scheduling cycles whose plugin calls are timed one by one "
                        "(scheduler_plugin_execution_duration_seconds; default 10, as kube-scheduler)")
    r.add_argument("--health-port", type=int, default=8080,
                   help="probe port (0 = off): /healthz and /livez for liveness (fail only when the scheduling "
                        "loop died), /readyz for readiness (passes once the cache is synced and, on the leader, "
                        "the loop runs)")
    r.add_argument("--health-address", default="0.0.0.0")
    r.add_argument("--prometheus-url", default=None, type=_url,
                   help="Prometheus of the metric plugins (LoadAware, MetricThreshold, MetricScore) for policies "
                        "without spec.prometheus.address, e.g. http://prometheus.monitoring:9090")
    r.add_argument("--prometheus-refresh-interval", type=_duration, default=15.0, metavar="DURATION",
                   help="default time between metric refreshes (default 15s)")
    r.add_argument("--prometheus-query-timeout", type=_duration, default=5.0, metavar="DURATION",
                   help="default time limit of one metric query (default 5s)")
    r.add_argument("--prometheus-ttl", type=_duration, default=120.0, metavar="DURATION",
                   help="default age after which a node's metric value is stale (default 2m)")
    r.add_argument("--prometheus-usage-lag", type=_duration, default=60.0, metavar="DURATION",
                   help="default time a placed pod counts at an estimate before samples show its usage "
                        "(default 1m)")
    r.add_argument("--plugin-module", action="append", default=[], metavar="MODULE",
                   help="import this Python module (dotted name, on PYTHONPATH) and register its out-of-tree "
                        "plugins: its PLUGIN class or PLUGINS list (repeatable). Policies then name them like "
                        "built-in plugins.")
    r.add_argument("--seed", type=int, default=None, metavar="N",
                   help="seed of the random tie-break between equally scored nodes (default: unseeded). Makes "
                        "tie-breaks reproducible, for tests and for comparing with `policy-scheduler simulate "
                        "--seed N`, which draws them the same way (docs/whatif.md)")
    r.set_defaults(fn=cmd_run)

    c = sub.add_parser("crd", help="print the SchedulingPolicy CRD (generated from the API models)")
    c.set_defaults(fn=cmd_crd)

    e = sub.add_parser("explain", help="why a pod went where it went (or why it did not)",
                       description="Shows the latest decision for a pod: the chosen node, per-plugin weighted "
                                   "scores of the top nodes, and how many nodes each filter reason removed.")
    e.add_argument("pod", help="NAMESPACE/POD")
    e.add_argument("--kubeconfig", default=None, metavar="FILE", help=KUBECONFIG_HELP)
    e.add_argument("--context", default=None, help=CONTEXT_HELP)
    e.add_argument("--output", "-o", choices=("text", "json"), default="text")
    e.set_defaults(fn=cmd_explain)
    s = sub.add_parser("snapshot", help="write the cluster state a scheduling decision reads to a file",
                       description="Writes nodes, bound and pending pods, namespaces with their labels, the Services "
                                   "and controllers default spreading reads, PodDisruptionBudgets, the storage "
                                   "objects the volume plugins read (PersistentVolumes, PersistentVolumeClaims, "
                                   "StorageClasses, CSINodes, CSIDrivers), the SchedulingPolicies and (with "
                                   "Prometheus) the current metric values, as one versioned JSON document "
                                   "(docs/whatif.md). Reads only.")
    s.add_argument("--output", "-o", default="-", metavar="FILE", help="where to write it (default: stdout)")
    _cluster_flags(s)
    s.set_defaults(fn=cmd_snapshot)

    m = sub.add_parser("simulate", help="place pods on a snapshot or the live cluster under one or more policies, "
                                        "binding nothing, and compare",
                       description="Runs the operator's own scheduling core on a copy of the cluster: each policy "
                                   "places the pods in order, each placement assumed as the operator assumes it. "
                                   "Nothing is written to the cluster. Reports per policy placed and unschedulable "
                                   "pods (with the FailedScheduling message), nodes used, imbalance, zone spread "
                                   "and fragmentation.")
    m.add_argument("--snapshot", metavar="FILE", help="a snapshot written by `policy-scheduler snapshot` "
                                                     "(default: read the live cluster)")
    m.add_argument("--policy", action="append", metavar="FILE|NAME",
                   help="a SchedulingPolicy manifest, or the name of a policy of the snapshot or cluster "
                        "(repeatable; default: the default policy)")
    m.add_argument("--pods", metavar="FILE", help="pods to place: Pod manifests or pod templates (Deployment, "
                                                 "ReplicaSet, StatefulSet, Job, ...), YAML or JSON")
    m.add_argument("--replicas", type=int, metavar="N", help="make N pods of every template (and every Pod) in --pods")
    m.add_argument("--pending", action="store_true",
                   help="place the pending pods of the scheduler instead of --pods")
    m.add_argument("--seed", type=int, default=0, metavar="N",
                   help="seed of the random tie-break between equally scored nodes (default 0: the same input gives "
                        "the same output); `policy-scheduler run --seed N` breaks ties the same way")
    m.add_argument("--json", action="store_true", help="print the results as JSON, keyed by policy name")
    m.add_argument("--report", metavar="FILE", help="also write a self-contained HTML report with charts")
    m.add_argument("--explain", action="store_true",
                   help="print explain's per-plugin table for every simulated pod")
    _cluster_flags(m)
    m.set_defaults(fn=cmd_simulate)

    t = sub.add_parser("tune", help="search a policy's Score weights offline, as its spec.tuning would",
                       description="Replays the pods on the snapshot with the operator's own core (as simulate) under "
                                   "the policy's current weights and under candidates within spec.tuning.bounds "
                                   "(coordinate search, seeded tie-breaks, the policy's replay and time budget), and "
                                   "prints every candidate's objective and the recommendation. With --holdout, the "
                                   "search sees only the first part of the pods and the last part checks the "
                                   "recommendation.")
    t.add_argument("--policy", required=True, metavar="FILE|NAME",
                   help="a SchedulingPolicy manifest with spec.tuning, or the name of one in the snapshot")
    t.add_argument("--snapshot", required=True, metavar="FILE", help="a snapshot (`policy-scheduler snapshot`): the "
                                                                     "state before the pods")
    t.add_argument("--pods", required=True, metavar="FILE", help="the pods, in order: Pod manifests or pod templates")
    t.add_argument("--replicas", type=int, metavar="N", help="make N pods of every template (and every Pod) in --pods")
    t.add_argument("--holdout", type=float, default=0.0, metavar="F",
                   help="keep the last F of the pods (0 to 1, e.g. 0.5) out of the search, and compare the current "
                        "and recommended weights on them")
    t.add_argument("--seed", type=int, default=None, metavar="N", help="tie-break seed (default spec.tuning.seed)")
    t.add_argument("--max-replays", type=int, default=None, metavar="N",
                   help="replay budget (default spec.tuning.maxReplays)")
    t.add_argument("--json", action="store_true", help="print the result as JSON")
    t.set_defaults(fn=cmd_tune)
    add_rollout_parser(sub, KUBECONFIG_HELP, CONTEXT_HELP)  # rollout history|undo (cluster/rollout.py)
    return p


def _cluster_flags(p: argparse.ArgumentParser) -> None:
    from .cache.policies import DEFAULT_POLICY

    g = p.add_argument_group("cluster", "where the state is read from (the live cluster; simulate reads it only "
                                        "without --snapshot)")
    g.add_argument("--kubeconfig", default=None, metavar="FILE", help=KUBECONFIG_HELP)
    g.add_argument("--context", default=None, help=CONTEXT_HELP)
    g.add_argument("--scheduler-name", default=SCHEDULER_NAME,
                   help=f"the scheduler whose policies and pending pods are read (default {SCHEDULER_NAME})")
    g.add_argument("--default-policy", default=DEFAULT_POLICY, metavar="NAME",
                   help=f"the operator's --default-policy (default {DEFAULT_POLICY!r})")
    g.add_argument("--prometheus-url", default=None, type=_url,
                   help="Prometheus of the policies' metric plugins (the operator's --prometheus-url): their "
                        "current values go into the snapshot")


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    return a.fn(a)


if __name__ == "__main__":
    sys.exit(main())
