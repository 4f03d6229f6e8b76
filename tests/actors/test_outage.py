"""The store goes away and comes back: loops retry with backoff, appends fail clearly, nothing
is lost. Outages are simulated (every verb of the in-memory store, or one verb of every store,
raises `StoreUnavailable`, as a real store does when it is down), and one is real: PostgreSQL
behind a TCP proxy that is cut (`pgproxy.py`)."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Any

import psycopg
import pytest

from tests.actors.conftest import MakeRuntime, truncate_actor_tables, wait_for
from tests.actors.pgproxy import PgProxy
from yoke.actors import ActorCtx, ActorRuntime, Backoff, Event, Queue
from yoke.actors.protocol import ActorStore
from yoke.errors import StoreUnavailable
from yoke.store.actor_records import ClaimedEvent, InstanceRef, NewEvent, Target
from yoke.store.postgres import PostgresStore
from yoke.testing.memstore import MemoryActorStore


class FlakyStore(MemoryActorStore):
    """Every verb fails with StoreUnavailable while `down` is set."""

    down = False

    def __getattribute__(self, name: str) -> Any:
        attr = super().__getattribute__(name)
        if name.startswith("_") or not callable(attr) or not asyncio.iscoroutinefunction(attr):
            return attr
        if not super().__getattribute__("down"):
            return attr

        async def unavailable(*args: Any, **kwargs: Any) -> Any:
            raise StoreUnavailable("database unreachable (simulated)")

        return unavailable


class _Retried(logging.Handler):
    """Sets an event when a loop logs that a store call failed and will be retried."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "retrying" in record.getMessage():
            self.seen.set()


async def test_outage_blocks_then_loses_nothing(make_runtime: MakeRuntime) -> None:
    store = FlakyStore()
    rt = make_runtime(poll_interval=0.05)
    seen: list[int] = []
    done = asyncio.Event()
    first = asyncio.Event()
    gate = asyncio.Event()
    retried = _Retried()
    logging.getLogger("yoke.actors").addHandler(retried)

    @rt.actor(subscribe=["s"], key="k")
    async def a(ctx: ActorCtx, event: Event) -> None:
        seen.append(event.data["n"])
        first.set()
        await gate.wait()
        if len(seen) == 20:
            done.set()

    try:
        await _run(rt, store, gate, first, done, retried)
    finally:
        logging.getLogger("yoke.actors").removeHandler(retried)
    assert sorted(seen) == list(range(20))


async def _run(
    rt: ActorRuntime,
    store: FlakyStore,
    gate: asyncio.Event,
    first: asyncio.Event,
    done: asyncio.Event,
    retried: _Retried,
) -> None:
    async with rt.running(store):
        await rt.append_many("s", [{"k": 1, "n": i} for i in range(10)])
        await wait_for(first)
        store.down = True
        with pytest.raises(StoreUnavailable):
            await rt.append("s", {"k": 1, "n": 99})
        gate.set()  # completions now fail: they are kept and retried
        await wait_for(retried.seen)  # a loop said so, and backs off
        store.down = False
        await rt.append_many("s", [{"k": 1, "n": i} for i in range(10, 20)])
        await wait_for(done)
        await rt.drain.flush()  # type: ignore[union-attr]
        assert not store.rows  # every completion was written in the end


# -- writes given up during an outage : retried until the store takes them ------


class Taken:
    """The answers of the calls a store verb took, and an event set at the first one."""

    def __init__(self) -> None:
        self.answers: list[Any] = []
        self.first = asyncio.Event()


def down_for(
    store: ActorStore, verb: str, seconds: float, monkeypatch: pytest.MonkeyPatch
) -> Taken:
    """`store.<verb>` raises StoreUnavailable for `seconds` from its first call (longer than a
    few retries), then works again."""
    real = getattr(store, verb)
    taken = Taken()
    until: float | None = None

    async def down_for_a_while(*args: Any, **kwargs: Any) -> Any:
        nonlocal until
        now = asyncio.get_running_loop().time()
        until = now + seconds if until is None else until
        if now < until:
            raise StoreUnavailable(f"{verb}: the database is down (simulated)")
        answer = await real(*args, **kwargs)
        taken.answers.append(answer)
        taken.first.set()
        return answer

    monkeypatch.setattr(store, verb, down_for_a_while)
    return taken


async def test_a_failed_events_writes_wait_for_the_store_and_its_group_waits_for_them(
    actor_store: ActorStore, make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two failed attempts: the requeue, then the dead letter, each written while the store
    # refuses it for a second. Given up, the first would lose an attempt, the second would
    # leave the row claimed (in flight) for good and let the next event overtake it.
    requeues = down_for(actor_store, "requeue", 1.0, monkeypatch)
    dead_letters = down_for(actor_store, "dead_letter", 1.0, monkeypatch)
    rt = make_runtime()
    next_saw: list[tuple[int, int]] = []
    done = asyncio.Event()

    @rt.actor(subscribe=["s"], key="k", backoff=Backoff(initial=0.01, max_attempts=2))
    async def a(ctx: ActorCtx, event: Event) -> None:
        if event.data["bad"]:
            raise RuntimeError("nope")
        next_saw.append((len(requeues.answers), len(dead_letters.answers)))
        done.set()

    async with rt.running(actor_store):
        await rt.append_many("s", [{"k": "x", "bad": True}, {"k": "x", "bad": False}])
        await wait_for(done)
        await rt.drain.flush()  # type: ignore[union-attr]
        stats = rt.drain_stats()
        view = await rt.instance("a", "x")
    assert next_saw == [(1, 1)]  # FIFO: the next event waited for both writes
    assert requeues.answers == [True] and dead_letters.answers == [True]
    assert stats is not None and stats.dead == 1 and stats.given_up == 0
    (dl,) = view.dead_letters
    assert dl.attempts == 2 and view.queue_depth == 0  # both attempts counted, nothing claimed


async def test_an_event_of_an_actor_not_defined_here_is_put_back_when_the_store_returns(
    actor_store: ActorStore, make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    requeues = down_for(actor_store, "requeue", 1.0, monkeypatch)
    rt = make_runtime()
    rt.attach(actor_store)
    ghost = NewEvent(
        tenant="default",
        stream="s",
        data="{}",
        targets=(Target(actor="ghost", instance_id="g", group_id=""),),
    )
    await actor_store.append_events([ghost], owner=None, now=rt.wall())
    async with rt.running():
        await wait_for(requeues.first)
    # Its attempt and available_at are written, for the worker that defines it and takes the
    # instance over once this one stops.
    assert requeues.answers == [True]


async def test_a_stopping_worker_gives_up_unwritable_completions_and_releases_their_rows(
    actor_store: ActorStore, make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    down_for(actor_store, "complete", 3600.0, monkeypatch)
    runs = 0
    ran = asyncio.Event()
    retried = _Retried()
    logging.getLogger("yoke.actors").addHandler(retried)

    async def a(ctx: ActorCtx, event: Event) -> None:
        nonlocal runs
        runs += 1
        ran.set()

    rt = make_runtime()
    rt.actor(subscribe=["s"], key="k")(a)
    try:
        async with asyncio.timeout(20):  # a shutdown must end even if the store never returns
            async with rt.running(actor_store):
                drain = rt.drain
                assert drain is not None
                await rt.append("s", {"k": "x"})
                await wait_for(ran)
                await wait_for(retried.seen)  # the completion is being retried
    finally:
        logging.getLogger("yoke.actors").removeHandler(retried)
    assert drain.stats().given_up == 1
    # stop_worker put the row, still claimed, back to pending: the next worker runs it again.
    monkeypatch.undo()
    info = await actor_store.get_instance(InstanceRef(tenant="default", actor="a", instance_id="x"))
    assert info is not None and info.pending == 1 and info.in_flight == 0
    ran.clear()
    rt2 = make_runtime(worker_id="w2")
    rt2.actor(subscribe=["s"], key="k")(a)
    async with rt2.running(actor_store):
        await wait_for(ran)
        await rt2.drain.flush()  # type: ignore[union-attr]
    assert runs == 2
    info = await actor_store.get_instance(InstanceRef(tenant="default", actor="a", instance_id="x"))
    assert info is not None and info.pending == info.in_flight == 0


async def test_a_claim_whose_answer_was_lost_leaves_no_row_claimed_by_no_one(
    actor_store: ActorStore, make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store commits a claim but its answer never comes back (the connection drops while
    # the COMMIT is answered, as a cut does under load): the worker sees StoreUnavailable.
    # Its rows are this worker's claim in the store and held by no one; as a worker claims
    # pending rows only, left alone they would stay in flight until it stops.
    real = actor_store.claim_next
    lost: list[int] = []

    async def answer_lost_once(*args: Any, **kwargs: Any) -> list[ClaimedEvent]:
        rows = await real(*args, **kwargs)
        if rows and not lost:
            lost.extend(r.queue_id for r in rows)
            raise StoreUnavailable("claim_next: the connection dropped at COMMIT (simulated)")
        return rows

    monkeypatch.setattr(actor_store, "claim_next", answer_lost_once)
    rt = make_runtime()
    ran: dict[int, list[int]] = defaultdict(list)
    done = asyncio.Event()

    @rt.actor(subscribe=["s"], key="k", queue=Queue(group_by="g"))
    async def a(ctx: ActorCtx, event: Event) -> None:
        ran[event.data["g"]].append(event.data["seq"])
        if sum(map(len, ran.values())) == 20:
            done.set()

    async with rt.running(actor_store):
        await rt.append_many("s", [{"k": "x", "g": s % 2, "seq": s} for s in range(20)])
        await wait_for(done, 10)
        await rt.drain.flush()  # type: ignore[union-attr]
        info = await actor_store.get_instance(
            InstanceRef(tenant="default", actor="a", instance_id="x")
        )
    assert lost  # the claim did commit, and its answer was lost
    assert ran == {0: list(range(0, 20, 2)), 1: list(range(1, 20, 2))}  # each once, FIFO
    assert info is not None and info.pending == info.in_flight == 0


# -- a real outage: PostgreSQL behind a proxy that is cut for two seconds ----------------------


@pytest.mark.postgres
async def test_a_real_outage_loses_nothing_and_keeps_fifo(
    pg_url: str, make_runtime: MakeRuntime
) -> None:
    # Every event fans out to two actors of one instance each, four groups of 30 events. In
    # the middle, PostgreSQL goes away for two seconds: an event of `a` fails (its requeue is
    # written in the outage) and cuts the proxy; one of `b` (max_attempts=1) fails in the
    # outage too (its dead letter); the others keep running on the rows claimed before, their
    # completions waiting. When it returns, every write must land: nothing lost, nothing left
    # claimed, and no event overtook one of its group.
    truncate_actor_tables(pg_url)
    groups, per_group = 4, 30
    rt = make_runtime(concurrency=8, stale_after=60.0)
    proxy = PgProxy(pg_url)
    started: dict[tuple[str, int], list[int]] = defaultdict(list)
    succeeded: dict[tuple[str, int], list[int]] = defaultdict(list)
    failed_once: set[tuple[int, int]] = set()
    cut = asyncio.Event()
    b_failed = asyncio.Event()
    done = asyncio.Event()

    def ran(actor: str, event: Event) -> None:
        succeeded[actor, event.data["g"]].append(event.data["seq"])
        if sum(len(v) for v in succeeded.values()) == 2 * groups * per_group - 1:
            done.set()

    @rt.actor(subscribe=["s"], key="k", queue=Queue(group_by="g"), backoff=Backoff(initial=0.05))
    async def a(ctx: ActorCtx, event: Event) -> None:
        g, seq = event.data["g"], event.data["seq"]
        started["a", g].append(seq)
        await asyncio.sleep(0.01)  # the other groups' events run while the cut lands
        if seq % 5 == 2 and (g, seq) not in failed_once:  # fails once: a requeue
            failed_once.add((g, seq))
            if (g, seq) == (0, 12):  # the outage begins, and this requeue is written in it
                proxy.cut()
                cut.set()
            raise RuntimeError("fails once")
        ran("a", event)

    @rt.actor(subscribe=["s"], key="k", queue=Queue(group_by="g"), backoff=Backoff(max_attempts=1))
    async def b(ctx: ActorCtx, event: Event) -> None:
        g, seq = event.data["g"], event.data["seq"]
        started["b", g].append(seq)
        await asyncio.sleep(0.01)
        if (g, seq) == (0, 12):  # fails in the outage: its dead letter is written in it
            await cut.wait()
            b_failed.set()
            raise RuntimeError("fails for good")
        ran("b", event)

    async with proxy:
        store = PostgresStore(proxy.url, connect_timeout=1.0)
        await store.open()
        try:
            async with rt.running(store.actors):
                # Every row is claimed (prefetched) before the cut, so events run during it.
                await rt.append_many(
                    "s",
                    [{"k": "x", "g": g, "seq": s} for s in range(per_group) for g in range(groups)],
                )
                await wait_for(cut)
                await wait_for(b_failed)
                await asyncio.sleep(2.0)  # the outage itself, not a synchronisation
                proxy.restore()
                await wait_for(done, 60)
                await rt.drain.flush()  # type: ignore[union-attr]
                stats = rt.drain_stats()
        finally:
            await store.close()
    assert proxy.refused > 0  # the pool did try to reconnect while cut
    assert stats is not None and stats.given_up == 0 and stats.dead == 1
    for actor in ("a", "b"):
        for g in range(groups):
            expected = [s for s in range(per_group) if (actor, g, s) != ("b", 0, 12)]
            assert succeeded[actor, g] == expected, (actor, g)  # none lost, each once, in order
            assert started[actor, g] == sorted(started[actor, g]), (actor, g)  # FIFO held
    with psycopg.connect(pg_url) as conn:
        left = conn.execute("SELECT status, count(*) FROM actor_queues GROUP BY status").fetchall()
    assert left == [("dead", 1)]  # nothing stuck claimed: only b's dead letter is kept
