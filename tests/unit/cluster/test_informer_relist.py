"""No silent drift (informer.py): a watch handler that raises makes the informer relist, with a
backoff of its own while the watch goes on; the relist's known-set diff repairs the cache (a
deletion the handler failed on is reported again); an object the handler fails on again in that
relist is quarantined (no relist loop) until it changes or is deleted, and ``problem`` says so.
Against an in-memory API (LIST pages and a fed watch)."""

from __future__ import annotations

import asyncio
import logging
import time

from policy_scheduler.cluster.informer import RELIST_FAILING_AFTER, Backoff, Informer
from policy_scheduler.cluster.kubeclient import ApiError

BAD = "policy-scheduler.io/bad"


def obj(name: str, rv: str, bad: bool = False) -> dict:
    meta = {"name": name, "namespace": "ns", "resourceVersion": rv}
    if bad:
        meta["annotations"] = {BAD: "x"}
    return {"metadata": meta}


class Api:
    """What the informer LISTs (``objects``) and a queue of watch events it is fed."""

    def __init__(self, *objects: dict) -> None:
        self.objects = {o["metadata"]["name"]: o for o in objects}
        self.lists: list[float] = []
        self.fail_lists = 0
        self.events: asyncio.Queue = asyncio.Queue()

    async def request(self, method, path, params=None, decode=None, **kw):
        self.lists.append(time.monotonic())
        if self.fail_lists:
            self.fail_lists -= 1
            raise ApiError(403, {"message": "forbidden"}, "GET", path)
        return {"items": list(self.objects.values()), "metadata": {"resourceVersion": "1"}}


class Cache:
    """A handler keeping what it was told; it raises on an object annotated BAD."""

    def __init__(self) -> None:
        self.held: dict[str, dict] = {}
        self.raised = 0

    def __call__(self, kind: str, o: dict) -> None:
        meta = o["metadata"]
        if BAD in (meta.get("annotations") or {}):
            self.raised += 1
            raise RuntimeError("cannot handle " + "x" * 5000)  # a long message: the log bounds it
        key = f"{meta['namespace']}/{meta['name']}"
        if kind == "DELETED":
            self.held.pop(key, None)
        else:
            self.held[key] = o


def informer(api: Api, cache: Cache, counts: dict) -> Informer:
    inf = Informer(api, "/api/v1/pods", cache, "pods", backoff=Backoff(initial=0.01, jitter=0),
                   relist_backoff=Backoff(initial=0.05, cap=0.4, jitter=0, reset=60),
                   on_handler_error=lambda kind: counts.__setitem__("errors", counts.get("errors", 0) + 1),
                   on_relist=lambda why: counts.__setitem__(why, counts.get(why, 0) + 1),
                   on_quarantine=lambda n: counts.__setitem__("quarantined", n))

    async def watch():  # the events fed, until the test ends
        while True:
            kind, o = await api.events.get()
            inf._event({"type": kind, "object": o})

    inf.watch = watch
    return inf


async def until(cond, timeout: float = 3.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        await asyncio.sleep(0.005)


def test_a_deletion_the_handler_failed_on_is_repaired_by_the_relist_no_ghost_kept(caplog):
    async def go():
        api, cache, counts = Api(obj("a", "1"), obj("ghost", "2")), Cache(), {}
        inf = informer(api, cache, counts)
        task = asyncio.get_running_loop().create_task(inf.run())
        await asyncio.wait_for(inf.synced.wait(), 1)
        assert set(cache.held) == {"ns/a", "ns/ghost"} and len(api.lists) == 1
        # the pod is deleted; the handler raises on its DELETED event (the cache keeps a ghost)
        del api.objects["ghost"]
        api.events.put_nowait(("DELETED", obj("ghost", "3", bad=True)))
        await until(lambda: counts.get("errors") == 1)
        assert "ns/ghost" in cache.held and inf.relist_due is not None
        # the watch goes on meanwhile: a new pod is seen before the relist
        api.objects["b"] = obj("b", "4")
        api.events.put_nowait(("ADDED", api.objects["b"]))
        await until(lambda: "ns/b" in cache.held)
        assert len(api.lists) == 1
        # the relist (after its backoff) reports the deletion again, as the known-set diff
        await until(lambda: len(api.lists) == 2)
        await until(lambda: "ns/ghost" not in cache.held)
        assert set(cache.held) == {"ns/a", "ns/b"} and counts.get("handler_error") == 1
        assert inf.problem is None and not inf.quarantined
        task.cancel()

    with caplog.at_level(logging.INFO, "policy_scheduler.informer"):
        asyncio.run(go())
    (failed,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    text = failed.getMessage()
    assert "pods informer: handler failed on DELETED ns/ghost (resourceVersion 3)" in text
    assert "relisting in 0.1s" in text or "relisting in 0.0s" in text
    assert len(text) < 4000 and "more characters" in text  # the exception text bounded, the traceback kept
    assert "Traceback" not in text and "in __call__" in text


def test_an_object_the_handler_always_fails_on_is_quarantined_not_relisted_in_a_loop():
    async def go():
        api, cache, counts = Api(obj("a", "1"), obj("bad", "2", bad=True)), Cache(), {}
        inf = informer(api, cache, counts)
        task = asyncio.get_running_loop().create_task(inf.run())
        await asyncio.wait_for(inf.synced.wait(), 1)
        assert counts["errors"] == 1 and inf.problem is None  # failed once: a relist is due
        await until(lambda: len(api.lists) == 2)
        await until(lambda: inf.quarantined)  # failed again in the relist meant to repair it
        assert counts["errors"] == 2 and counts["quarantined"] == 1
        assert inf.problem.startswith("the handler raised again on ns/bad in the relist meant to repair it: "
                                      "RuntimeError: cannot handle")
        await asyncio.sleep(0.5)  # no relist loop for it
        assert len(api.lists) == 2 and counts.get("handler_error") == 1

        # it keeps changing, and the handler keeps failing on it: relists spaced by the backoff
        t0 = time.monotonic()
        for i in range(200):
            api.objects["bad"] = obj("bad", str(10 + i), bad=True)
            api.events.put_nowait(("MODIFIED", api.objects["bad"]))
            await asyncio.sleep(0.005)
        took = time.monotonic() - t0
        relists = len(api.lists) - 2
        # 0.1, 0.2, 0.4, 0.4... (the backoff goes on from the first failure): at most one per 0.1 s
        assert 1 <= relists <= took / 0.1 + 1, (relists, took)
        print(f"\n  {counts['errors']} handler errors, {relists} relists in {took:.2f}s")
        assert counts["errors"] >= 200

        # fixed (the object changed into one the handler takes): no longer quarantined
        api.objects["bad"] = obj("bad", "999")
        api.events.put_nowait(("MODIFIED", api.objects["bad"]))
        await until(lambda: not inf.quarantined and inf.relist_due is None)
        await until(lambda: inf.problem is None and cache.held.get("ns/bad", {}).get("metadata", {}).get(
            "resourceVersion") == "999")
        assert counts["quarantined"] == 0
        task.cancel()

    asyncio.run(go())


def test_a_quarantined_object_deleted_is_released():
    async def go():
        api, cache, counts = Api(obj("bad", "2", bad=True)), Cache(), {}
        inf = informer(api, cache, counts)
        task = asyncio.get_running_loop().create_task(inf.run())
        await until(lambda: inf.quarantined)
        del api.objects["bad"]
        api.events.put_nowait(("DELETED", {"metadata": {"name": "bad", "namespace": "ns", "resourceVersion": "5"}}))
        await until(lambda: not inf.quarantined)
        assert inf.problem is None and "ns/bad" not in inf.known
        task.cancel()

    asyncio.run(go())


def test_a_list_that_keeps_failing_after_the_sync_is_a_problem():
    async def go():
        api, cache, counts = Api(obj("a", "1")), Cache(), {}
        inf = informer(api, cache, counts)
        task = asyncio.get_running_loop().create_task(inf.run())
        await asyncio.wait_for(inf.synced.wait(), 1)
        api.fail_lists = RELIST_FAILING_AFTER + 1
        api.events.put_nowait(("ERROR", {"code": 410}))  # too old: relist, which fails
        await until(lambda: inf.problem is not None)
        assert inf.problem.startswith(f"relisting: {RELIST_FAILING_AFTER} LISTs failed in a row; list failed: ")
        assert "403" in inf.problem and counts["gone"] == 1 and counts["error"] >= RELIST_FAILING_AFTER
        await until(lambda: inf.problem is None and api.fail_lists == 0)  # it works again
        task.cancel()

    asyncio.run(go())
