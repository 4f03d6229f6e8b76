"""Per-tenant execution gauges on /metrics: running, queued and the running share against the
weighted target, read from the kernel's groups at scrape time, with bounded labels."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

import yoke
from yoke.executions import Limits
from yoke.server import Server
from yoke.server.metrics import TOP_TENANTS


def _sample(text: str, series: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


async def test_tenant_gauges_are_bounded_and_add_up(tmp_path: Any) -> None:
    app = yoke.App(f"sqlite:///{tmp_path}/m.db", limits=Limits(max_running=3))
    hold = asyncio.Event()

    @app.workflow()
    async def wait(ctx: yoke.Context, input: Any) -> Any:
        await hold.wait()
        return input

    server = Server(app, tokens=None)
    async with server.lifespan():
        ex = app.executions
        for _ in range(3):
            await ex.start("wait", None, session="acme")
        for i in range(TOP_TENANTS + 10):  # more tenants than are named
            await ex.start("wait", None, session=f"t{i}/s")
        transport = httpx.ASGITransport(app=server)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            text = (await c.get("/metrics")).text
        hold.set()
    assert _sample(text, 'yoke_tenant_executions_running{tenant="acme"}') == 3
    assert _sample(text, 'yoke_tenant_running_share{of="actual",tenant="acme"}') == 1.0
    queued = [ln for ln in text.splitlines() if ln.startswith("yoke_tenant_starts_queued{")]
    assert len(queued) == TOP_TENANTS + 1  # named, then the rest as one series
    assert sum(float(ln.split()[-1]) for ln in queued) == TOP_TENANTS + 10
    targets = [
        float(ln.split()[-1])
        for ln in text.splitlines()
        if ln.startswith("yoke_tenant_running_share{") and 'of="target"' in ln
    ]
    assert abs(sum(targets) - 1.0) < 1e-9
