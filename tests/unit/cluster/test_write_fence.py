"""The leadership fence at the moment a write is sent (kubeclient.KubeClient.request ``fence``),
against a real local HTTP server that counts what reaches it: a request that waits in the token
bucket past the lease's deadline is not sent; a fenced request's timeout is the time left; the
fence is asked again when the body is written; a Binding or a victim's DELETE past the deadline
is dropped (the pod requeued, the victim left alone), and a DELETE that got no answer is read
back instead of being taken as failed."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import web

from policy_scheduler.cluster.apicalls import DELETED, ApiCalls
from policy_scheduler.cluster.credentials import Credentials
from policy_scheduler.cluster.kubeclient import Fenced, KubeClient
from policy_scheduler.cluster.leader import Leadership
from policy_scheduler.cluster.telemetry import Telemetry
from policy_scheduler.framework.interface import PodGone
from policy_scheduler.framework.model.podinfo import PodInfo


class Server:
    """An HTTP server on 127.0.0.1 that records each request it received in full; ``delay``
    seconds before it answers; GET of a pod answers ``pod``."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.received: list[tuple[str, str, float]] = []  # method, path, when (monotonic)
        self.pod: dict | None = None

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.received.append((request.method, request.path, time.monotonic()))
        if request.method == "GET":
            if self.pod is None:
                return web.json_response({"kind": "Status", "code": 404, "message": "not found"}, status=404)
            return web.json_response(self.pod)
        await asyncio.sleep(self.delay)
        return web.json_response({"kind": "Status", "status": "Success"}, status=201)

    async def __aenter__(self) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *exc) -> None:
        await self.runner.cleanup()


def deadline_in(seconds: float):
    at = time.monotonic() + seconds
    return lambda: at - time.monotonic()


def test_a_request_that_waits_in_the_token_bucket_past_the_deadline_is_not_sent():
    async def go():
        server = Server()
        async with server as url:
            client = KubeClient(Credentials(server=url, ssl_context=True), qps=2, burst=1)
            told: list[str] = []
            client.on_fenced = told.append
            fence = deadline_in(0.25)
            await client.request("POST", "/api/v1/namespaces/ns/pods/a/binding", {"n": 1}, fence=fence)
            t0 = time.monotonic()
            with pytest.raises(Fenced):  # the bucket holds it 0.5 s: the deadline passes meanwhile
                await client.request("POST", "/api/v1/namespaces/ns/pods/b/binding", {"n": 2}, fence=fence)
            waited = time.monotonic() - t0
            await asyncio.sleep(0.2)
            assert [p for _, p, _ in server.received] == ["/api/v1/namespaces/ns/pods/a/binding"]
            assert waited >= 0.4, waited  # it was refused after the bucket, not before it
            assert told == ["POST"] and client.fenced == 1
            # no fence, or one with time left: sent as before
            await client.request("POST", "/x", {"n": 3})
            await client.request("POST", "/y", {"n": 4}, fence=lambda: None)
            assert len(server.received) == 3
            await client.close()
    asyncio.run(go())


def test_the_time_left_is_the_request_timeout():
    async def go():
        server = Server(delay=1.0)
        async with server as url:
            client = KubeClient(Credentials(server=url, ssl_context=True), qps=0, burst=1)
            t0 = time.monotonic()
            with pytest.raises(asyncio.TimeoutError):
                await client.request("POST", "/slow", {"n": 1}, fence=deadline_in(0.3))
            assert time.monotonic() - t0 < 1.5
            await client.close()
    asyncio.run(go())


def test_the_fence_is_asked_again_when_the_body_is_written():
    """A deadline that passes between the first check and the socket write (a stall of the
    loop while the connection is made): nothing reaches the server."""
    async def go():
        server = Server()
        async with server as url:
            client = KubeClient(Credentials(server=url, ssl_context=True), qps=0, burst=1)
            answers = iter([5.0, 0.0])  # time left at the first check; none at the body's write
            with pytest.raises(Fenced):
                await client.request("DELETE", "/api/v1/namespaces/ns/pods/v", {"kind": "DeleteOptions"},
                                     fence=lambda: next(answers))
            await asyncio.sleep(0.2)
            assert server.received == [] and client.fenced == 1
            await client.close()
    asyncio.run(go())


class Lease(Leadership):
    """A lease whose deadline is ``at`` on the monotonic clock."""

    def __init__(self, at: float) -> None:
        super().__init__()
        self.at = at

    def valid(self) -> bool:
        return time.monotonic() < self.at

    def time_left(self) -> float | None:
        return max(self.at - time.monotonic(), 0.0)


def _pod(name: str) -> PodInfo:
    return PodInfo.from_dict({"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}})


def test_a_binding_and_a_victims_delete_queued_past_the_deadline_are_dropped():
    async def go():
        server = Server()
        async with server as url:
            client = KubeClient(Credentials(server=url, ssl_context=True), qps=2, burst=1)
            tel = Telemetry()
            tel.attach({}, lambda: {}, lambda: None, lambda: True, client)
            api = ApiCalls(client, Lease(time.monotonic() + 0.3), tel, lambda: "v1")
            first = await api.bind(_pod("a"), "n1", {})
            assert first.is_success
            # both wait in the bucket (0.5 s, 1 s) past the lease's deadline (0.3 s)
            bound, deleted = await asyncio.gather(api.bind(_pod("b"), "n1", {}), api.delete_pod(_pod("v")))
            assert not bound.is_success and "renew deadline" in bound.message()
            assert deleted is None  # not deleted: the preemption counts as failed, its pod is tried again
            await asyncio.sleep(0.2)
            assert [(m, p) for m, p, _ in server.received] == [("POST", "/api/v1/namespaces/ns/pods/a/binding")]
            fenced = {s.labels["verb"]: s.value for m in tel.registry.collect() if m.name == "policy_scheduler_fenced_writes"
                      for s in m.samples if s.name.endswith("_total")}
            assert fenced == {"POST": 1.0, "DELETE": 1.0}
            await client.close()
    asyncio.run(go())


def test_a_delete_that_got_no_answer_is_read_back_not_failed():
    async def go():
        server = Server(delay=1.0)
        async with server as url:
            client = KubeClient(Credentials(server=url, ssl_context=True), qps=0, burst=1)
            api = ApiCalls(client, Lease(time.monotonic() + 0.5), Telemetry(), lambda: "v1")
            victim = _pod("v")
            assert await api.delete_pod(victim) == "unknown"  # timed out at the lease's deadline
            server.pod = {"metadata": {"name": "v", "namespace": "ns", "uid": "uid-v",
                                       "deletionTimestamp": "2026-01-01T00:00:00Z"}}
            assert await api.victim_state(victim) == DELETED  # it was carried out after all
            server.pod["metadata"].pop("deletionTimestamp")
            assert await api.victim_state(victim) is None  # still there: failed
            server.pod = None
            assert await api.victim_state(victim) == "gone"
            await client.close()
    asyncio.run(go())


def test_a_binding_that_got_no_answer_is_read_back_before_the_pod_is_unreserved():
    async def go():
        server = Server(delay=1.0)
        async with server as url:
            client = KubeClient(Credentials(server=url, ssl_context=True), qps=0, burst=1)
            tel = Telemetry()
            pod = _pod("a")
            server.pod = {"metadata": {"name": "a", "namespace": "ns", "uid": "uid-a"}, "spec": {"nodeName": "n1"}}
            api = ApiCalls(client, Lease(time.monotonic() + 0.3), tel, lambda: "v1")
            assert (await api.bind(pod, "n1", {})).is_success  # timed out, but bound there after all
            server.pod["spec"] = {}
            api = ApiCalls(client, Lease(time.monotonic() + 0.3), tel, lambda: "v1")
            status = await api.bind(pod, "n1", {})
            assert not status.is_success and "TimeoutError" in status.message()  # not bound: requeued
            server.pod["spec"] = {"nodeName": "n2"}
            api = ApiCalls(client, Lease(time.monotonic() + 0.3), tel, lambda: "v1")
            with pytest.raises(PodGone):  # bound elsewhere meanwhile: nothing to do
                await api.bind(pod, "n1", {})
            await client.close()
    asyncio.run(go())
