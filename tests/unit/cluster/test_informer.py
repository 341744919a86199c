"""informer.Backoff: client-go's reflector backoff (exponential with jitter, reset when quiet)."""

from __future__ import annotations

import random

from policy_scheduler.cluster.informer import Backoff


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_delays_double_up_to_the_cap_and_reset_after_a_quiet_spell():
    clock = Clock()
    b = Backoff(initial=0.8, cap=30, factor=2, jitter=0, reset=120, clock=clock)
    delays = []
    for _ in range(8):
        delays.append(b.next())
        clock.t += delays[-1]
    assert delays == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30, 30]
    clock.t += 121  # two quiet minutes: back to the start
    assert b.next() == 0.8


def test_jitter_spreads_replicas_that_fail_together():
    firsts = {round(Backoff(rng=random.Random(seed)).next(), 3) for seed in range(20)}
    assert len(firsts) == 20 and all(0.8 <= d < 1.6 for d in firsts)


def test_an_optional_kind_that_is_not_served_counts_as_empty_and_is_listed_once_served():
    """scheduler-plugins' PodGroup CRD may be missing: a 404 on LIST syncs the informer empty (the
    operator starts), and the LIST is tried again until the kind is served."""
    import asyncio

    from policy_scheduler.cluster.informer import Informer
    from policy_scheduler.cluster.kubeclient import ApiError

    class Client:
        def __init__(self):
            self.lists = 0

        async def request(self, method, path, body=None, **kw):
            self.lists += 1
            if self.lists <= 2:
                raise ApiError(404, {"kind": "Status", "code": 404, "message": "not found"}, method, path)
            return {"items": [{"metadata": {"name": "g", "namespace": "ns"}}], "metadata": {"resourceVersion": "7"}}

    seen = []

    async def go():
        inf = Informer(Client(), "/apis/scheduling.x-k8s.io/v1alpha1/podgroups", lambda k, o: seen.append(k),
                       "podgroups", optional=True, absent_retry=0.01)

        async def no_watch():
            await asyncio.sleep(3600)

        inf.watch = no_watch
        task = asyncio.get_running_loop().create_task(inf.run())
        await asyncio.wait_for(inf.synced.wait(), 1)
        assert inf.absent and seen == [] and inf.last_error is None
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)
        assert seen == ["ADDED"] and not inf.absent and inf.known == {"ns/g"}
        task.cancel()

        strict = Informer(Client(), "/x", lambda k, o: None, "strict", backoff=Backoff(initial=0.01, jitter=0))
        t2 = asyncio.get_running_loop().create_task(strict.run())
        await asyncio.sleep(0.005)
        assert not strict.synced.is_set() and "404" in (strict.last_error or "")  # a required kind keeps waiting
        t2.cancel()

    asyncio.run(go())


def test_an_object_no_parser_reads_neither_stops_the_informer_nor_hides_the_others():
    """A LIST page and a WATCH line holding an object nested 1,100 levels deep (past orjson's
    1,024; the API server stores up to 10,000): every object is delivered, the deep one with its
    deepest part replaced by safejson's marker, and the watch goes on."""
    import asyncio

    from aiohttp import web

    from policy_scheduler.cluster.informer import Informer
    from policy_scheduler.cluster.credentials import Credentials
    from policy_scheduler.cluster.kubeclient import KubeClient
    from policy_scheduler.safejson import Unreadable

    def obj(name, rv, levels=0):
        spec = b'{"a":' * levels + b"1" + b"}" * levels
        return (b'{"metadata":{"name":"' + name.encode() + b'","resourceVersion":"' + rv.encode()
                + b'"},"spec":{"args":' + spec + b"}}")

    async def list_(request):
        body = (b'{"kind":"List","metadata":{"resourceVersion":"10"},"items":['
                + b",".join([obj("a", "1"), obj("deep", "2", 1_100), obj("b", "3")]) + b"]}")
        return web.Response(body=body, content_type="application/json")

    async def watch(request):
        resp = web.StreamResponse()
        await resp.prepare(request)
        for line in (b'{"type":"ADDED","object":' + obj("deeper", "11", 10_000) + b"}",
                     b'{"type":"MODIFIED","object":' + obj("a", "12") + b"}"):
            await resp.write(line + b"\n")
        await done.wait()  # the watch stays open until the test ends
        return resp

    async def route(request):
        return await (watch(request) if request.query.get("watch") else list_(request))

    seen = []
    done: asyncio.Event

    async def go():
        nonlocal done
        done = asyncio.Event()
        app = web.Application()
        app.router.add_get("/apis/x/v1/things", route)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        client = KubeClient(Credentials(server=f"http://127.0.0.1:{port}", ssl_context=False))
        inf = Informer(client, "/apis/x/v1/things", lambda k, o: seen.append((k, o)), "things")
        task = asyncio.get_running_loop().create_task(inf.run())
        try:
            await asyncio.wait_for(inf.synced.wait(), 5)
            for _ in range(500):
                if len(seen) == 5:
                    break
                await asyncio.sleep(0.01)
            assert inf.last_error is None and not task.done()
            assert inf.resource_version == "12" and inf.known == {"a", "b", "deep", "deeper"}
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()
            done.set()
            await runner.cleanup()

    asyncio.run(go())
    assert [(k, o["metadata"]["name"]) for k, o in seen] == [
        ("ADDED", "a"), ("ADDED", "deep"), ("ADDED", "b"), ("ADDED", "deeper"), ("MODIFIED", "a")]
    for _, o in seen[1:2] + seen[3:4]:
        v, levels = o["spec"]["args"], 0
        while isinstance(v, dict):
            v, levels = v["a"], levels + 1
        assert isinstance(v, Unreadable) and levels > 64


def test_a_paged_list_asks_for_the_next_page_while_handing_over_this_one():
    """The API server encodes page k+1 while the handler parses page k; every object arrives once,
    in order; objects gone since the last LIST are delivered as DELETED."""
    import asyncio

    from policy_scheduler.cluster.informer import LIST_YIELD, Informer

    log: list[str] = []
    per_page = 2 * LIST_YIELD + 5

    class Client:
        async def request(self, method, path, body=None, params=None, **kw):
            page = int((params or {}).get("continue") or 0)
            log.append(f"GET {page}")
            await asyncio.sleep(0)
            items = [{"metadata": {"name": f"p{page}-{i}", "namespace": "ns"}} for i in range(per_page)]
            meta = {"continue": str(page + 1)} if page < 2 else {"resourceVersion": "42"}
            return {"items": items, "metadata": meta}

    def handler(kind, obj):
        log.append(f"{kind} {obj['metadata']['name']}")

    async def go():
        inf = Informer(Client(), "/api/v1/pods", handler, "pods", page=per_page)
        inf.known = {"ns/gone"}
        await inf.list()
        return inf

    inf = asyncio.run(go())
    adds = [x.split()[1] for x in log if x.startswith("ADDED")]
    assert adds == [f"p{p}-{i}" for p in range(3) for i in range(per_page)]
    # page 1 was asked for before page 0's first object was handed over, page 2 before page 1's
    # (the request task runs at the first yield: in a real client it goes out within its first steps)
    assert log.index("GET 1") < log.index("ADDED p0-0") and log.index("GET 2") < log.index("ADDED p1-0")
    assert log[-1] == "DELETED gone" and inf.resource_version == "42" and len(inf.known) == 3 * per_page


def test_a_list_that_fails_midway_cancels_the_page_asked_for_ahead():
    import asyncio

    import pytest

    from policy_scheduler.cluster.informer import Informer

    started, cancelled = asyncio.Event(), []

    class Client:
        async def request(self, method, path, body=None, params=None, **kw):
            if (params or {}).get("continue"):
                started.set()
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    cancelled.append(True)
                    raise
            return {"items": [{"metadata": {"name": "a"}}, "not an object", {"metadata": {"name": "b"}}],
                    "metadata": {"continue": "x"}}

    def handler(kind, obj):
        if obj["metadata"]["name"] == "b":
            raise KeyboardInterrupt  # not an Exception: it goes through _deliver's guard

    async def go():
        inf = Informer(Client(), "/api/v1/nodes", handler, "nodes")
        with pytest.raises(KeyboardInterrupt):
            await inf.list()
        await asyncio.sleep(0)

    asyncio.run(go())
    assert cancelled == [True] or not started.is_set()
