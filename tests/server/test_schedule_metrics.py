"""`yoke_schedule_*` on /metrics: ticks started (with their lateness), refused by admission (a
tenant's rate), and missed or skipped while no server ran, by tenant, with bounded labels."""

from __future__ import annotations

from typing import Any

import httpx
from prometheus_client import Histogram

import yoke
from tests.executions.helpers import ticker_idle
from yoke.clock import ManualClock
from yoke.config import Settings
from yoke.executions import ADMIN, Principal
from yoke.server import Server
from yoke.server.metrics import OTHER, TOP_TENANTS, _ScheduleTicks

ROOT = Principal("root", roles=[ADMIN])


def sample(text: str, series: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


async def test_ticks_are_counted_by_tenant_and_outcome(database_url: str) -> None:
    clock = ManualClock(wall_offset=1_800_000_000.0)
    settings = Settings(database_url=database_url, schedule_poll_secs=3600.0)
    app = yoke.App(settings=settings, clock=clock)

    @app.workflow()
    async def tick(ctx: yoke.Context, input: Any) -> None:
        return None

    server = Server(app, tokens=None)
    async with server.lifespan():
        # acme may start one execution in 1,000 s: its second tick is refused (a 429 for a
        # caller); globex's schedule skips what it missed.
        await app.tenants.set("acme", executions={"rate": 0.001, "burst": 1}, principal=ROOT)
        a = await app.schedules.set("a", workflow="tick", every=60, tenant="acme")
        await app.schedules.set("g", workflow="tick", every=60, tenant="globex", catch_up="skip")
        assert app.tick_loop is not None
        ticker = app.tick_loop.ticker
        await ticker_idle(app)
        clock.advance(a.next_at - clock.wall() + 0.25)
        await ticker.fire_due()  # both tick, a quarter of a second late
        clock.advance(60)
        await ticker.fire_due()  # acme's is refused by its rate; globex's starts
        clock.advance(600)
        # Ten minutes down: the ticks from +120 to +600 passed over the grace (9), +660 is late.
        # acme: one start stands for the 9 (8 missed), refused, and the late one refused too;
        # globex skips the 9 and starts the late one.
        await ticker.fire_due()
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=server), base_url="http://localhost"
        ) as client:
            text = (await client.get("/metrics")).text

    def ticks(tenant: str, outcome: str) -> float | None:
        return sample(text, f'yoke_schedule_ticks_total{{outcome="{outcome}",tenant="{tenant}"}}')

    assert ticks("acme", "started") == 1
    assert ticks("acme", "refused") == 3  # its second tick, the catch-up and the late one
    assert ticks("acme", "missed") == 8
    assert ticks("globex", "started") == 3  # two on time, then the late one after the gap
    assert ticks("globex", "skipped") == 9
    assert ticks("globex", "missed") == 0
    assert sample(text, "yoke_schedule_lateness_seconds_count") == 4
    assert sample(text, 'yoke_schedule_lateness_seconds_bucket{le="0.1"}') == 0
    assert sample(text, 'yoke_schedule_lateness_seconds_bucket{le="0.25"}') == 4  # all 0.25 s


def test_tenant_labels_are_bounded() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    ticks = _ScheduleTicks(Histogram("lateness", "x", registry=registry))
    registry.register(ticks)
    for i in range(TOP_TENANTS + 30):
        ticks.started(f"t{i:03}", 0.01)
    ticks.missed("t000", 5, 0)
    text = generate_latest(registry).decode()
    tenants = {
        line.split('tenant="')[1].split('"')[0]
        for line in text.splitlines()
        if line.startswith("yoke_schedule_ticks_total{")
    }
    assert len(tenants) == TOP_TENANTS + 1 and OTHER in tenants and "t000" in tenants
    assert sample(text, f'yoke_schedule_ticks_total{{outcome="started",tenant="{OTHER}"}}') == 30
