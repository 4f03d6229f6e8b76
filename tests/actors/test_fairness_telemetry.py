"""Fairness telemetry per tenant with bounded labels: events processed, waits from append to
the first start, backlog and oldest pending age, Jain's index over the backlogged tenants."""

from __future__ import annotations

import asyncio

import prometheus_client
import pytest

from tests.actors.conftest import MakeRuntime, wait_for
from tests.actors.test_processes import until
from yoke.actors import ActorCtx, Event, Queue
from yoke.actors.fairness import OTHER, TenantTelemetry, jain
from yoke.actors.protocol import ActorStore


def test_jain_is_one_when_equal_and_one_over_n_when_one_takes_all() -> None:
    assert jain([3, 3, 3]) == pytest.approx(1.0)
    assert jain([9, 0, 0]) == pytest.approx(1 / 3)
    assert jain([]) == 1.0


def test_the_view_names_the_top_tenants_and_sums_the_rest() -> None:
    t = TenantTelemetry(recent=100)
    for i in range(30):
        for _ in range(i + 1):
            t.started(f"t{i:02}", 0.02)
            t.processed(f"t{i:02}")
    backlog = {f"t{i:02}": i for i in range(30)}
    view = t.view(backlog=backlog, oldest={"t29": 4.0, "t00": 9.0}, weights={}, top=10)
    names = [f.tenant for f in view.tenants]
    assert names == [f"t{i:02}" for i in range(29, 19, -1)] + [OTHER]
    other = view.tenants[-1]
    assert other.processed == sum(range(1, 21)) and other.backlog == sum(range(20))
    assert other.oldest_pending == 9.0 and view.tenants[0].oldest_pending == 4.0
    assert sum(f.processed for f in view.tenants) == sum(range(1, 31))
    assert view.tenants[0].wait_buckets[-1] == 30  # its 30 waits, all counted
    # A tenant sees itself alone.
    mine = t.view(backlog=backlog, oldest={}, weights={}, top=10, visible="t03")
    assert [f.tenant for f in mine.tenants] == ["t03"]
    # Past max_tenants, new tenants are counted under _other.
    small = TenantTelemetry(max_tenants=2)
    for name in ("a", "b", "c", "d"):
        small.processed(name)
        small.started(name, 0.0)
    got = small.view(backlog={}, oldest={}, weights={}, top=10)
    assert {f.tenant: f.processed for f in got.tenants} == {"a": 1, "b": 1, OTHER: 2}


def sample(reg: prometheus_client.CollectorRegistry, name: str, **labels: str) -> float | None:
    return reg.get_sample_value(name, labels)


async def test_a_worker_exports_bounded_per_tenant_fairness(
    actor_store: ActorStore, make_runtime: MakeRuntime
) -> None:
    rt = make_runtime(concurrency=2)
    gate = asyncio.Event()
    done = asyncio.Event()
    light = [f"light{i:02}" for i in range(14)]
    total = 40 + 2 * len(light)
    seen: list[str] = []

    @rt.actor(subscribe=["s"], key="k", queue=Queue(concurrency=100))
    async def work(ctx: ActorCtx, event: Event) -> None:
        await gate.wait()
        seen.append(ctx.tenant)
        if len(seen) == total:
            done.set()

    reg = rt.metrics.registry
    assert reg is not None
    async with rt.running(actor_store):
        await rt.append_many("s", [{"k": f"f{i}"} for i in range(40)], tenant="flood")
        for tenant in light:
            await rt.append_many("s", [{"k": "a"}, {"k": "b"}], tenant=tenant)
        drain = rt.drain
        assert drain is not None

        async def holding() -> bool:  # both slots blocked at the gate, every light tenant held
            held = {f.tenant for f in drain.fairness(top=100).tenants if f.backlog}
            return held >= set(light)  # not a count: the flood with 13 of 14 would pass it

        await until(holding, 20)
        held = drain.fairness(top=100)
        assert {f.tenant for f in held.tenants} >= set(light)  # top=100: all by name
        assert all(f.oldest_pending is not None for f in held.tenants if f.backlog)
        gate.set()
        await wait_for(done)
        text = prometheus_client.generate_latest(reg).decode()
    labels = {
        line.split('tenant="')[1].split('"')[0]
        for line in text.splitlines()
        if line.startswith("yoke_tenant_events_processed_total{")
    }
    assert len(labels) <= 11 and OTHER in labels  # 15 tenants: the top 10 and _other
    processed = [sample(reg, "yoke_tenant_events_processed_total", tenant=t) or 0.0 for t in labels]
    assert sum(processed) == total
    waits = [sample(reg, "yoke_tenant_wait_seconds_count", tenant=t) or 0.0 for t in labels]
    assert sum(waits) == total
    index = sample(reg, "yoke_actor_fairness_jain")
    assert index is not None and 0.0 < index <= 1.0
