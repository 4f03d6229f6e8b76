"""Batches of the actor verbs on every `ActorStore`: a batch append fans out to every target in
one transaction, concurrent appends that create the same instances lose and duplicate nothing,
and timers due at the same millisecond fire exactly once whoever fires them.

PostgreSQL appends in one statement and falls back to steps when that statement meets an
instance created by a concurrent append: the last tests here drive that fallback on purpose,
and a store that goes down mid-way."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.actors.conftest import open_actor_store
from yoke.actors import ActorRegistry, TimerDispatch
from yoke.actors.protocol import ActorStore
from yoke.clock import ManualClock
from yoke.errors import StoreUnavailable
from yoke.store.actor_records import ClaimedEvent, NewEvent, NewTimer, Target
from yoke.store.postgres import PostgresStore


def fanned(n: int, *, instances: int, tenant: str = "t") -> list[NewEvent]:
    """n events, each to three actors; event i reaches instance i % instances of each."""
    return [
        NewEvent(
            tenant=tenant,
            stream="s",
            data=json.dumps({"i": i}),
            targets=tuple(
                Target(actor=a, instance_id=str(i % instances), group_id=str(i % 2))
                for a in ("a", "b", "c")
            ),
        )
        for i in range(n)
    ]


async def claim_all(store: ActorStore, worker: str) -> list[ClaimedEvent]:
    out: list[ClaimedEvent] = []
    while got := await store.claim_next(worker, limit=500, now=4e9):
        out += got
    return out


async def test_a_batch_fans_out_to_every_target_in_order(actor_store: ActorStore) -> None:
    evs = fanned(300, instances=7) + fanned(20, instances=3, tenant="u")
    ids = await actor_store.append_events(evs, owner="w1", now=1.0)
    assert len(ids) == 320 and ids == sorted(ids)
    claims = await claim_all(actor_store, "w1")
    assert len(claims) == 320 * 3
    by_event = Counter(c.event_id for c in claims)
    assert set(by_event) == set(ids) and set(by_event.values()) == {3}
    # Each event reached each actor once, with its own data, tenant and group.
    for c in claims:
        i = json.loads(c.data)["i"]
        assert c.tenant == evs[ids.index(c.event_id)].tenant
        assert c.group_id == str(i % 2)
        assert c.instance_id == str(i % (7 if c.tenant == "t" else 3))
    assert Counter((c.tenant, c.actor) for c in claims) == {
        ("t", "a"): 300,
        ("t", "b"): 300,
        ("t", "c"): 300,
        ("u", "a"): 20,
        ("u", "b"): 20,
        ("u", "c"): 20,
    }
    # FIFO: within an instance, queue ids follow the events' order in the batch.
    per_instance: dict[tuple[str, str, str], list[ClaimedEvent]] = {}
    for c in claims:
        per_instance.setdefault((c.tenant, c.actor, c.instance_id), []).append(c)
    for rows in per_instance.values():
        rows.sort(key=lambda c: c.queue_id)
        assert [c.event_id for c in rows] == sorted(c.event_id for c in rows)


async def test_concurrent_appends_creating_the_same_instances(actor_store: ActorStore) -> None:
    # Eight appenders race to create the same 20 instances: every event gets all its rows,
    # exactly once, whichever appender created an instance.
    batches = [fanned(60, instances=20) for _ in range(8)]
    got = await asyncio.gather(
        *(actor_store.append_events(b, owner="w1", now=1.0) for b in batches)
    )
    ids = [i for g in got for i in g]
    assert len(ids) == len(set(ids)) == 480
    claims = await claim_all(actor_store, "w1")
    assert Counter(c.event_id for c in claims) == dict.fromkeys(ids, 3)
    for actor in ("a", "b", "c"):
        infos = await actor_store.list_instances(actor, limit=100)
        assert len(infos) == 20 and {i.worker_id for i in infos} == {"w1"}


def _registry() -> ActorRegistry:
    async def noop(ctx: Any, event: Any) -> None:
        return None

    reg = ActorRegistry()
    reg.actor("tick", subscribe=["ticks"], key="k")(noop)
    return reg


async def test_timers_due_at_the_same_ms_fire_exactly_once(actor_store: ActorStore) -> None:
    clock = ManualClock(wall_offset=1_700_000_000.0)
    due_ms = round(clock.wall() * 1000) + 1000
    n = 300
    await actor_store.schedule(
        [
            NewTimer(
                tenant="t", stream="ticks", data=json.dumps({"k": i % 5, "n": i}), fire_at_ms=due_ms
            )
            for i in range(n)
        ],
        now=clock.wall(),
    )
    reg = _registry()

    def owner(worker: str) -> Callable[[], str]:
        return lambda: worker

    dispatchers = [
        TimerDispatch(
            store=actor_store,
            registry=reg,
            clock=clock,
            owner=owner(w),
            on_fired=lambda: None,
            batch_size=100,
        )
        for w in ("w1", "w2", "w3")
    ]
    assert [await d.fire_due() for d in dispatchers] == [1.0, 1.0, 1.0]  # read ahead, not due
    clock.advance(1.0)
    await asyncio.gather(*(d.fire_due() for d in dispatchers))
    assert sum(d.fired for d in dispatchers) == n
    assert await actor_store.next_fire_at_ms() is None
    # Each timer's event was appended once, to the instance its data names.
    seen: list[int] = []
    for w in ("w1", "w2", "w3"):
        for c in await claim_all(actor_store, w):
            data = json.loads(c.data)
            assert c.instance_id == str(data["k"])
            seen.append(data["n"])
    assert sorted(seen) == list(range(n))


async def test_firing_a_timer_twice_appends_it_once(actor_store: ActorStore) -> None:
    (tid,) = await actor_store.schedule(
        [NewTimer(tenant="t", stream="ticks", data='{"k":1}', fire_at_ms=5)], now=0.0
    )
    event = NewEvent(
        tenant="t",
        stream="ticks",
        data='{"k":1}',
        targets=(Target(actor="tick", instance_id="1", group_id=""),),
    )
    first, second = await asyncio.gather(
        actor_store.fire_timers([(tid, event)], owner="w1", now=1.0),
        actor_store.fire_timers([(tid, event)], owner="w2", now=1.0),
    )
    assert sorted([first, second]) == [[], [tid]]
    assert await actor_store.fire_timers([(tid, event)], owner="w1", now=1.0) == []
    (info,) = await actor_store.list_instances("tick")
    assert info.pending == 1


# -- PostgreSQL: the one-statement append and its fallback ---------------------------------


def _count_steps(store: PostgresStore) -> list[int]:
    """Counts the step-by-step appends (the fallback of the one-statement form)."""
    calls: list[int] = []
    steps = store.actors._append_steps

    async def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return await steps(*args, **kwargs)

    store.actors._append_steps = counted  # type: ignore[method-assign]
    return calls


async def _until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(20):
        while not check():  # noqa: ASYNC110 (polling the server's view, not our own state)
            await asyncio.sleep(0.01)


@pytest.mark.postgres
async def test_an_instance_created_concurrently_sends_the_append_to_its_steps(
    pg_url: str,
) -> None:
    from tests.actors.conftest import truncate_actor_tables

    truncate_actor_tables(pg_url)
    store = open_actor_store(pg_url)
    await store.open()
    assert isinstance(store, PostgresStore)
    steps = _count_steps(store)
    other = await psycopg.AsyncConnection.connect(pg_url)
    try:
        # Another writer creates instance "new" and holds its transaction open.
        await other.execute(
            "INSERT INTO actor_instances (tenant, actor, instance_id, worker_id, created_at) "
            "VALUES ('t', 'a', 'new', 'elsewhere', 0)"
        )
        event = NewEvent(
            tenant="t",
            stream="s",
            data="{}",
            targets=(
                Target(actor="a", instance_id="new", group_id=""),
                Target(actor="a", instance_id="fresh", group_id=""),
            ),
        )
        append = asyncio.create_task(store.actors.append_events([event], owner="w1", now=1.0))
        with psycopg.connect(pg_url, autocommit=True) as probe:

            def waiting() -> bool:
                row = probe.execute(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                ).fetchone()
                return row is not None and row[0] == 1

            await _until(waiting)  # its statement (and snapshot) began before the commit
        await other.commit()
        (eid,) = await append
    finally:
        await other.close()
    try:
        assert steps == [1]  # the statement's guard aborted it; the steps wrote the append
        claims = await store.actors.claim_next("elsewhere", limit=10, now=2.0)
        assert [(c.event_id, c.instance_id) for c in claims] == [(eid, "new")]
        claims = await store.actors.claim_next("w1", limit=10, now=2.0)
        assert [(c.event_id, c.instance_id) for c in claims] == [(eid, "fresh")]
        with psycopg.connect(pg_url) as conn:
            row = conn.execute("SELECT count(*) FROM stream_events").fetchone()
        assert row == (1,)  # the aborted statement left nothing behind
    finally:
        await store.close()


@pytest.mark.postgres
async def test_append_on_a_store_that_went_down(pg_databases: Callable[[], str]) -> None:
    url = pg_databases()
    name = url.rsplit("/", 1)[1]
    store = PostgresStore(url, min_size=1, max_size=2, connect_timeout=1.0)
    await store.open()
    admin = psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True)
    try:
        await store.actors.append_events(fanned(5, instances=2), owner="w1", now=1.0)
        admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false'.encode())
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,)
        )
        with pytest.raises(StoreUnavailable):
            await store.actors.append_events(fanned(5, instances=2), owner="w1", now=1.0)
        admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true'.encode())
        async with asyncio.timeout(60):
            while True:  # the pool reconnects with its own backoff
                try:
                    ids = await store.actors.append_events(
                        fanned(5, instances=2), owner="w1", now=1.0
                    )
                    break
                except StoreUnavailable:
                    continue
        assert len(ids) == 5
        claims = await claim_all(store.actors, "w1")
        assert len(claims) == 10 * 3  # the failed batch wrote nothing
    finally:
        admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true'.encode())
        admin.close()
        await store.close()


async def test_a_tenants_timers_are_read_for_it_alone(actor_store: ActorStore) -> None:
    """`tenant_timers`: one tenant's next timers, soonest first, whatever the others hold."""
    at = 1_800_000_000_000
    others = [NewTimer(tenant="b", stream="s", data="{}", fire_at_ms=at + i) for i in range(50)]
    mine = [NewTimer(tenant="a", stream="s", data=f'{{"n": {i}}}', fire_at_ms=at + 100 - i)
            for i in range(3)]  # fmt: skip
    await actor_store.schedule(others, now=0.0)
    ids = await actor_store.schedule(mine, now=0.0)
    got = await actor_store.tenant_timers("a", limit=2)
    assert [(t.timer_id, t.tenant, t.fire_at_ms) for t in got] == [
        (ids[2], "a", at + 98),
        (ids[1], "a", at + 99),
    ]
    assert await actor_store.tenant_timers("nobody", limit=10) == []
    assert len(await actor_store.tenant_timers("b", limit=100)) == 50
