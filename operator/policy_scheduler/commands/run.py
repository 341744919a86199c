"""`policy-scheduler run`: the operator's flags; serve.py builds and runs it."""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import os
import socket
import sys

from .. import SCHEDULER_NAME
from ..logs import LOG_FORMATS
from . import CONTEXT_HELP, KUBECONFIG_HELP, boolean, duration, namespaced, non_negative, positive, url

LOG_LEVELS = ("debug", "info", "warning", "error")
# what `run` listens on: the flag, and the attributes of its address and port (port 0: off)
LISTENERS = (("--metrics-port", "metrics_address", "metrics_port"), ("--health-port", "health_address", "health_port"),
             ("--webhook-port", "webhook_address", "webhook_port"))


def _setup_logging(level: str, log_format: str = "text") -> None:
    """Text or JSON lines on stderr, for every logger (kopf's included): see logs.py."""
    from ..logs import setup

    setup(level, log_format)


def _startup_error(a: argparse.Namespace, msg: str) -> None:
    """A reason not to start: plain on stderr, or a JSON line with --log-format json."""
    if a.log_format == "json":
        logging.getLogger("policy_scheduler").error(msg)
    else:
        print(f"policy-scheduler: {msg}", file=sys.stderr)


def cmd_run(a: argparse.Namespace) -> int:
    from ..cluster.credentials import load_credentials
    from ..serve import election_config, serve
    from ..plugins import registry_with

    _setup_logging(a.log_level, a.log_format)
    dump_stacks_on_sigusr1()
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
    problem = port_problem(a)
    if problem:
        _startup_error(a, problem)
        return 1
    try:
        code = asyncio.run(serve(a, creds, registry))
    except OSError as e:  # a port taken since the check above
        if e.errno not in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
            raise
        _startup_error(a, port_problem(a) or f"cannot listen: {e.strerror or e}")
        return 1
    return exit_now_if_children_linger(code)


def dump_stacks_on_sigusr1() -> None:
    """``kill -USR1 <pid>`` writes every thread's Python stack to stderr (the container's log),
    and the operator goes on: where a scheduler that binds nothing is waiting, without a debugger."""
    import faulthandler
    import signal

    if hasattr(signal, "SIGUSR1"):  # file descriptor 2: sys.stderr may be replaced (and have none)
        faulthandler.register(signal.SIGUSR1, file=2, all_threads=True, chain=False)


def share(v: str) -> float:
    """A fraction of time, 0 to 1."""
    try:
        f = float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r} is not a number") from None
    if not 0.0 <= f <= 1.0:
        raise argparse.ArgumentTypeError(f"{v!r} is not between 0 and 1")
    return f


def exit_now_if_children_linger(code: int) -> int:
    """``code``, or the process ends here with it while a child process is still alive: the
    tuner's worker, terminated when the operator stopped, runs under SCHED_IDLE (idle.py) and on
    a busy node waits a second or more for a core to exit on; the interpreter's exit would join
    it. Everything else has stopped (the Lease released, the servers closed); the logs are
    flushed first."""
    import multiprocessing

    if not multiprocessing.active_children():
        return code
    # multiprocessing's own finalizers of priority >= 0, which the interpreter's exit would run:
    # they unlink the pool's semaphores and tell the resource tracker, which otherwise warns
    # after our last log line that it cleaned up "leaked semaphore objects" (children are not joined)
    from multiprocessing import util as mp_util

    mp_util._run_finalizers(0)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def port_problem(a: argparse.Namespace) -> str | None:
    """Why `run` could not listen on one of its ports (the first such, naming its flag), or None:
    a port another process listens on, a port two flags name, an address that is not this host's.
    Each is bound once here, as the servers bind it (SO_REUSEADDR), and closed."""
    seen: dict[int, str] = {}
    for flag, address_attr, port_attr in LISTENERS:
        port, address = getattr(a, port_attr), getattr(a, address_attr)
        if not port:
            continue
        if port in seen:
            return f"{flag} {port}: {seen[port]} is the same port"
        seen[port] = flag
        why = cannot_listen(address, port)
        if why:
            return f"{flag} {port}: cannot listen on {address}:{port}: {why}"
    return None


def cannot_listen(address: str, port: int) -> str | None:
    """Why a TCP socket cannot be bound to ``address``:``port`` now (None when it can)."""
    if not 0 < port < 65536:
        return "not a port (1 to 65535)"
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(address or None, port, type=socket.SOCK_STREAM,
                                                              flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as e:
        return f"unknown address ({e.strerror})"
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(sockaddr)
        except OSError as e:
            return (e.strerror or str(e)).lower()
    return None


def add_parser(sub) -> None:
    from ..cache.policies import DEFAULT_POLICY
    from ..cache.revisions import DEFAULT_HISTORY_LIMIT, default_namespace
    from ..cluster.leader import LEASE_DURATION, RENEW_DEADLINE, RESOURCE_NAMESPACE, RETRY_PERIOD

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
                   help="where every valid generation of a policy is recorded as a ControllerRevision: the "
                        "operator's own namespace (default: $POD_NAMESPACE, which the Deployment sets from the "
                        "downward API, else policy-scheduler-system). Outside a pod, name a namespace that exists: "
                        "while it does not, every policy shows RevisionsRecorded=False")
    r.add_argument("--revision-history-limit", type=non_negative, default=DEFAULT_HISTORY_LIMIT, metavar="N",
                   help=f"revisions kept per policy (default {DEFAULT_HISTORY_LIMIT}; 0: none recorded)")
    le = r.add_argument_group(
        "leader election", "Replicas share a coordination.k8s.io Lease: one leads and schedules, the others keep "
                           "their caches warm and take over when it stops renewing. Same flags and defaults as "
                           "kube-scheduler's.")
    le.add_argument("--leader-elect", type=boolean, nargs="?", const=True, default=True, metavar="true|false",
                    help="run for leader before scheduling (default true); --leader-elect=false for a single "
                         "instance that needs no Lease")
    le.add_argument("--leader-elect-lease-duration", type=duration, default=LEASE_DURATION, metavar="DURATION",
                    help="how long a standby waits, after it last saw the Lease renewed, before it takes the "
                         "Lease (default 15s)")
    le.add_argument("--leader-elect-renew-deadline", type=duration, default=RENEW_DEADLINE, metavar="DURATION",
                    help="how long the leader retries renewing before it stops scheduling and exits; shorter "
                         "than the lease duration (default 10s)")
    le.add_argument("--leader-elect-retry-period", type=duration, default=RETRY_PERIOD, metavar="DURATION",
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
    wh.add_argument("--webhook-secret", type=namespaced, default=("policy-scheduler-system",
                                                                   "policy-scheduler-webhook-tls"),
                    metavar="NAMESPACE/NAME",
                    help="the Secret holding the CA and serving certificate (created if missing; default "
                         "policy-scheduler-system/policy-scheduler-webhook-tls)")
    wh.add_argument("--webhook-service", type=namespaced, default=("policy-scheduler-system",
                                                                    "policy-scheduler-webhook"),
                    metavar="NAMESPACE/NAME", help="the webhook Service: its DNS names go in the certificate")
    wh.add_argument("--webhook-host", action="append", default=[], metavar="HOST",
                    help="another DNS name or IP address for the certificate (repeatable), for webhook "
                         "configurations that call a URL")
    wh.add_argument("--webhook-url", default=None, metavar="URL",
                    help="out of the cluster (a laptop, make playground): register the Validating- and "
                         "MutatingWebhookConfiguration (named by --webhook-configuration) calling URL + path, e.g. "
                         "https://127.0.0.1:9443, with the operator's CA; the URL's host goes in the certificate. "
                         "Unset: the configurations of manifests/ (a Service) only get their caBundle")
    wh.add_argument("--webhook-configuration", default="policy-scheduler", metavar="NAME",
                    help="the Validating- and MutatingWebhookConfiguration whose caBundle the operator writes "
                         "(default policy-scheduler; empty: none)")
    wh.add_argument("--webhook-manage-certs", type=boolean, nargs="?", const=True, default=True, metavar="true|false",
                    help="create and renew the certificates (default true); false: only read the Secret, e.g. "
                         "one cert-manager fills")
    wh.add_argument("--webhook-max-inflight", type=positive, default=4, metavar="N",
                    help="admission requests read and decided at once (default 4), and as many again of at most "
                         "64 KiB (the API server's); more wait up to 1s for a slot, then get HTTP 503 (the "
                         "webhooks fail open)")
    wh.add_argument("--webhook-max-buffered-mib", type=positive, default=32, metavar="MIB",
                    help="MiB of request bodies held at once, all requests together (default 32); a request "
                         "past it is refused")
    wh.add_argument("--webhook-read-timeout", type=duration, default=4.0, metavar="DURATION",
                    help="time a request's body has to arrive, from the request's start (default 4s: below the "
                         "configurations' timeoutSeconds of 5); past it the request is refused")
    r.add_argument("--cache-sync-timeout", type=duration, default=60.0, metavar="DURATION",
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
                   help="probe port (0 = off): /livez and /healthz for liveness (fail when the scheduling loop "
                        "died; /healthz also once the Lease is lost), /readyz for readiness (passes once the cache "
                        "is synced and, on the leader, the loop runs); ?verbose lists the checks as kube "
                        "components do, /readyz/<check> answers one")
    r.add_argument("--health-address", default="0.0.0.0")
    r.add_argument("--prometheus-url", default=None, type=url,
                   help="Prometheus of the metric plugins (LoadAware, MetricThreshold, MetricScore) for policies "
                        "without spec.prometheus.address, e.g. http://prometheus.monitoring:9090")
    r.add_argument("--prometheus-refresh-interval", type=duration, default=15.0, metavar="DURATION",
                   help="default time between metric refreshes (default 15s)")
    r.add_argument("--prometheus-query-timeout", type=duration, default=5.0, metavar="DURATION",
                   help="default time limit of one metric query (default 5s)")
    r.add_argument("--prometheus-ttl", type=duration, default=120.0, metavar="DURATION",
                   help="default age after which a node's metric value is stale (default 2m)")
    r.add_argument("--prometheus-usage-lag", type=duration, default=60.0, metavar="DURATION",
                   help="default time a placed pod counts at an estimate before samples show its usage "
                        "(default 1m)")
    r.add_argument("--plugin-module", action="append", default=[], metavar="MODULE",
                   help="import this Python module (dotted name, on PYTHONPATH) and register its out-of-tree "
                        "plugins: its PLUGIN class or PLUGINS list (repeatable). Policies then name them like "
                        "built-in plugins.")
    r.add_argument("--seed", type=int, default=None, metavar="N",
                   help="seed of the random tie-break between equally scored placements of a pod group (default: "
                        "unseeded; ties between nodes are never drawn, as kube-scheduler's). Makes group "
                        "tie-breaks reproducible, for tests and for comparing with `policy-scheduler simulate "
                        "--seed N`, which draws them the same way (docs/whatif.md)")
    sg = r.add_argument_group(
        "suggestions", "for a pod that found no node, what would place it (docs/operations.md, \"Suggestions\"): "
                       "a SchedulingHint event and the pod's policy-scheduler.io/Suggestions condition, searched "
                       "only while no pod waits to be placed or bound")
    sg.add_argument("--suggestions", choices=("on", "off"), default="on",
                    help="search for verified suggestions for pods that cannot be placed (default on)")
    sg.add_argument("--suggestion-budget", type=duration, default=0.020, metavar="DURATION",
                    help="search time per pod (default 20ms; one simulation may overrun it)")
    sg.add_argument("--suggestion-share", type=share, default=0.05, metavar="FRACTION",
                    help="search time per second of the scheduling loop, 0 to 1 (default 0.05: 50ms a second, in "
                         "bursts of at most 200ms)")
    sg.add_argument("--suggestion-queue", type=positive, default=1024, metavar="N",
                    help="pods waiting for a search at most (default 1024); past it the oldest is dropped")
    mk = r.add_argument_group("MultiKueue", "run in a MultiKueue manager cluster as the cluster chooser of Kueue's "
                                            "External dispatcher (docs/multicluster.md)")
    mk.add_argument("--multikueue-dispatcher", default=None, metavar="NAME",
                    help="choose the worker cluster of every Workload waiting for a MultiKueue nomination, with the "
                         "Workload's policy on each worker's live state, and write status.nominatedClusterNames; "
                         "NAME is the dispatcherName Kueue's manager is configured with (default: off)")
    mk.add_argument("--multikueue-namespace", default="kueue-system", metavar="NS",
                    help="Kueue's namespace, where the workers' kubeconfig Secrets are (default kueue-system)")
    mk.add_argument("--multikueue-refresh", type=duration, default=5.0, metavar="DURATION",
                    help="how old a worker's state may be when a Workload is evaluated (default 5s)")
    mk.add_argument("--multikueue-allow-insecure-tls", action="store_true",
                    help="accept a worker kubeconfig with insecure-skip-tls-verify: true (its credentials then go "
                         "to whoever answers at the server's address). Off by default; exec plugins, token files, "
                         "file paths, proxies and plain http are refused whatever this says")
    r.set_defaults(fn=cmd_run)
