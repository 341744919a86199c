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
  namespace; a ``Path`` location is refused). The kubeconfig is checked as data first, off the
  event loop (cluster/kubeconfig_guard.py: inline credentials and https only; no exec plugin,
  token file or path is ever used) and the client built from the accepted values
  (cluster/multikueue_workers.py, which keeps the chooser's condition on each MultiKueueCluster
  and sends its Events). Each usable worker is read as `policy-scheduler snapshot` reads a
  cluster, again every ``refresh`` seconds, its answers bounded in size;
- the policy: the Workload's label ``policy-scheduler.io/policy``, else that label on its first
  PodSet's template, else the default policy. It must exist in the worker (a worker without it,
  or where it is invalid, is not a candidate);
- the choice: the Workload's pods (each PodSet's template, ``count`` times, at most MAX_PODS and
  MAX_WORKLOAD_BYTES of templates, with the Workload's ``spec.priority``) simulated on every
  worker with simulate's core, in a thread of its own with a time budget (SIM_BUDGET), ranked
  as `simulate --context A --context B` ranks clusters (whatif/across.py): pods placed, then fewest preempted, then the mean score. The best worker
  that holds the whole Workload is nominated, alone (one worker: no preemptions started on the
  others). None holds it: only the record below is written (with ``chosen: null`` and an Event
  ``NoClusterFits``, once per change), and it is tried again once it or a worker's state changed
  (not every round: a Workload is evaluated again only then);
- the nomination: a merge patch of ``status.nominatedClusterNames: [worker]`` with the
  ``resourceVersion`` evaluated (a Workload changed meanwhile gets 409 and is evaluated again),
  sent only if this replica still leads, under the field manager ``policy-scheduler``, and the
  annotation ``policy-scheduler.io/cluster-scores`` (each worker's placed/pods, preempted, mean
  score, or why it was left out, in words of a fixed vocabulary: tenants read it) with an Event
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
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping
from urllib.parse import quote

import orjson

from .. import POLICY_LABEL
from . import multikueue_workers as workers_mod
from .multikueue_workers import Worker

log = logging.getLogger("policy_scheduler.multikueue")

KQ = "/apis/kueue.x-k8s.io/v1beta2"
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
SCORES_ANNOTATION = "policy-scheduler.io/cluster-scores"
FIELD_MANAGER = "policy-scheduler"
MAX_PODS = 1000  # pods simulated per Workload (PodSet counts beyond are cut: a bigger one is refused)
MAX_WORKLOAD_BYTES = 32 * 1024 * 1024  # pods × serialized template, summed over the PodSets
SIM_BUDGET = 10.0  # seconds the chooser waits for one Workload's simulations on every worker
SIM_THREAD = "multikueue-sim"


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


def workload_pods(wl: Mapping[str, Any], max_bytes: int = MAX_WORKLOAD_BYTES) -> list[dict[str, Any]]:
    """The Workload's pods as the worker's Job controller will create them: every PodSet's
    template, ``count`` times (ValueError beyond MAX_PODS, or when ``count`` times the template's
    serialized size, summed over the PodSets, passes ``max_bytes``: the simulation's memory and
    time grow with both). Each template is copied once; its pods share it below their own spec
    dict. The priority is the Workload's ``spec.priority`` (Kueue resolves it), never the
    template's: a template could name any number, which the worker's admission would refuse."""
    meta = wl.get("metadata") or {}
    ns, name = meta.get("namespace") or "default", meta.get("name") or "workload"
    priority = (wl.get("spec") or {}).get("priority")
    podsets = (wl.get("spec") or {}).get("podSets") or []
    if not isinstance(podsets, list) or not all(isinstance(ps, Mapping) for ps in podsets):
        raise ValueError("spec.podSets is not a list of objects")
    total_pods = total_bytes = 0
    parsed = []
    for ps in podsets:  # every bound checked before anything is copied
        count = ps.get("count") or 0
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ValueError(f"spec.podSets[{str(ps.get('name'))[:64]}].count is not a count: {repr(count)[:32]}")
        total_pods += count
        if total_pods > MAX_PODS:
            raise ValueError(f"more than {MAX_PODS} pods")
        tmpl = ps.get("template") or {}
        if not isinstance(tmpl, Mapping):
            raise ValueError(f"spec.podSets[{str(ps.get('name'))[:64]}].template is not an object")
        try:
            raw = orjson.dumps(tmpl)
        except (TypeError, orjson.JSONEncodeError):
            raise ValueError(f"spec.podSets[{str(ps.get('name'))[:64]}].template is not JSON") from None
        total_bytes += count * len(raw)
        if total_bytes > max_bytes:
            raise ValueError(f"pods × template size over {max_bytes} bytes")
        parsed.append((ps, count, raw))
    out: list[dict[str, Any]] = []
    for ps, count, raw in parsed:
        tmpl = orjson.loads(raw)  # one copy of the template per PodSet, not one per pod
        spec = tmpl.get("spec") if isinstance(tmpl.get("spec"), dict) else {}
        spec.pop("priority", None)
        if isinstance(priority, int) and not isinstance(priority, bool):
            spec["priority"] = priority
        labels = tmpl.get("metadata") if isinstance(tmpl.get("metadata"), dict) else {}
        for i in range(count):
            out.append({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {**labels, "name": f"{name}-{ps.get('name', 'main')}-{i}", "namespace": ns},
                        "spec": dict(spec)})
    return out


class _QuietSimulations(logging.Filter):
    """A simulated world loads the worker's policies as the operator's store does, which logs each
    one at info on the ``policy_scheduler`` logger; not for every evaluation. Drops those records
    of the chooser's simulation thread only (the operator's own logs go on meanwhile)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not record.threadName.startswith(SIM_THREAD)


_QUIET = _QuietSimulations()


def _simulate(snapshots: list[tuple[str, Any]], policy: str, pods: list[dict[str, Any]]) -> list[tuple[str, Any, str]]:
    """In the chooser's simulation thread: (worker, Simulation or None, why not) for each worker."""
    from ..whatif.simulate import simulate
    from ..whatif.world import PolicyError, World

    out = []
    for name, snap in snapshots:
        world = World(snap)
        try:
            world.usable_policy(policy)
        except PolicyError:
            out.append((name, None, "PolicyNotUsable"))
            continue
        out.append((name, simulate(world, [policy], pods, source=f"MultiKueueCluster {name}"), ""))
    return out


class Chooser:
    def __init__(self, client, *, dispatcher: str, scheduler_name: str, default_policy: str,
                 kueue_namespace: str = "kueue-system", interval: float = 1.0, refresh: float = 5.0,
                 hold: float = 60.0, allow_insecure_tls: bool = False, sim_budget: float = SIM_BUDGET,
                 max_workload_bytes: int = MAX_WORKLOAD_BYTES,
                 max_response_bytes: int = workers_mod.MAX_RESPONSE_BYTES) -> None:
        self.client, self.dispatcher = client, dispatcher
        self.scheduler_name, self.default_policy = scheduler_name, default_policy
        self.kueue_namespace, self.interval, self.refresh, self.hold = kueue_namespace, interval, refresh, hold
        self.allow_insecure_tls, self.sim_budget = allow_insecure_tls, sim_budget
        self.max_workload_bytes, self.max_response_bytes = max_workload_bytes, max_response_bytes
        self.workers: dict[str, Worker] = {}
        self.nominated = 0
        self.leading: Callable[[], bool] = lambda: True
        # seconds a write may still be sent in (the leader's lease deadline), asked when each write
        # is sent (KubeClient's fence): a chooser whose loop stalled past its deadline writes nothing
        self.fence: Callable[[], float | None] = lambda: None
        # (namespace, name) -> (resourceVersion, the workers' epoch) of the last evaluation, and
        # the resourceVersion last warned about: only Workloads waiting now (bounded by them)
        self._evaluated: dict[tuple[str, str], tuple[Any, tuple]] = {}
        self._warned: dict[tuple[str, str], Any] = {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=SIM_THREAD)
        self._sim: asyncio.Future | None = None  # the simulation in its thread (it may outlive its budget)
        self._checked = -1e18

    async def run(self, leading, fence: Callable[[], float | None] | None = None) -> None:
        """Rounds until cancelled, while ``leading()``; a failed round is logged and retried. Every
        write is fenced by ``fence`` (seconds left on the lease, None: unbounded) when it is sent."""
        log.info("MultiKueue cluster chooser for dispatcher %s started", self.dispatcher)
        self.leading = leading
        if fence is not None:
            self.fence = fence
        logging.getLogger("policy_scheduler").addFilter(_QUIET)
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
            await self.close()

    async def close(self) -> None:
        for w in self.workers.values():
            await w.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        logging.getLogger("policy_scheduler").removeFilter(_QUIET)

    def epoch(self) -> tuple:
        """What a Workload's evaluation depends on besides the Workload: each worker's snapshot."""
        return tuple(sorted((w.name, w.taken if w.snapshot is not None else None, w.error)
                            for w in self.workers.values()))

    async def round(self) -> int:
        """One pass over the Workloads waiting for a nomination; the number nominated."""
        checks = {(a.get("metadata") or {}).get("name") for a in
                  ((await self.client.get(f"{KQ}/admissionchecks")) or {}).get("items") or []
                  if isinstance(a, Mapping) and (a.get("spec") or {}).get("controllerName") == MULTIKUEUE_CONTROLLER}
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
                         key=lambda w: (str((w.get("metadata") or {}).get("creationTimestamp") or ""),
                                        str((w.get("metadata") or {}).get("name") or "")))
        keys = {_key(w) for w in waiting}
        for d in (self._evaluated, self._warned):
            for k in [k for k in d if k not in keys]:
                del d[k]
        await self.refresh_workers(snapshots=bool(waiting))
        done = 0
        epoch = self.epoch()
        for wl in waiting:  # one Workload that cannot be evaluated is logged; the others go on
            key, rv = _key(wl), (wl.get("metadata") or {}).get("resourceVersion")
            if self._evaluated.get(key) == (rv, epoch):
                continue  # neither it nor any worker's state changed since: the same answer
            if self._sim is not None and not self._sim.done():
                break  # the last simulation is still running past its budget: the next round
            try:
                done += await self.choose(wl)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if self._warned.get(key) != rv:  # once per version of the object, not every round
                    self._warned[key] = rv
                    log.warning("workload %s/%s: not nominated: %s: %s", key[0], key[1], type(e).__name__,
                                str(e)[:300])
            self._evaluated[key] = (rv, epoch)
        return done

    async def refresh_workers(self, snapshots: bool = True) -> None:
        """Every MultiKueueCluster's kubeconfig checked again each refresh (Active or not: the
        chooser's own verdict, whatever Kueue's); with ``snapshots``, each usable worker's state
        read again once it is ``refresh`` old."""
        from ..whatif import snapshot

        clusters = ((await self.client.get(f"{KQ}/multikueueclusters")) or {}).get("items") or []
        now = time.monotonic()
        seen = set()
        for mc in clusters:
            if not isinstance(mc, Mapping):
                continue
            meta = mc.get("metadata") or {}
            name = meta.get("name") or ""
            if not isinstance(name, str) or not name:
                continue
            seen.add(name)
            w = self.workers.setdefault(name, Worker(name))
            w.uid = str(meta.get("uid") or "")
            if now - w.checked >= self.refresh:
                w.checked = now
                await workers_mod.check(w, self.client, self.kueue_namespace, mc, event=self.cluster_event,
                                        allow_insecure_tls=self.allow_insecure_tls,
                                        max_bytes=self.max_response_bytes)
            if w.client is None:
                w.snapshot = None
                continue
            if condition(mc, "Active").get("status") != "True":
                w.snapshot, w.error, w.reason = None, workers_mod.NOT_ACTIVE, ""
                continue
            if w.error == workers_mod.NOT_ACTIVE:
                w.error = ""
            if not snapshots or (w.snapshot is not None and now - w.taken < self.refresh):
                continue
            try:
                w.snapshot = await snapshot.take(w.client, scheduler_name=self.scheduler_name,
                                                 default_policy=self.default_policy)
                w.taken, w.error, w.reason = now, "", ""
                if w.held:  # a nomination's pods count until the worker admitted its copy (its pods are
                    # then pending or bound there, or done) or for `hold` seconds
                    remote = ((await w.client.get(f"{KQ}/workloads")) or {}).get("items") or []
                    admitted = {f"{(r.get('metadata') or {}).get('namespace')}/{(r.get('metadata') or {}).get('name')}"
                                for r in remote if isinstance(r, Mapping) and (
                                    condition(r, "Admitted").get("status") == "True"
                                    or condition(r, "Finished").get("status") == "True")}
                    w.held = [h for h in w.held if now - h[0] < self.hold and h[1] not in admitted]
                    w.snapshot.pods.extend(p for _, _, p in w.held)
            except Exception as e:  # down, refused us, answered too much: the detail in the log only
                w.snapshot, w.error, w.reason = None, workers_mod.NOT_READ, ""
                log.warning("MultiKueueCluster %s: not read: %s: %s", name, type(e).__name__, str(e)[:300])
        for gone in set(self.workers) - seen:  # its client closed; nothing of it was ever on disk
            await self.workers.pop(gone).close()

    async def choose(self, wl: Mapping[str, Any]) -> int:
        from ..whatif import across

        meta = wl.get("metadata") or {}
        ns, name = meta.get("namespace") or "default", meta.get("name") or ""
        policy = policy_of(wl, self.default_policy)
        pods = workload_pods(wl, self.max_workload_bytes)  # ValueError for a malformed one: logged by round()
        runs: dict[str, across.ClusterRun] = {}
        usable = []
        for w in self.workers.values():
            runs[w.name] = across.ClusterRun(w.name, f"MultiKueueCluster {w.name}")
            if w.snapshot is None:
                runs[w.name].error = w.error or workers_mod.NOT_READ
            else:
                usable.append((w.name, w.snapshot))
        if usable:  # off the loop, in one thread: the loop goes on renewing leases meanwhile
            self._sim = asyncio.get_running_loop().run_in_executor(self._pool, _simulate, usable, policy, pods)
            try:
                results = await asyncio.wait_for(asyncio.shield(self._sim), self.sim_budget)
            except asyncio.TimeoutError:
                raise TimeoutError(f"simulating {len(pods)} pods on {len(usable)} workers took more than "
                                   f"{self.sim_budget:g}s") from None
            for wname, sim, why in results:
                runs[wname].sim = sim
                if why:
                    runs[wname].skipped[policy] = why
        ranked = across.rank(list(runs.values()), policy)
        scores: dict[str, Any] = {s.cluster: {"placed": s.placed, "pods": s.pods, "preempted": s.preempted,
                                              "meanScore": round(s.mean_score, 2), "rank": i}
                                  for i, s in enumerate(ranked, 1)}
        for c in runs.values():  # words of a fixed vocabulary: tenants read this record
            if c.error:
                scores[c.name] = self.workers[c.name].record()
            elif c.skipped:
                scores[c.name] = {"error": c.skipped.get(policy, "PolicyNotUsable")}
        whole = [s for s in ranked if s.placed == s.pods]
        best = whole[0].cluster if whole else None
        path = f"{KQ}/namespaces/{quote(ns, safe='')}/workloads/{quote(name, safe='')}"
        note = json.dumps({"policy": policy, "chosen": best, "clusters": scores}, sort_keys=True,
                          separators=(",", ":"))
        if best is None:  # nothing written but why (once per change): tried again after the next refresh
            if (meta.get("annotations") or {}).get(SCORES_ANNOTATION) != note and self.leading():
                log.info("workload %s/%s: no worker holds its %d pods under policy %s: %s", ns, name, len(pods),
                         policy, note)
                await self._record(path, ns, name, note)
                await self.event(wl, "NoClusterFits", f"no worker holds its {len(pods)} pods under policy {policy}: "
                                 + ", ".join(f"{c} {scores[c].get('placed', '-')}/{len(pods)}" for c in runs))
            return 0
        if not self.leading():  # checked right before the write: the simulation took time
            return 0
        # the version evaluated, or 409: a Workload Kueue (or another leader) changed meanwhile is
        # evaluated again, never nominated twice
        await self.client.request("PATCH", f"{path}/status",
                                  {"metadata": {"resourceVersion": meta.get("resourceVersion")},
                                   "status": {"nominatedClusterNames": [best]}},
                                  content_type="application/merge-patch+json",
                                  params={"fieldManager": FIELD_MANAGER}, fence=self.fence)
        await self._record(path, ns, name, note)
        self.nominated += 1
        run = runs[best].sim.runs[0]
        now = time.monotonic()
        worker = self.workers[best]
        for p, r in zip(pods, run.results):
            if r.node and worker.snapshot is not None:  # counted there until the worker's next snapshot (and `hold`)
                bound = {**p, "spec": {**p["spec"], "nodeName": r.node}}
                worker.snapshot.pods.append(bound)
                worker.held.append((now, f"{ns}/{name}", bound))
        log.info("workload %s/%s: nominated %s under policy %s (%s)", ns, name, best, policy,
                 ", ".join(f"{s.cluster} {s.placed}/{s.pods} score {s.mean_score:.1f}" for s in ranked))
        await self.event(wl, "ClusterNominated", f"nominated {best} under policy {policy}: " + ", ".join(
            f"{s.cluster} {s.placed}/{s.pods} placed, score {s.mean_score:.1f}" for s in ranked))
        return 1

    async def _record(self, path: str, ns: str, name: str, note: str) -> None:
        if not self.leading():
            return
        try:
            await self.client.merge_patch(path, {"metadata": {"annotations": {SCORES_ANNOTATION: note}}},
                                          fence=self.fence)
        except Exception as e:  # a nomination stands without it; the record is best effort
            log.warning("workload %s/%s: scores not recorded: %s", ns, name, e)

    async def event(self, wl: Mapping[str, Any], reason: str, note: str) -> None:
        meta = wl.get("metadata") or {}
        await self._post_event(meta.get("namespace") or "default", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": meta.get("name"),
            "namespace": meta.get("namespace") or "default", "uid": meta.get("uid")}, "Normal", "Nominate", reason, note)

    async def cluster_event(self, w: Worker, typ: str, reason: str, note: str) -> None:
        """An Event regarding the MultiKueueCluster (cluster-scoped: its Events live in ``default``,
        as client-go's recorder puts them; `kubectl describe` finds them there)."""
        await self._post_event("default", {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster",
                                           "name": w.name, "uid": w.uid}, typ, "LoadKubeconfig", reason, note)

    async def _post_event(self, ns: str, regarding: dict, typ: str, action: str, reason: str, note: str) -> None:
        from .recorder import now_micro, truncate_note

        body = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": f"{regarding.get('name')}.{time.time_ns():x}", "namespace": ns},
                "eventTime": now_micro(), "reportingController": self.scheduler_name,
                "reportingInstance": f"{self.scheduler_name}-multikueue", "action": action, "reason": reason,
                "type": typ, "note": truncate_note(note), "regarding": regarding}
        try:
            await self.client.post(f"/apis/events.k8s.io/v1/namespaces/{quote(ns, safe='')}/events", body,
                                   fence=self.fence)
        except Exception as e:
            log.warning("event %s for %s %s not recorded: %s", reason, regarding.get("kind"), regarding.get("name"), e)


def _key(wl: Mapping[str, Any]) -> tuple[str, str]:
    meta = wl.get("metadata") or {}
    return (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
