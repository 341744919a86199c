"""health.py: the probes' checks and k8s.io/apiserver's healthz body format (``?verbose``,
``?exclude``, per-check paths), the JSON details kept for the plain probe, and the status codes."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.error
import urllib.request

from support.fakeclient import FakeClient
from support.standby import Standby

from policy_scheduler.serve import build_engine
from policy_scheduler.health import HealthServer, probe_checks, verbose_body

BASE = dict(crashed=None, leading=False, scheduling=False, listed=True, synced=True, waiting={}, lost=False,
            stopping=False)


def failing(checks) -> dict[str, set[str]]:
    return {ep: {n for n, err in cs if err is not None} for ep, cs in checks.items()}


def test_check_names_and_order_are_upstreams_where_upstream_has_them():
    c = probe_checks(**BASE)
    assert [n for n, _ in c["livez"]] == ["ping", "scheduling-loop"]
    assert [n for n, _ in c["healthz"]] == ["ping", "leaderElection", "scheduling-loop"]
    assert [n for n, _ in c["readyz"]] == ["ping", "leaderElection", "shutdown", "informer-sync", "policies-loaded",
                                          "scheduling-loop"]
    assert failing(c) == {"livez": set(), "healthz": set(), "readyz": set()}  # a warm standby


def test_what_each_state_fails():
    assert failing(probe_checks(**{**BASE, "listed": False, "synced": False, "waiting": {"services": "HTTP 403"}})) \
        == {"livez": set(), "healthz": set(), "readyz": {"informer-sync", "policies-loaded"}}
    c = probe_checks(**{**BASE, "listed": False, "synced": False, "waiting": {"services": "list failed: HTTP 403"}})
    assert dict(c["readyz"])["informer-sync"] == "waiting for services: list failed: HTTP 403"
    assert failing(probe_checks(**{**BASE, "listed": True, "synced": False}))["readyz"] == {"policies-loaded"}
    assert failing(probe_checks(**{**BASE, "leading": True}))["readyz"] == {"scheduling-loop"}
    assert failing(probe_checks(**{**BASE, "leading": True, "scheduling": True}))["readyz"] == set()
    died = failing(probe_checks(**{**BASE, "crashed": RuntimeError("boom")}))
    assert died == {"livez": {"scheduling-loop"}, "healthz": {"scheduling-loop"}, "readyz": {"scheduling-loop"}}
    assert failing(probe_checks(**{**BASE, "lost": True})) == {"livez": set(), "healthz": {"leaderElection"},
                                                               "readyz": {"leaderElection"}}
    assert failing(probe_checks(**{**BASE, "stopping": True}))["readyz"] == {"shutdown"}


def test_verbose_body_is_the_apiservers():
    ok, text = verbose_body("readyz", [("ping", None), ("informer-sync", "waiting for pods: listing")], [])
    assert (ok, text) == (False, "[+]ping ok\n[-]informer-sync failed: reason withheld\nreadyz check failed\n")
    ok, text = verbose_body("livez", [("ping", None), ("scheduling-loop", None)], [])
    assert (ok, text) == (True, "[+]ping ok\n[+]scheduling-loop ok\nlivez check passed\n")
    ok, text = verbose_body("readyz", [("ping", None), ("informer-sync", "x")], ["informer-sync", "nope"])
    assert (ok, text) == (True, '[+]ping ok\n[+]informer-sync excluded: ok\nwarn: some health checks cannot be '
                                'excluded: no matches for "nope"\nreadyz check passed\n')




def get(port: int, path: str, accept: str | None = None) -> tuple[int, str, str]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_and_get(health, paths: list[str]) -> list[tuple[int, str, str]]:
    async def go():
        port = free_port()
        server = HealthServer(health, "127.0.0.1", port)
        await server.start()
        try:
            return [await asyncio.to_thread(get, port, p) for p in paths]
        finally:
            await server.stop()

    return asyncio.run(go())


def test_the_engine_over_http():
    lead = Standby()
    e = build_engine(FakeClient(), leadership=lead)
    out = serve_and_get(e.health, ["/readyz?verbose", "/readyz", "/livez?verbose", "/healthz?verbose",
                                   "/readyz/informer-sync", "/readyz/ping", "/readyz/nope",
                                   "/readyz?verbose&exclude=informer-sync&exclude=policies-loaded"])
    (code, ctype, body), (jcode, jtype, jbody), live, health, one, ping, nope, excluded = out
    assert code == 503 and ctype.startswith("text/plain")
    assert body == ("[+]ping ok\n[+]leaderElection ok\n[+]shutdown ok\n[-]informer-sync failed: reason withheld\n"
                    "[-]policies-loaded failed: reason withheld\n[+]scheduling-loop ok\nreadyz check failed\n")
    assert jcode == 503 and jtype.startswith("application/json")
    details = json.loads(jbody)
    assert details["ready"] is False and details["synced"] is False and "checks" not in details
    assert live == (200, live[1], "[+]ping ok\n[+]scheduling-loop ok\nlivez check passed\n")
    assert health[0] == 200 and health[2].endswith("healthz check passed\n")
    assert one == (500, one[1], "internal server error: the informers have not started\n")
    assert ping[0] == 200 and ping[2] == "ok"
    assert nope[0] == 404
    assert excluded[0] == 200 and "[+]informer-sync excluded: ok\n" in excluded[2]

    e.synced = True
    lead.holding = True  # the leader: ready once its loop runs
    (code, _, body), = serve_and_get(e.health, ["/readyz?verbose"])
    assert code == 503 and "[-]scheduling-loop failed: reason withheld\n" in body
    e.scheduling = True
    (code, _, body), (jcode, _, jbody) = serve_and_get(e.health, ["/readyz?verbose", "/readyz"])
    assert (code, jcode) == (200, 200) and body.endswith("[+]scheduling-loop ok\nreadyz check passed\n")
    assert json.loads(jbody)["ready"] is True
    e.crashed = RuntimeError("boom")
    (code, _, body), (jcode, _, jbody), (one, _, why) = serve_and_get(
        e.health, ["/livez?verbose", "/healthz", "/livez/scheduling-loop"])
    assert code == 500 and body.endswith("[-]scheduling-loop failed: reason withheld\nlivez check failed\n")
    assert jcode == 500 and "boom" in json.loads(jbody)["error"]
    assert one == 500 and why == "internal server error: the scheduling loop died: RuntimeError: boom\n"


def test_webhooks_are_a_readiness_check():
    def health():
        return True, False, {"live": True, "ready": False, "webhooks": {"serving": False, "error": "no cert"},
                             "checks": {"readyz": [("ping", None)]}}

    (code, _, body), (one, _, why) = serve_and_get(health, ["/readyz?verbose", "/readyz/webhooks"])
    assert code == 503 and body == "[+]ping ok\n[-]webhooks failed: reason withheld\nreadyz check failed\n"
    assert (one, why) == (500, "internal server error: no cert\n")


def test_a_quarantined_object_fails_its_informers_check_and_revisions_off_is_a_warning():
    """Build 6 and 7 of the tenancy issue: an informer whose relist could not repair an object fails
    ``informer/<name>`` (named in the verbose body, the reason on its own path); revisions that
    cannot be written pass with a warning that names the namespace (readiness is not lost for a
    loss of history)."""
    from policy_scheduler.cache.policies import RevisionsProblem
    from policy_scheduler.cluster.informer import Informer

    e = build_engine(FakeClient(), revision_namespace="ops", leadership=Standby())
    e.synced = True
    pods, nodes = (Informer(e.client, "/x", lambda k, o: None, n) for n in ("pods", "nodes"))
    e.informers.informers = [pods, nodes]
    for inf in (pods, nodes):
        inf.synced.set()
    pods.quarantined["team-a/hostile"] = "RuntimeError: cannot handle"
    e.revisions.problem = RevisionsProblem("NamespaceNotFound", "namespace 'ops' does not exist")
    (code, _, body), (one, _, why), (rcode, _, warned), (jcode, _, jbody) = serve_and_get(
        e.health, ["/readyz?verbose", "/readyz/informer/pods", "/readyz/revisions", "/readyz"])
    assert code == 503 and body == (
        "[+]ping ok\n[+]leaderElection ok\n[+]shutdown ok\n[+]informer-sync ok\n[-]informer/pods failed: reason "
        "withheld\n[+]informer/nodes ok\n[+]policies-loaded ok\n[+]revisions warning: NamespaceNotFound: namespace "
        "'ops' does not exist\n[+]scheduling-loop ok\nreadyz check failed\n")
    assert one == 500 and why.startswith("internal server error: the handler raised again on team-a/hostile in the "
                                         "relist meant to repair it: RuntimeError: cannot handle; kept as the cache")
    assert (rcode, warned) == (200, "warning: NamespaceNotFound: namespace 'ops' does not exist\n")
    details = json.loads(jbody)
    assert jcode == 503 and details["informers"] == {"pods": pods.problem} and "warnings" not in details
    assert details["revisions"] == {"namespace": "ops", "recording": False, "reason": "NamespaceNotFound",
                                    "message": "namespace 'ops' does not exist"}

    pods.quarantined.clear()  # changed or deleted, and handled
    e.revisions.problem = None
    (code, _, body), = serve_and_get(e.health, ["/readyz?verbose"])
    assert code == 200 and "[+]informer/pods ok\n" in body and "[+]revisions ok\n" in body
