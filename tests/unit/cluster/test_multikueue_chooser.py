"""cluster/multikueue.py's Chooser and cluster/multikueue_workers.py against an in-memory manager
API (fakeclient) and in-memory worker snapshots: a refused kubeconfig's condition, Event and
record; the bounds (one evaluation per change, a simulation budget off the loop, what is kept per
Workload, removed workers closed, a worker's answer size); nominations fenced by resourceVersion
and leadership. The chooser against real control planes and Kueue is
tests/e2e/test_multikueue_workers.py."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from support.fakeclient import FakeClient
from policy_scheduler.cluster import multikueue as mkmod
from policy_scheduler.cluster import multikueue_workers as workers_mod
from policy_scheduler.cluster.certs import make_ca
from policy_scheduler.cluster.credentials import Credentials
from policy_scheduler.cluster.kubeclient import ApiError
from policy_scheduler.cluster.multikueue import KQ, SCORES_ANNOTATION, Chooser
from policy_scheduler.whatif import snapshot as snapmod
from policy_scheduler.whatif.snapshot import API_VERSION, from_dict

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())


def node(name, cpu="4"):
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"}}}


def snap(nodes):
    return from_dict({"apiVersion": API_VERSION, "kind": "ClusterSnapshot", "takenAt": "2025-01-01T12:00:00Z",
                      "nodes": list(nodes), "pods": [], "policies": [DEFAULT], "namespaces": {"team": {}}})

CA, _ = make_ca()
b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731


def kubeconfig(user: dict, server: str = "https://10.255.0.1:6443") -> str:
    return json.dumps({"current-context": "w", "clusters": [{"name": "w", "cluster": {
        "server": server, "certificate-authority-data": b64(CA)}}], "users": [{"name": "w", "user": user}],
        "contexts": [{"name": "w", "context": {"cluster": "w", "user": "w"}}]})


GOOD = kubeconfig({"token": "t0k3n"})
EXEC = kubeconfig({"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/sh",
                            "args": ["-c", "touch /tmp/policy-scheduler-pwned"]}})


def workload(name="job-a", rv="7", count=2, cpu="1"):
    return {"metadata": {"name": name, "namespace": "team", "resourceVersion": rv, "uid": f"u-{name}",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"priority": 0, "podSets": [{"name": "main", "count": count, "template": {
                "metadata": {"labels": {"policy-scheduler.io/policy": "default"}},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}}}]},
            "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}],
                       "admissionChecks": [{"name": "mk", "state": "Pending"}]}}


class Manager:
    """The manager cluster's API in memory: AdmissionCheck mk, Workloads, MultiKueueClusters and
    their Secrets; worker snapshots given by name."""

    def __init__(self, monkeypatch, workers: dict[str, str], wls: list[dict]) -> None:
        self.client = FakeClient()
        self.client.objects[f"{KQ}/admissionchecks"] = {"items": [
            {"metadata": {"name": "mk"}, "spec": {"controllerName": "kueue.x-k8s.io/multikueue"}}]}
        self.client.objects[f"{KQ}/workloads"] = {"items": wls}
        self.snapshots = {}
        self.takes: list[str] = []
        self.closed: list[str] = []
        self.set_workers(workers)

        async def take(client, **kw):
            name = client.creds.source.split()[-1]
            self.takes.append(name)
            return snap(self.snapshots.get(name, [node("n0", cpu="4")]))

        monkeypatch.setattr(snapmod, "take", take)

        async def remote(self_, method, path, *a, **k):  # the workers' own Workloads: none admitted
            return {"items": []}

        monkeypatch.setattr(workers_mod.WorkerClient, "request", remote)
        orig_close = workers_mod.WorkerClient.close

        async def close(client):
            self.closed.append(client.creds.source.split()[-1])
            await orig_close(client)

        monkeypatch.setattr(workers_mod.WorkerClient, "close", close)

    def set_workers(self, workers: dict[str, str]) -> None:
        self.client.objects[f"{KQ}/multikueueclusters"] = {"items": [
            {"metadata": {"name": n, "uid": f"uid-{n}"},
             "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": n}}},
             "status": {"conditions": [{"type": "Active", "status": "True"}]}} for n in workers]}
        for n, text in workers.items():
            self.client.objects[f"/api/v1/namespaces/kueue-system/secrets/{n}"] = {
                "data": {"kubeconfig": b64(text.encode())}}

    def events(self, kind: str | None = None) -> list[dict]:
        return [c.body for c in self.client.calls_of("post") if "/events" in c.path
                and (kind is None or c.body["regarding"]["kind"] == kind)]

    def nominations(self) -> list:
        return [c for c in self.client.calls_of("patch") if c.path.endswith("/status")]

    def records(self) -> list[dict]:
        return [json.loads(c.body["metadata"]["annotations"][SCORES_ANNOTATION])
                for c in self.client.calls_of("merge_patch")]


def chooser(m: Manager, **kw) -> Chooser:
    return Chooser(m.client, dispatcher="d", scheduler_name="policy-scheduler", default_policy="default",
                   refresh=kw.pop("refresh", 0.0), **kw)


def run(coro):
    return asyncio.run(coro)


def test_a_refused_kubeconfig_is_a_condition_an_event_and_a_word_in_the_record(monkeypatch):
    m = Manager(monkeypatch, {"good": GOOD, "bad": EXEC}, [workload()])
    ch = chooser(m)

    async def go():
        await ch.round()
        await ch.round()  # the same Secret again: no second Event
        cond = dict(ch.workers["bad"].condition)
        m.set_workers({"good": GOOD, "bad": kubeconfig({"token": "fixed"})})
        await ch.round()
        return cond

    cond = run(go())
    assert (cond["type"], cond["status"], cond["reason"]) == ("KubeconfigAccepted", "False", "ExecPlugin")
    assert cond["message"] == ("users[0].user.exec: exec credential plugins are refused (inline token or client "
                               "certificate only)")
    evs = m.events("MultiKueueCluster")
    assert [(e["type"], e["reason"], e["regarding"]["name"], e["regarding"]["uid"], e["metadata"]["namespace"])
            for e in evs] == [("Warning", "KubeconfigRefused", "bad", "uid-bad", "default"),
                              ("Normal", "KubeconfigAccepted", "bad", "uid-bad", "default")]
    assert evs[0]["note"].startswith("ExecPlugin: users[0].user.exec")
    # the Workload was nominated to good; its record says why bad was left out, in fixed words
    # (the in-memory Workload list never shows the nomination: each round nominates it again)
    assert {tuple(c.body["status"]["nominatedClusterNames"]) for c in m.nominations()} == {("good",)}
    assert m.records()[0]["clusters"]["bad"] == {"error": "KubeconfigRefused", "reason": "ExecPlugin"}
    assert ch.workers["bad"].condition["status"] == "True" and ch.workers["bad"].client is not None


@pytest.mark.parametrize("spec, reason, error", [
    ({"locationType": "Path", "location": "/dev/zero"}, "PathLocation", "KubeconfigRefused"),
    ({"locationType": "Secret", "location": "../../../kube-system/secrets/x"}, "InvalidSecretName",
     "KubeconfigRefused"),
    ({"locationType": "Secret", "location": "absent"}, "SecretNotFound", "NotRead"),
])
def test_a_location_that_is_not_a_secret_of_kueues_namespace_is_refused_without_reading(monkeypatch, spec, reason,
                                                                                         error):
    m = Manager(monkeypatch, {}, [workload()])
    m.client.objects[f"{KQ}/multikueueclusters"] = {"items": [
        {"metadata": {"name": "w", "uid": "u"}, "spec": {"clusterSource": {"kubeConfig": spec}},
         "status": {"conditions": [{"type": "Active", "status": "True"}]}}]}
    m.client.fail("get", 404, path_contains="/secrets/absent")
    ch = chooser(m)
    run(ch.round())
    assert ch.workers["w"].condition["reason"] == reason
    assert m.records()[0]["clusters"]["w"] == {"error": error, "reason": reason}
    gets = [c.path for c in m.client.calls_of("get") if "/secrets/" in c.path]
    assert gets == (["/api/v1/namespaces/kueue-system/secrets/absent"] if reason == "SecretNotFound" else [])


def test_a_waiting_workload_is_evaluated_again_only_when_it_or_a_worker_changed(monkeypatch):
    m = Manager(monkeypatch, {"small": GOOD}, [workload(count=9)])  # 9 CPUs: never fits 4
    ch = chooser(m, refresh=3600)
    calls = []
    orig = ch.choose

    async def counted(wl):
        calls.append(wl["metadata"]["resourceVersion"])
        return await orig(wl)

    ch.choose = counted

    async def go():
        for _ in range(5):
            await ch.round()
        m.client.objects[f"{KQ}/workloads"] = {"items": [workload(count=9, rv="8")]}
        await ch.round()
        await ch.round()
        ch.workers["small"].taken = -1e9  # the worker's snapshot is old: read again
        await ch.round()

    run(go())
    assert calls == ["7", "8", "8"]
    assert m.takes == ["small", "small"]
    assert m.nominations() == []


def test_a_nomination_carries_the_evaluated_resource_version(monkeypatch):
    m = Manager(monkeypatch, {"w1": GOOD}, [workload(rv="42")])
    run(chooser(m).round())
    (n,) = m.nominations()
    assert n.body == {"metadata": {"resourceVersion": "42"}, "status": {"nominatedClusterNames": ["w1"]}}
    assert n.path == f"{KQ}/namespaces/team/workloads/job-a/status"


def test_leadership_is_checked_right_before_the_write(monkeypatch):
    """Lost while the simulation ran: nothing written, not the nomination nor the record."""
    m = Manager(monkeypatch, {"w1": GOOD}, [workload()])
    ch = chooser(m)
    leading = [True]
    orig = mkmod._simulate

    def sim_and_lose(*a):
        out = orig(*a)
        leading[0] = False
        return out

    monkeypatch.setattr(mkmod, "_simulate", sim_and_lose)
    ch.leading = lambda: leading[0]
    assert run(ch.round()) == 0
    assert m.nominations() == [] and m.client.calls_of("merge_patch") == []


def test_the_simulation_runs_off_the_loop_within_its_budget(monkeypatch):
    """A simulation past its budget: the Workload is not nominated that round, the loop kept
    ticking meanwhile, and no second simulation is started while the first still runs."""
    m = Manager(monkeypatch, {"w1": GOOD}, [workload(), workload("job-b")])
    ch = chooser(m, sim_budget=0.2)
    started = []

    def slow(*a):
        started.append(time.monotonic())
        time.sleep(1.0)
        return []

    monkeypatch.setattr(mkmod, "_simulate", slow)

    async def go():
        ticks = []

        async def ticker():
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)

        t = asyncio.create_task(ticker())
        t0 = time.monotonic()
        await ch.round()  # job-a: times out after 0.2 s; job-b waits for the thread
        took = time.monotonic() - t0
        await ch.round()  # still busy: nothing started
        t.cancel()
        await asyncio.sleep(1.0)
        return took, max(b - a for a, b in zip(ticks, ticks[1:]))

    took, gap = run(go())
    assert took < 0.6 and gap < 0.15, (took, gap)
    assert len(started) == 1
    assert m.nominations() == []


def test_what_is_kept_per_workload_is_bounded_by_the_waiting_ones(monkeypatch):
    bad = [workload(f"bad-{i}", count="x") for i in range(50)]  # each one raises (count not a count)
    m = Manager(monkeypatch, {"w1": GOOD}, bad)
    ch = chooser(m)

    async def go():
        await ch.round()
        n = (len(ch._evaluated), len(ch._warned))
        m.client.objects[f"{KQ}/workloads"] = {"items": []}
        await ch.round()
        return n

    assert run(go()) == (50, 50)
    assert (len(ch._evaluated), len(ch._warned)) == (0, 0)


def test_a_removed_worker_is_closed_and_forgotten(monkeypatch):
    m = Manager(monkeypatch, {"w1": GOOD, "w2": GOOD}, [workload(count=99)])
    ch = chooser(m)

    async def go():
        await ch.round()
        m.set_workers({"w1": GOOD})
        await ch.round()
        await ch.close()

    run(go())
    assert "w2" not in ch.workers
    assert m.closed == ["w2", "w1"]


def test_a_worker_secret_changed_to_a_hostile_kubeconfig_closes_its_client(monkeypatch):
    m = Manager(monkeypatch, {"w1": GOOD}, [workload(count=99)])
    ch = chooser(m)

    async def go():
        await ch.round()
        assert ch.workers["w1"].client is not None
        m.set_workers({"w1": kubeconfig({"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"})})
        await ch.round()

    run(go())
    assert m.closed == ["w1"] and ch.workers["w1"].client is None
    assert ch.workers["w1"].condition["reason"] == "TokenFile"
    assert m.records()[-1]["clusters"]["w1"] == {"error": "KubeconfigRefused", "reason": "TokenFile"}


def test_a_workers_answer_is_capped_and_redirects_are_not_followed():
    async def big(request):
        return web.Response(body=b"[" + b"1," * 600_000 + b"1]", content_type="application/json")

    async def chunked(request):
        resp = web.StreamResponse()
        await resp.prepare(request)
        for _ in range(40):
            await resp.write(b" " * 65536)
        return resp

    async def deep(request):
        return web.Response(body=b"[" * 5000 + b"]" * 5000, content_type="application/json")

    async def redirect(request):
        raise web.HTTPFound("http://169.254.169.254/latest")

    async def small(request):
        return web.json_response({"items": [1, 2]})

    async def go():
        app = web.Application()
        for path, h in (("/big", big), ("/chunked", chunked), ("/deep", deep), ("/redirect", redirect),
                        ("/small", small)):
            app.router.add_get(path, h)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        c = workers_mod.WorkerClient(Credentials(server=f"http://127.0.0.1:{port}", ssl_context=True, token="t"),
                                     max_bytes=1_000_000)
        out = {}
        try:
            for p in ("/big", "/chunked", "/deep", "/redirect", "/small"):
                try:
                    out[p] = await c.get(p)
                except (workers_mod.ResponseRefused, ApiError) as e:
                    out[p] = type(e).__name__ + (f" {e.status}" if isinstance(e, ApiError) else "")
        finally:
            await c.close()
            await runner.cleanup()
        return out

    assert run(go()) == {"/big": "ResponseRefused", "/chunked": "ResponseRefused", "/deep": "ResponseRefused",
                         "/redirect": "ApiError 302", "/small": {"items": [1, 2]}}
