"""The actors specification's metrics on a per-app prometheus registry: counters per actor,
bounded depths."""

from __future__ import annotations

import asyncio

import prometheus_client

from tests.actors.conftest import FAST, wait_for
from yoke.actors import ActorCtx, ActorMetrics, ActorRuntime, ActorSettings, Backoff, Event
from yoke.store.actor_records import QueueDepth
from yoke.testing.memstore import MemoryActorStore


def value(reg: prometheus_client.CollectorRegistry, name: str, **labels: str) -> float | None:
    return reg.get_sample_value(name, labels)


def test_disabled_metrics_are_no_ops() -> None:
    m = ActorMetrics(None)
    m.processed("a")
    m.failed("a")
    m.set_workers(3)
    m.set_depths([QueueDepth(tenant="t", actor="a", instance_id="i", depth=1)])
    assert not m.enabled


def test_queue_depth_keeps_only_the_deepest() -> None:
    reg = prometheus_client.CollectorRegistry()
    m = ActorMetrics(reg)
    m.set_depths([QueueDepth(tenant="t", actor="a", instance_id=str(i), depth=i) for i in (1, 2)])
    assert value(reg, "yoke_queue_depth", tenant="t", actor="a", instance="2") == 2
    m.set_depths([QueueDepth(tenant="t", actor="a", instance_id="3", depth=7)])
    assert value(reg, "yoke_queue_depth", tenant="t", actor="a", instance="2") is None
    assert value(reg, "yoke_queue_depth", tenant="t", actor="a", instance="3") == 7
    m.set_workers(2)
    assert value(reg, "yoke_runtime_workers") == 2


async def test_runtime_counts_processes_errors_and_workers() -> None:
    reg = prometheus_client.CollectorRegistry()
    rt = ActorRuntime(settings=ActorSettings(worker_id="w1", **FAST), metrics_registry=reg)
    done = asyncio.Event()
    calls = 0

    @rt.actor(subscribe=["s"], key="k", backoff=Backoff(initial=0.001))
    async def flaky(ctx: ActorCtx, event: Event) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("first try fails")
        done.set()

    async with rt.running(MemoryActorStore()):
        await rt.append("s", {"k": 1})
        await wait_for(done)
    assert value(reg, "yoke_actor_process_total", actor="flaky") == 1
    assert value(reg, "yoke_actor_process_errors_total", actor="flaky") == 1
    assert value(reg, "yoke_runtime_workers") == 1
