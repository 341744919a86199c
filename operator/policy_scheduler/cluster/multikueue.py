"""The MultiKueue cluster chooser (`policy-scheduler run --multikueue-dispatcher NAME`), in the
manager cluster: Kueue's External dispatcher contract, with a SchedulingPolicy choosing the worker.

Kueue (v0.17, its manager configured with ``multiKueue.dispatcherName: NAME``, any name that is not
one of its own) reserves quota for a Workload in a ClusterQueue with a MultiKueue AdmissionCheck,
leaves the check Pending and waits for someone to write ``status.nominatedClusterNames``. The
chooser does that, once a second:

- the Workloads to nominate: QuotaReserved, no ``clusterName``, no nomination, a MultiKueue
  AdmissionCheck (``controllerName: kueue.x-k8s.io/multikueue``) Pending;
- the workers: the MultiKueueClusters that are Active, reached through the kubeconfig Secret
  MultiKueue itself uses (``spec.clusterSource.kubeConfig``, key ``kubeconfig`` in Kueue's
  namespace; a ``Path`` location is read as a file); each read as `policy-scheduler snapshot`
  reads a cluster, again every ``refresh`` seconds;
- the policy: the Workload's label ``policy-scheduler.io/policy``, else that label on its first
  PodSet's template, else the default policy. It must exist in the worker (a worker without it,
  or where it is invalid, is not a candidate);
- the choice: the Workload's pods (each PodSet's template, ``count`` times, with the Workload's
  ``spec.priority`` where the template has no resolved priority) simulated on every
  worker with simulate's core, ranked as `simulate --context A --context B` ranks clusters
  (whatif/across.py): pods placed, then fewest preempted, then the mean score. The best worker
  that holds the whole Workload is nominated, alone (one worker: no preemptions started on the
  others). None holds it: only the record below is written (with ``chosen: null`` and an Event
  ``NoClusterFits``, once per change), and it is tried again after the next refresh;
- the nomination: a merge patch of ``status.nominatedClusterNames: [worker]`` under the field
  manager ``policy-scheduler``, and the annotation ``policy-scheduler.io/cluster-scores`` (each
  worker's placed/pods, preempted, mean score, or why it was left out) with an Event
  ``ClusterNominated`` on the Workload. Kueue clears the nomination when it sets ``clusterName``:
  for that, its manager must write with merge patches (feature gate
  ``WorkloadRequestUseMergePatch``) or the cluster must run Kueue's MutatingAdmissionPolicy that
  clears the field (docs/multicluster.md);
- until the worker admits a nominated Workload (Kueue sets its ``clusterName``; or it is gone, or
  ``hold`` seconds passed), the pods the simulation placed there count as bound on the nodes it
  chose, so a burst of Workloads does not all go to the worker that looked emptiest.

Nothing here blocks the scheduling loop of a worker: the chooser runs in the manager's operator,
which schedules no pods of its own there.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from .. import POLICY_LABEL

log = logging.getLogger("policy_scheduler.multikueue")

KQ = "/apis/kueue.x-k8s.io/v1beta2"
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
SCORES_ANNOTATION = "policy-scheduler.io/cluster-scores"
FIELD_MANAGER = "policy-scheduler"
MAX_PODS = 1000  # pods simulated per Workload (PodSet counts beyond are cut: a bigger one is refused)


def condition(obj: Mapping[str, Any], typ: str) -> dict:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == typ:
            return dict(c)
    return {}


def to_nominate(wl: Mapping[str, Any], checks: set[str]) -> bool:
    """Kueue waits for an External dispatcher's nomination (its Incremental dispatcher's guards)."""
    st = wl.get("status") or {}
    if condition(wl, "QuotaReserved").get("status") != "True" or condition(wl, "Finished").get("status") == "True":
        return False
    if st.get("clusterName") or st.get("nominatedClusterNames"):
        return False
    return any(isinstance(a, Mapping) and a.get("name") in checks and a.get("state") == "Pending"
               for a in st.get("admissionChecks") or [])


def policy_of(wl: Mapping[str, Any], default: str) -> str:
    labels = (wl.get("metadata") or {}).get("labels") or {}
    if labels.get(POLICY_LABEL):
        return str(labels[POLICY_LABEL])
    for ps in (wl.get("spec") or {}).get("podSets") or []:
        if not isinstance(ps, Mapping) or not isinstance(ps.get("template") or {}, Mapping):
            break
        tl = ((ps.get("template") or {}).get("metadata") or {}).get("labels") or {}
        if isinstance(tl, Mapping) and tl.get(POLICY_LABEL):
            return str(tl[POLICY_LABEL])
        break
    return default


def workload_pods(wl: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The Workload's pods as the worker's Job controller will create them: every PodSet's
    template, ``count`` times (ValueError beyond MAX_PODS)."""
    meta = wl.get("metadata") or {}
    ns, name = meta.get("namespace") or "default", meta.get("name") or "workload"
    # a template holds a priorityClassName, not the priority admission resolves it to on the
    # worker: the Workload's (Kueue's: its WorkloadPriorityClass, else the pods' PriorityClass)
    priority = (wl.get("spec") or {}).get("priority")
    out: list[dict[str, Any]] = []
    podsets = (wl.get("spec") or {}).get("podSets") or []
    if not isinstance(podsets, list) or not all(isinstance(ps, Mapping) for ps in podsets):
        raise ValueError("spec.podSets is not a list of objects")
    for ps in podsets:
        count = ps.get("count") or 0
        if not isinstance(count, int) or count < 0:
            raise ValueError(f"spec.podSets[{ps.get('name')}].count is not a count: {count!r}")
        if len(out) + count > MAX_PODS:
            raise ValueError(f"more than {MAX_PODS} pods")
        tmpl = ps.get("template") or {}
        if not isinstance(tmpl, Mapping):
            raise ValueError(f"spec.podSets[{ps.get('name')}].template is not an object")
        for i in range(count):
            spec = json.loads(json.dumps(tmpl.get("spec") or {}))
            if isinstance(priority, int) and "priority" not in spec:
                spec["priority"] = priority
            out.append({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {**(tmpl.get("metadata") or {}), "name": f"{name}-{ps.get('name', 'main')}-{i}",
                                     "namespace": ns},
                        "spec": spec})
    return out


class _quiet_store:
    """A simulated world loads the worker's policies as the operator's store does, which logs each
    one at info; not for every evaluation. Synchronous (no await inside): nothing else of the
    operator logs meanwhile."""

    def __enter__(self):
        self.logger = logging.getLogger("policy_scheduler")
        self.level = self.logger.level
        self.logger.setLevel(logging.WARNING)

    def __exit__(self, *exc):
        self.logger.setLevel(self.level)


@dataclass
class Worker:
    name: str
    snapshot: Any = None  # whatif.snapshot.Snapshot
    taken: float = 0.0
    error: str = ""
    held: list[tuple[float, str, dict]] = field(default_factory=list)  # (when, workload, a pod it placed)


class Chooser:
    def __init__(self, client, *, dispatcher: str, scheduler_name: str, default_policy: str,
                 kueue_namespace: str = "kueue-system", interval: float = 1.0, refresh: float = 5.0,
                 hold: float = 60.0) -> None:
        self.client, self.dispatcher = client, dispatcher
        self.scheduler_name, self.default_policy = scheduler_name, default_policy
        self.kueue_namespace, self.interval, self.refresh, self.hold = kueue_namespace, interval, refresh, hold
        self.workers: dict[str, Worker] = {}
        self._clients: dict[str, tuple[str, Any]] = {}  # worker -> (kubeconfig text, KubeClient)
        self._dir = tempfile.mkdtemp(prefix="policy-scheduler-multikueue-")
        self.nominated = 0
        self._warned: set[tuple] = set()

    async def run(self, leading) -> None:
        """Rounds until cancelled, while ``leading()``; a failed round is logged and retried."""
        log.info("MultiKueue cluster chooser for dispatcher %s started", self.dispatcher)
        try:
            while True:
                if leading():
                    try:
                        await self.round()
                    except asyncio.CancelledError:
                        raise
                    except Exception as e:  # an API error, a worker down: the next round tries again
                        log.warning("MultiKueue cluster chooser: %s: %s", type(e).__name__, e)
                await asyncio.sleep(self.interval)
        finally:
            for _, c in self._clients.values():
                await c.close()

    async def round(self) -> int:
        """One pass over the Workloads waiting for a nomination; the number nominated."""
        checks = {(a.get("metadata") or {}).get("name") for a in
                  ((await self.client.get(f"{KQ}/admissionchecks")) or {}).get("items") or []
                  if (a.get("spec") or {}).get("controllerName") == MULTIKUEUE_CONTROLLER}
        if not checks:
            return 0
        items = ((await self.client.get(f"{KQ}/workloads")) or {}).get("items") or []
        # a nomination's pods stop counting once its worker admitted the Workload (Kueue then sets
        # clusterName) or it is gone: from then on the worker's own state has them
        pending_nominations = {f"{(w.get('metadata') or {}).get('namespace')}/{(w.get('metadata') or {}).get('name')}"
                               for w in items if isinstance(w, Mapping) and not (w.get("status") or {}).get("clusterName")
                               and condition(w, "Finished").get("status") != "True"}
        for wk in self.workers.values():
            wk.held = [h for h in wk.held if h[1] in pending_nominations]
        waiting = sorted((w for w in items if isinstance(w, Mapping) and to_nominate(w, checks)),
                         key=lambda w: ((w.get("metadata") or {}).get("creationTimestamp") or "",
                                        (w.get("metadata") or {}).get("name") or ""))
        if not waiting:
            return 0
        await self.refresh_workers()
        done = 0
        for wl in waiting:  # one Workload that cannot be evaluated is logged; the others go on
            try:
                done += await self.choose(wl)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                meta = wl.get("metadata") or {}
                key = (meta.get("namespace"), meta.get("name"), meta.get("resourceVersion"))
                if key not in self._warned:  # once per version of the object, not every second
                    self._warned.add(key)
                    log.warning("workload %s/%s: not nominated: %s: %s", key[0], key[1], type(e).__name__, e)
        return done

    async def refresh_workers(self) -> None:
        from ..whatif import snapshot

        clusters = ((await self.client.get(f"{KQ}/multikueueclusters")) or {}).get("items") or []
        now = time.monotonic()
        seen = set()
        for mc in clusters:
            name = (mc.get("metadata") or {}).get("name") or ""
            seen.add(name)
            w = self.workers.setdefault(name, Worker(name))
            if condition(mc, "Active").get("status") != "True":
                w.snapshot, w.error = None, "MultiKueueCluster not Active"
                continue
            if w.snapshot is not None and now - w.taken < self.refresh:
                continue
            try:
                client = await self._client_for(name, mc)
                w.snapshot = await snapshot.take(client, scheduler_name=self.scheduler_name,
                                                 default_policy=self.default_policy)
                w.taken, w.error = now, ""
                if w.held:  # a nomination's pods count until the worker admitted its copy (its pods are
                    # then pending or bound there, or done) or for `hold` seconds
                    remote = ((await client.get(f"{KQ}/workloads")) or {}).get("items") or []
                    admitted = {f"{(r.get('metadata') or {}).get('namespace')}/{(r.get('metadata') or {}).get('name')}"
                                for r in remote if condition(r, "Admitted").get("status") == "True"
                                or condition(r, "Finished").get("status") == "True"}
                    w.held = [h for h in w.held if now - h[0] < self.hold and h[1] not in admitted]
                    w.snapshot.pods.extend(p for _, _, p in w.held)
            except Exception as e:
                w.snapshot, w.error = None, f"not read: {type(e).__name__}: {e}"
        for gone in set(self.workers) - seen:
            del self.workers[gone]

    async def _client_for(self, name: str, mc: Mapping[str, Any]):
        from .kubeclient import KubeClient, load_credentials

        src = ((mc.get("spec") or {}).get("clusterSource") or {}).get("kubeConfig") or {}
        loc, kind = src.get("location") or "", src.get("locationType") or "Secret"
        if kind == "Path":
            text = open(loc).read()
        else:
            sec = await self.client.get(f"/api/v1/namespaces/{self.kueue_namespace}/secrets/{loc}")
            text = base64.b64decode(((sec or {}).get("data") or {}).get("kubeconfig") or "").decode()
        cached = self._clients.get(name)
        if cached is not None and cached[0] == text:
            return cached[1]
        if cached is not None:
            await cached[1].close()
        path = os.path.join(self._dir, f"{name}.kubeconfig")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        client = KubeClient(load_credentials(path))
        self._clients[name] = (text, client)
        return client

    async def choose(self, wl: Mapping[str, Any]) -> int:
        from ..whatif import across
        from ..whatif.simulate import simulate_async
        from ..whatif.world import PolicyError, World

        meta = wl.get("metadata") or {}
        ns, name = meta.get("namespace") or "default", meta.get("name") or ""
        policy = policy_of(wl, self.default_policy)
        pods = workload_pods(wl)  # ValueError for a malformed one: logged by round()
        runs = []
        for w in self.workers.values():
            c = across.ClusterRun(w.name, f"MultiKueueCluster {w.name}")
            runs.append(c)
            if w.snapshot is None:
                c.error = w.error or "not read"
                continue
            with _quiet_store():
                world = World(w.snapshot)
            try:
                world.usable_policy(policy)
            except PolicyError as e:
                c.skipped[policy] = str(e)
                continue
            c.sim = await simulate_async(world, [policy], pods, source=c.source)
        ranked = across.rank(runs, policy)
        scores = {s.cluster: {"placed": s.placed, "pods": s.pods, "preempted": s.preempted,
                              "meanScore": round(s.mean_score, 2), "rank": i}
                  for i, s in enumerate(ranked, 1)}
        for c in runs:
            if c.error or c.skipped:
                scores[c.name] = {"error": c.error or c.skipped.get(policy, "")}
        whole = [s for s in ranked if s.placed == s.pods]
        best = whole[0].cluster if whole else None
        path = f"{KQ}/namespaces/{ns}/workloads/{name}"
        note = json.dumps({"policy": policy, "chosen": best, "clusters": scores}, sort_keys=True,
                          separators=(",", ":"))
        if best is None:  # nothing written but why (once per change): tried again after the next refresh
            if (meta.get("annotations") or {}).get(SCORES_ANNOTATION) != note:
                log.info("workload %s/%s: no worker holds its %d pods under policy %s: %s", ns, name, len(pods),
                         policy, note)
                await self._record(path, ns, name, note)
                await self.event(wl, "NoClusterFits", f"no worker holds its {len(pods)} pods under policy {policy}: "
                                 + ", ".join(f"{c.name} {scores[c.name].get('placed', '-')}/{len(pods)}" for c in runs))
            return 0
        await self.client.request("PATCH", f"{path}/status", {"status": {"nominatedClusterNames": [best]}},
                                  content_type="application/merge-patch+json",
                                  params={"fieldManager": FIELD_MANAGER})
        await self._record(path, ns, name, note)
        self.nominated += 1
        run = next(c for c in runs if c.name == best).sim.runs[0]
        now = time.monotonic()
        worker = self.workers[best]
        for p, r in zip(pods, run.results):
            if r.node:  # counted there until the worker's next snapshot (and `hold` after it)
                bound = {**p, "spec": {**p["spec"], "nodeName": r.node}}
                worker.snapshot.pods.append(bound)
                worker.held.append((now, f"{ns}/{name}", bound))
        log.info("workload %s/%s: nominated %s under policy %s (%s)", ns, name, best, policy,
                 ", ".join(f"{s.cluster} {s.placed}/{s.pods} score {s.mean_score:.1f}" for s in ranked))
        await self.event(wl, "ClusterNominated", f"nominated {best} under policy {policy}: " + ", ".join(
            f"{s.cluster} {s.placed}/{s.pods} placed, score {s.mean_score:.1f}" for s in ranked))
        return 1

    async def _record(self, path: str, ns: str, name: str, note: str) -> None:
        try:
            await self.client.merge_patch(path, {"metadata": {"annotations": {SCORES_ANNOTATION: note}}})
        except Exception as e:  # a nomination stands without it; the record is best effort
            log.warning("workload %s/%s: scores not recorded: %s", ns, name, e)

    async def event(self, wl: Mapping[str, Any], reason: str, note: str) -> None:
        from .recorder import now_micro, truncate_note

        meta = wl.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        body = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": f"{meta.get('name')}.{time.time_ns():x}", "namespace": ns},
                "eventTime": now_micro(), "reportingController": self.scheduler_name,
                "reportingInstance": f"{self.scheduler_name}-multikueue", "action": "Nominate", "reason": reason,
                "type": "Normal", "note": truncate_note(note),
                "regarding": {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": meta.get("name"),
                              "namespace": ns, "uid": meta.get("uid")}}
        try:
            await self.client.post(f"/apis/events.k8s.io/v1/namespaces/{ns}/events", body)
        except Exception as e:
            log.warning("event %s for workload %s/%s not recorded: %s", reason, ns, meta.get("name"), e)
