"""`policy-scheduler snapshot|simulate|tune`: the cluster's state to a file, policies tried on it
(whatif/ computes and writes the results)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys

from . import cluster_flags


def _world_source(a: argparse.Namespace, who: str):
    """(snapshot, where it came from): the file of --snapshot, else the live cluster; None after
    printing why the live cluster could not be read. A file's errors raise (the caller's)."""
    from ..whatif import snapshot

    if a.snapshot:
        return snapshot.load(a.snapshot), a.snapshot
    snap = _live_snapshot(a, who)
    return None if snap is None else (snap, "the live cluster")


_CURRENT = object()  # the context of the flags (the kubeconfig's current one when not given)


def _live_snapshot(a: argparse.Namespace, who: str, context=_CURRENT, errors: list | None = None):
    """A snapshot of the cluster the kubeconfig names (None after printing why not; with
    ``errors``, the reason is appended there instead)."""
    from ..cluster.credentials import load_credentials
    from ..cluster.kubeclient import KubeClient
    from ..whatif import snapshot

    def fail(msg: str) -> None:
        if errors is not None:
            errors.append(msg)
        else:
            print(f"policy-scheduler {who}: {msg}", file=sys.stderr)

    try:
        creds = load_credentials(a.kubeconfig, a.context if context is _CURRENT else context)
    except (RuntimeError, KeyError, ValueError) as e:
        fail(f"cannot load credentials: {e}")
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
        fail(f"cannot read the cluster: {type(e).__name__}: {e}")
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
              f"{len(snap.pod_groups)} PodGroups{f' ({snap.pod_groups_version})' if snap.pod_groups_version else ''}, "
              f"{len(snap.composite_pod_groups)} CompositePodGroups, "
              f"{sum(len(m['samples']) for m in snap.metrics)} metric values written to {a.output}", file=sys.stderr)
    return 0


def _is_file_arg(v: str) -> bool:
    return os.path.exists(v) or v.endswith((".yaml", ".yml", ".json")) or os.sep in v


def _progress_bar(wanted: bool, **kw):
    """A progress bar on stderr when it is a terminal (None otherwise), shown only when the run
    takes longer than about 2 s, gone when closed."""
    if not wanted or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(delay=2.0, file=sys.stderr, leave=False, **kw)


def _drill_spec(a: argparse.Namespace, pods: list, world):
    """The drill-down the flags ask for (whatif/drilldown.py DrillSpec), None for none (only the
    report and --json show one: without --report or --json nothing is taken), or why the flags
    are wrong (a pod or node not in the input)."""
    from ..framework.model.podinfo import PodInfo
    from ..whatif.drilldown import DrillSpec

    if a.explain_top < 0:
        return "--explain-top must be 0 or more"
    if a.explain_top == 0 or not (a.report or a.json):
        return None
    keys = []
    for p in pods:
        if isinstance(p, PodInfo):
            keys.append(p.key)
        else:
            meta = p.get("metadata") or {}
            keys.append(f"{meta.get('namespace') or 'default'}/{meta.get('name')}")
    wanted = []
    for ref in a.explain_pod or []:
        key = ref if "/" in ref else f"default/{ref}"
        if key not in keys:
            return f"--explain-pod {ref}: no such pod among the {len(keys)} pods simulated"
        wanted.append(key)
    known = {n.name for n in world.node_specs}
    for n in a.explain_node or []:
        if n not in known:
            return f"--explain-node {n}: no such node in the snapshot"
    return DrillSpec(pods=list(dict.fromkeys(wanted)), nodes=list(dict.fromkeys(a.explain_node or [])),
                     top=a.explain_top)


def cmd_simulate(a: argparse.Namespace) -> int:
    from ..whatif import report, snapshot
    from ..whatif.pods import InputError, load_pods, load_policy_documents
    from ..whatif.simulate import simulate
    from ..whatif.world import PolicyError, World

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
    snaps, contexts = a.snapshot or [], a.context or []
    if len(snaps) + len(contexts) > 1:
        return _simulate_across(a, snaps, contexts)
    a.snapshot, a.context = (snaps or [None])[0], (contexts or [None])[0]
    try:
        got = _world_source(a, "simulate")
        if got is None:
            return 1
        snap, source = got
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
    drill = _drill_spec(a, pods, world)
    if isinstance(drill, str):
        print(f"policy-scheduler simulate: {drill}", file=sys.stderr)
        return 2
    bar = _progress_bar(not a.json, total=len(pods) * len(names), unit="pod", desc="simulating")
    try:
        sim = simulate(world, names, pods, seed=a.seed, keep_decisions=a.explain, source=source,
                       progress=bar.update if bar is not None else None, drill=drill, suggestions=a.suggestions)
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
        for w in world.warnings:  # the text output lists them itself; keep stdout JSON
            print(f"policy-scheduler simulate: warning: snapshot: {w}", file=sys.stderr)
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


def _simulate_across(a: argparse.Namespace, snaps: list[str], contexts: list[str]) -> int:
    """The same --pods on every snapshot and context, each simulated on its own, then ranked per
    policy (whatif/across.py)."""
    from ..whatif import across, snapshot
    from ..whatif.pods import InputError, load_pods, load_policy_documents
    from ..whatif.simulate import simulate
    from ..whatif.world import PolicyError, World

    who = "policy-scheduler simulate"
    if a.pending:
        print(f"{who}: --pending reads one cluster's pending pods; to compare clusters give the same --pods",
              file=sys.stderr)
        return 2
    if a.explain or a.explain_pod or a.explain_node:
        print(f"{who}: --explain, --explain-pod and --explain-node take one cluster", file=sys.stderr)
        return 2
    names = [*snaps, *contexts]
    if len(set(names)) != len(names):
        print(f"{who}: a cluster is named twice: {', '.join(sorted(n for n in set(names) if names.count(n) > 1))}",
              file=sys.stderr)
        return 2
    try:
        podset = load_pods(a.pods, a.replicas)
        docs = {arg: load_policy_documents(arg) for arg in a.policy or [] if _is_file_arg(arg)}
        for arg, ds in docs.items():
            if not ds:
                raise PolicyError(f"{arg}: no SchedulingPolicy in the file")
        loaded = [(f, f"snapshot {f}", snapshot.load(f)) for f in snaps]
    except (snapshot.SnapshotError, PolicyError, InputError) as e:
        print(f"{who}: {e}", file=sys.stderr)
        return 2
    for ctx in contexts:
        errors: list[str] = []
        loaded.append((ctx, f"context {ctx}", _live_snapshot(a, "simulate", ctx, errors) or errors[0]))
    clusters = []
    for name, source, snap in loaded:
        c = across.ClusterRun(name, source)
        clusters.append(c)
        if isinstance(snap, str):
            c.error = snap
            continue
        world = World(snap)
        wanted: list[str] = []
        for arg in a.policy or [snap.default_policy]:
            try:
                if arg in docs:
                    wanted.extend(world.add_policy(doc, arg) for doc in docs[arg])
                else:
                    world.usable_policy(arg)
                    wanted.append(arg)
            except PolicyError as e:
                c.skipped[arg] = str(e)
        world.add_workloads(podset.workloads)
        if wanted:
            c.sim = simulate(world, list(dict.fromkeys(wanted)), podset.pods, seed=a.seed, source=source)
    if a.report:
        try:
            with open(a.report, "w") as f:
                f.write(across.html_report(clusters, len(podset.pods)))
        except OSError as e:
            print(f"{who}: cannot write {a.report}: {e.strerror or e}", file=sys.stderr)
            return 1
    if a.json:
        json.dump(across.to_dict(clusters, len(podset.pods)), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        across.write_text(clusters, len(podset.pods), sys.stdout)
        if a.report:
            print(f"\nreport written to {a.report}")
    return 0 if any(c.sim is not None for c in clusters) else 1


def cmd_tune(a: argparse.Namespace) -> int:
    from ..whatif import snapshot, tune
    from ..whatif.pods import InputError, load_pods, load_policy_documents
    from ..whatif.world import PolicyError, World

    _quiet_operator_logs()
    if not 0 <= a.holdout < 1:
        print("policy-scheduler tune: --holdout must be in [0, 1)", file=sys.stderr)
        return 2
    try:
        got = _world_source(a, "tune")
        if got is None:
            return 1
        snap, source = got
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

    # the search's replays (at most its budget: it may converge before), then the held-out check's two
    bar = _progress_bar(not a.json, total=tuning.max_replays + (2 if held_out else 0), unit="replay",
                        desc="tuning")

    def tick() -> None:
        if bar is not None:
            bar.update()

    async def go():
        await world.prepare()
        res = await tune.search(world, name, window, tuning, progress=tick)
        check = None
        if held_out:
            if bar is not None:  # the budget the search left is not replayed
                bar.total = bar.n + 2
                bar.refresh()
            objective = tuning.objective.weights()
            cur = await tune.replay(world, name, held_out, res.current.weights, objective, seed=tuning.seed)
            tick()
            rec = await tune.replay(world, name, held_out, res.recommended.weights, objective, seed=tuning.seed)
            tick()
            check = (cur, rec)
        return res, check

    try:
        res, check = asyncio.run(go())
    finally:
        if bar is not None:
            bar.close()
    if a.json:
        out = {"policy": name, "snapshot": a.snapshot, "source": source, "pods": len(pods),
               "objective": tuning.objective.weights(), **res.to_dict()}
        if check is not None:
            out["heldOut"] = {"pods": len(held_out), "current": check[0].to_dict(), "recommended": check[1].to_dict(),
                              "gain": round(tune.relative(check[1].objective, check[0].objective), 6)}
        json.dump(out, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    tune.write_text(res, sys.stdout, policy=name, objective=tuning.objective.weights(), nodes=len(world.node_specs),
                    held_out=check, held_out_pods=len(held_out))
    return 0


DEFAULT_DRILL_PODS = 5  # whatif/drilldown.py DEFAULT_PODS (imported late: the parser stays light)
DRILL_TOP = 5  # whatif/drilldown.py TOP
SUGGEST_PODS = 50  # whatif/simulate.py SUGGEST_PODS


def add_parser(sub) -> None:
    s = sub.add_parser("snapshot", help="write the cluster state a scheduling decision reads to a file",
                       description="Writes nodes, bound and pending pods, namespaces with their labels, the Services "
                                   "and controllers default spreading reads, PodDisruptionBudgets, the storage "
                                   "objects the volume plugins read (PersistentVolumes, PersistentVolumeClaims, "
                                   "StorageClasses, CSINodes, CSIDrivers), the SchedulingPolicies and (with "
                                   "Prometheus) the current metric values, as one versioned JSON document "
                                   "(docs/whatif.md). Reads only.")
    s.add_argument("--output", "-o", default="-", metavar="FILE", help="where to write it (default: stdout)")
    cluster_flags(s)
    s.set_defaults(fn=cmd_snapshot)

    m = sub.add_parser("simulate", help="place pods on a snapshot or the live cluster under one or more policies, "
                                        "binding nothing, and compare",
                       description="Runs the operator's own scheduling core on a copy of the cluster: each policy "
                                   "places the pods in order, each placement assumed as the operator assumes it. "
                                   "Nothing is written to the cluster. Reports per policy placed and unschedulable "
                                   "pods (with the FailedScheduling message), nodes used, imbalance, zone spread "
                                   "and fragmentation.")
    m.add_argument("--snapshot", action="append", metavar="FILE",
                   help="a snapshot written by `policy-scheduler snapshot` (default: read the live cluster); "
                        "repeat it (or --context) to simulate the same --pods on each and rank the clusters")
    m.add_argument("--policy", action="append", metavar="FILE|NAME",
                   help="a SchedulingPolicy manifest, or the name of a policy of the snapshot or cluster "
                        "(repeatable; default: the default policy)")
    m.add_argument("--pods", metavar="FILE", help="pods to place: Pod manifests or pod templates (Deployment, "
                                                 "ReplicaSet, StatefulSet, Job, ...), YAML or JSON")
    m.add_argument("--replicas", type=int, metavar="N", help="make N pods of every template (and every Pod) in --pods")
    m.add_argument("--pending", action="store_true",
                   help="place the pending pods of the scheduler instead of --pods")
    m.add_argument("--seed", type=int, default=0, metavar="N",
                   help="seed of the random tie-break between equally scored placements of a pod group (default 0: "
                        "the same input gives the same output; node ties are never drawn, as kube-scheduler's); "
                        "`policy-scheduler run --seed N` breaks group ties the same way")
    m.add_argument("--json", action="store_true", help="print the results as JSON, keyed by policy name")
    m.add_argument("--report", metavar="FILE", help="also write a self-contained HTML report with charts")
    m.add_argument("--explain", action="store_true",
                   help="print explain's per-plugin table for every simulated pod")
    m.add_argument("--explain-pod", action="append", metavar="NS/NAME",
                   help="give this pod a drill-down in the --report (and --json): every Filter plugin's verdict and "
                        "every Score plugin's raw, normalized and weighted score on its best nodes (repeatable; "
                        f"NAME alone: namespace default; default: the first {DEFAULT_DRILL_PODS} pods)")
    m.add_argument("--explain-node", action="append", metavar="NAME",
                   help="show this node in every drill-down besides the best nodes, e.g. the node you expected the "
                        "pod on (repeatable)")
    m.add_argument("--explain-top", type=int, default=DRILL_TOP, metavar="N",
                   help=f"how many of the best nodes a drill-down shows (default {DRILL_TOP}; 0: no drill-down)")
    m.add_argument("--suggestions", type=int, default=SUGGEST_PODS, metavar="N",
                   help="how many unschedulable pods per policy get suggestions: the changes to the pod or the cluster "
                        "that would place each, verified by its own scheduling cycle (default "
                        f"{SUGGEST_PODS}; 0: none)")
    cluster_flags(m, several=True)
    m.set_defaults(fn=cmd_simulate)

    t = sub.add_parser("tune", help="search a policy's Score weights offline, as its spec.tuning would",
                       description="Replays the pods on a snapshot or the live cluster (read once, nothing written) "
                                   "with the operator's own core (as simulate) under "
                                   "the policy's current weights and under candidates within spec.tuning.bounds "
                                   "(coordinate search, seeded tie-breaks, the policy's replay and time budget), and "
                                   "prints every candidate's objective and the recommendation. With --holdout, the "
                                   "search sees only the first part of the pods and the last part checks the "
                                   "recommendation.")
    t.add_argument("--policy", required=True, metavar="FILE|NAME",
                   help="a SchedulingPolicy manifest with spec.tuning, or the name of one in the snapshot or cluster")
    t.add_argument("--snapshot", metavar="FILE", help="a snapshot (`policy-scheduler snapshot`): the state before the "
                                                     "pods (default: read the live cluster)")
    t.add_argument("--pods", required=True, metavar="FILE", help="the pods, in order: Pod manifests or pod templates")
    t.add_argument("--replicas", type=int, metavar="N", help="make N pods of every template (and every Pod) in --pods")
    t.add_argument("--holdout", type=float, default=0.0, metavar="F",
                   help="keep the last F of the pods (0 to 1, e.g. 0.5) out of the search, and compare the current "
                        "and recommended weights on them")
    t.add_argument("--seed", type=int, default=None, metavar="N", help="tie-break seed (default spec.tuning.seed)")
    t.add_argument("--max-replays", type=int, default=None, metavar="N",
                   help="replay budget (default spec.tuning.maxReplays)")
    t.add_argument("--json", action="store_true", help="print the result as JSON")
    cluster_flags(t)
    t.set_defaults(fn=cmd_tune)
