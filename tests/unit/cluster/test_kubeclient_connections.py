"""KubeClient.open_connections, against a real local HTTP server that records the client port
of every request: it opens one connection per request asked for, and the writes that follow
go over those connections instead of opening new ones (the scheduler's first Bindings)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from policy_scheduler.cluster.credentials import Credentials
from policy_scheduler.cluster.kubeclient import KubeClient


async def _serve(ports: list[tuple[str, int]], delay: float) -> tuple[web.AppRunner, str]:
    async def handle(request: web.Request) -> web.Response:
        await request.read()
        ports.append((request.method, request.transport.get_extra_info("peername")[1]))
        await asyncio.sleep(delay)  # every request of a burst is in flight at once
        return web.json_response({"kind": "Status", "code": 201} if request.method == "POST" else {"major": "1"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


def test_open_connections_opens_one_per_request_and_the_writes_reuse_them() -> None:
    async def main() -> tuple[int, set[int], set[int]]:
        ports: list[tuple[str, int]] = []
        runner, url = await _serve(ports, 0.05)
        client = KubeClient(Credentials(server=url, ssl_context=True), qps=0, burst=1)
        try:
            opened = await client.open_connections(8)
            await asyncio.gather(*(client.bind("ns", f"p{i}", "node-1") for i in range(8)))
        finally:
            await client.close()
            await runner.cleanup()
        return (opened, {p for m, p in ports if m == "GET"}, {p for m, p in ports if m == "POST"})

    opened, warm, binds = asyncio.run(main())
    assert opened == 8
    assert len(warm) == 8  # one connection per request in flight
    assert binds <= warm  # the Bindings found them open: no new connection


def test_open_connections_counts_failures_and_raises_nothing() -> None:
    async def main() -> int:
        client = KubeClient(Credentials(server="http://127.0.0.1:9", ssl_context=True), qps=0, burst=1)
        try:
            return await client.open_connections(3)
        finally:
            await client.close()

    assert asyncio.run(main()) == 0
