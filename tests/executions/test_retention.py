"""Retention: finished executions (with their steps and requests), decided starts whose execution
is gone, expired stored answers and, when asked, old control-log entries are deleted in batches;
running executions, queued starts, recent rows and the newest limits entry stay; one process
prunes at a time (a lease), and `yoke_pruned_rows_total` counts what it deleted. Both stores."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from tests.actors.conftest import truncate_actor_tables
from tests.store.grants import done_step, grant_request
from yoke.app import open_store
from yoke.clock import SystemClock
from yoke.executions.retention import Pruner
from yoke.store import (
    AnswerRow,
    ExecutionStatus,
    NewControl,
    NewStart,
    Slot,
    StartKind,
    StartStatus,
    Store,
)

from .helpers import count_rows, make_app

SLOTS = [Slot(key="global", cap=None)]
OLD, CUTOFF, NEW = 100.0, 1_000.0, 5_000.0


def _start() -> NewStart:
    return NewStart(
        start_id=str(uuid.uuid4()),
        kind=StartKind.START,
        workflow="wf",
        session="s",
        tenant="s",
        priority=0,
        input="null",
        fingerprint="",
        principal=None,
        idempotency_key=None,
        source_execution_id=None,
        from_step=None,
        instance_id="me",
        created_at=OLD,
    )


async def _execution(store: Store, *, granted: float, finished: float | None) -> str:
    [res] = await store.grant_starts([grant_request(_start(), SLOTS, log=True)], now=granted)
    assert res.execution is not None
    eid = res.execution.execution_id
    await store.record_steps([done_step(eid, p, f"s{p}", "1") for p in range(3)], now=granted)
    if finished is not None:
        await store.requests.request_cancel(eid, principal=None, now=granted)
        assert await store.finish_execution(
            eid, ExecutionStatus.SUCCEEDED, output="1", error=None, now=finished
        )
    return eid


def _control(kind: str, at: float) -> NewControl:
    return NewControl(
        kind=kind,
        principal="p",
        tenant=None,
        roles=(),
        subject=None,
        before=None,
        after="{}",
        at=at,
    )


async def _seed(store: Store) -> dict[str, Any]:
    old = [await _execution(store, granted=OLD, finished=OLD + 1) for _ in range(7)]
    recent = await _execution(store, granted=OLD, finished=NEW)
    running = await _execution(store, granted=OLD, finished=None)
    refused, _ = await store.log_start(_start())
    await store.decide_start(refused.start_id, StartStatus.REFUSED, reason="x", now=OLD)
    queued, _ = await store.log_start(_start())
    for at in (OLD, OLD + 1, OLD + 2):
        await store.append_control(_control("priority", at))
    limits = await store.append_control(_control("limits", OLD + 3))
    await store.append_control(_control("priority", NEW))
    answer = AnswerRow(
        principal="p",
        tenant="p",
        key="k",
        fingerprint="f",
        status=201,
        body="{}",
        headers="[]",
        created_at=OLD,
        expires_at=OLD + 10,
    )
    await store.keep_answer(answer, now=OLD)
    return {
        "old": old,
        "recent": recent,
        "running": running,
        "queued": queued.start_id,
        "limits": limits.seq,
    }


async def test_a_prune_deletes_the_finished_past_in_batches(database_url: str) -> None:
    backend = open_store(database_url)
    await backend.open()
    store = backend.executions
    try:
        seeded = await _seed(store)
        rounds = []
        while True:
            batch = await store.retention.prune(
                before=CUTOFF, audit_before=CUTOFF, now=NEW, batch=3
            )
            rounds.append(batch)
            if not batch.full(3):
                break
        assert [b.executions for b in rounds] == [3, 3, 1]
        assert sum(b.steps for b in rounds) == 21 and sum(b.requests for b in rounds) == 7
        assert sum(b.starts for b in rounds) == 8  # the 7 granted ones and the refused one
        assert sum(b.answers for b in rounds) == 1
        assert sum(b.controls for b in rounds) == 3  # the newest limits entry stays
        for eid in seeded["old"]:
            assert await store.get_execution(eid) is None and await store.steps_of(eid) == []
        for eid in (seeded["recent"], seeded["running"]):
            assert await store.get_execution(eid) is not None
            assert len(await store.steps_of(eid)) == 3
        assert await store.get_start(seeded["queued"]) is not None
        assert count_rows(database_url, "yoke_starts") == 3  # recent, running, queued
        kept = [c.seq for c in await store.control_log()]
        assert seeded["limits"] in kept and len(kept) == 2
        assert await store.latest_limits() == "{}"
        again = await store.retention.prune(before=CUTOFF, audit_before=None, now=NEW, batch=3)
        assert not again.full(1) and again.executions == again.starts == 0
    finally:
        await backend.close()


def _free_lease(database_url: str) -> None:
    """The pruner's lease as no process holds it (a process of an earlier test that was killed
    would hold it until its term lapses)."""
    if database_url.startswith("postgres"):
        truncate_actor_tables(database_url)


async def test_one_pruner_prunes_at_a_time_and_counts_what_it_deleted(database_url: str) -> None:
    _free_lease(database_url)
    backends = [open_store(database_url) for _ in range(2)]
    for b in backends:
        await b.open()
    try:
        await _seed(backends[0].executions)
        clock = SystemClock()
        # The seeded times are near the epoch: a retention of a year cuts between them and now.
        pruners = [
            Pruner(
                b.executions,
                b.actors.leases,
                clock=clock,
                holder=f"p{i}",
                retention=clock.wall() - CUTOFF,
                interval=0.05,
                batch=2,
            )
            for i, b in enumerate(backends)
        ]
        tasks = [asyncio.create_task(p.run()) for p in pruners]
        try:
            for _ in range(500):
                if sum(p.pruned["executions"] for p in pruners) >= 7:
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)  # more rounds: the holder goes on, the other never begins
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        holders = [p for p in pruners if p.rounds]
        assert len(holders) == 1, pruners
        assert holders[0].pruned["executions"] == 7 and holders[0].pruned["steps"] == 21
        assert holders[0].rounds > 1
    finally:
        for b in backends:
            await b.close()


async def test_the_app_prunes_under_its_settings_and_the_metric_counts(database_url: str) -> None:
    _free_lease(database_url)
    app = make_app(database_url, prune_interval_secs=0.05, retention_secs=1.0)

    @app.workflow()
    async def quick(ctx: Any, input: Any) -> Any:
        return input

    async with app.running():
        s = await app.executions.start("quick", 1)
        assert s.execution_id is not None
        await app.executions.wait(s.execution_id, 10)
        assert app.pruner is not None
        for _ in range(300):
            if app.pruner.pruned["executions"]:
                break
            await asyncio.sleep(0.02)
        from yoke.server.metrics import Metrics

        text = Metrics(app.executions, pruner=lambda: app.pruner).render().decode()
    assert 'yoke_pruned_rows_total{table="executions"} 1.0' in text
    assert count_rows(database_url, "yoke_executions") == 0
    kept = make_app(database_url, retention_secs=0)
    async with kept.running():
        assert kept.pruner is None


async def test_a_leader_prunes_without_a_lease_of_its_own_and_only_while_it_leads(
    database_url: str,
) -> None:
    backend = open_store(database_url)
    await backend.open()
    try:
        await _seed(backend.executions)
        leading = [False]
        clock = SystemClock()
        pruner = Pruner(
            backend.executions,
            None,  # an HA pair's leader: its admission lease makes it one at a time already
            clock=clock,
            holder="leader",
            retention=clock.wall() - CUTOFF,
            interval=0.02,
            only_while=lambda: leading[0],
        )
        task = asyncio.create_task(pruner.run())
        try:
            await asyncio.sleep(0.2)  # several periods as a standby: nothing is pruned
            assert pruner.rounds == 0 and count_rows(database_url, "yoke_executions") == 9
            leading[0] = True
            for _ in range(250):
                if pruner.pruned["executions"] == 7:
                    break
                await asyncio.sleep(0.02)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        assert pruner.pruned["executions"] == 7 and pruner.elector is None
    finally:
        await backend.close()
