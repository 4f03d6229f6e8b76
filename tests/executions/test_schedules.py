"""Schedules on both stores: each tick started exactly once by racing servers, cron across
daylight-saving changes, catch-up after every server was down, who may manage which
schedules, and bad values refused with nothing stored."""

from __future__ import annotations

import asyncio
import sqlite3
from collections import Counter
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest

from yoke.app import App
from yoke.clock import Clock, ManualClock
from yoke.errors import BadType, BadValue, Forbidden, NotFound
from yoke.executions import Context, Principal
from yoke.executions.cadence import CatchUp
from yoke.executions.model import OPERATOR
from yoke.executions.schedules import Schedule
from yoke.executions.ticker import tick_key
from yoke.store.scheduleverbs import NewSchedule

from .helpers import FastClock, fast_settings, ticker_idle, wait_until

ACME = Principal("acme")  # a plain tenant
OPS = Principal("ops", roles=[OPERATOR])


def server(database_url: str, clock: Clock, runs: list[str], **over: Any) -> App:
    settings = fast_settings(database_url, instance_stale_after=3600.0, **over)
    app = App(settings=settings, clock=clock)

    @app.workflow()
    async def tick(ctx: Context, input: Any) -> None:
        runs.append(ctx.execution_id)

    return app


def keys_of_runs(database_url: str) -> dict[str, str]:
    """Each `tick` execution's start's idempotency key, by execution id."""
    sql = (
        "SELECT e.execution_id, s.idempotency_key FROM yoke_executions e "
        "JOIN yoke_starts s ON s.start_id = e.start_id WHERE e.workflow = 'tick'"
    )
    if database_url.startswith("sqlite:"):
        conn = sqlite3.connect(database_url.removeprefix("sqlite:///"))
        try:
            return {str(e): str(k) for e, k in conn.execute(sql)}
        finally:
            conn.close()
    with psycopg.connect(database_url) as pg:
        return {str(e): str(k) for e, k in pg.execute(sql.encode()).fetchall()}


async def test_two_servers_start_each_tick_of_an_every_1_schedule_once(database_url: str) -> None:
    """Two servers (two apps on one database) race the ticks of an `every=1` schedule for a
    minute of schedule time. The issue asks for 60 s: the ticker reads time only through its
    Clock, so a clock running 20x fast (`FastClock`) gives the minute's 60 ticks in 3 s of real
    time. Both tickers wake for every tick (their longest sleep, `schedule_poll_secs`, is 20 ms
    of real time, under a tick's 50 ms) and read the same row due at once; the servers'
    heartbeats are made tolerant of the fast clock (`instance_stale_after`). Each tick must be
    started exactly once: the runs of the workflow are counted per tick, each mapped to its
    tick by its start's idempotency key, and the ticks must follow each other with none lost."""
    clock = FastClock(speed=20)
    runs: list[str] = []
    a = server(database_url, clock, runs, schedule_poll_secs=0.02)
    b = server(database_url, clock, runs, schedule_poll_secs=0.02)
    async with a.running(), b.running():
        s = await a.schedules.set("beat", workflow="tick", every=1, tenant="acme")
        first_due = s.next_at
        await asyncio.sleep(3.2)  # 64 s of schedule time
        await b.schedules.delete("beat", tenant="acme")

        async def all_ran() -> bool:
            return len(runs) >= len(keys_of_runs(database_url))

        await wait_until(all_ran, timeout=5)
        assert a.tick_loop is not None and b.tick_loop is not None
        tickers = [a.tick_loop.ticker, b.tick_loop.ticker]
    stats = [t.stats() for t in tickers]
    keys = keys_of_runs(database_url)
    per_tick = Counter(int(keys[r].rsplit(":", 1)[1]) for r in runs)  # tick ms: runs
    assert per_tick and max(per_tick.values()) == 1, per_tick.most_common(3)
    ms = sorted(per_tick)
    assert ms[0] == round(first_due * 1000)
    assert ms == list(range(ms[0], ms[-1] + 1, 1000)), "a tick was lost"
    assert len(ms) >= 40, len(ms)  # dozens of ticks (about 60)
    assert sum(st.fired for st in stats) == len(ms)
    assert sum(st.claims_lost for st in stats) > 0, stats  # they did race for the ticks


BERLIN = ZoneInfo("Europe/Berlin")


@pytest.mark.parametrize(
    ("day", "first", "then"),
    [
        # Spring forward: 02:30 does not exist on 2026-03-29; it fires at 03:00 CEST.
        ((2026, 3, 28), "2026-03-29 03:00 CEST", "2026-03-30 02:30 CEST"),
        # Fall back: 02:30 happens twice on 2026-10-25; it fires once, at the first.
        ((2026, 10, 24), "2026-10-25 02:30 CEST", "2026-10-26 02:30 CET"),
    ],
)
async def test_daily_cron_in_berlin_across_a_daylight_saving_change(
    database_url: str, day: tuple[int, int, int], first: str, then: str
) -> None:
    noon = datetime(*day, 12, 0, tzinfo=BERLIN).timestamp()
    clock = ManualClock(wall_offset=noon)
    runs: list[str] = []
    app = server(database_url, clock, runs, schedule_poll_secs=3600.0)
    async with app.running():
        assert app.tick_loop is not None
        ticker = app.tick_loop.ticker
        s = await app.schedules.set(
            "nightly", workflow="tick", cron="30 2 * * *", timezone="Europe/Berlin"
        )
        assert local(s.next_at) == first
        await ticker_idle(app)
        clock.advance(s.next_at - clock.wall() - 1)
        await ticker.fire_due()  # a second early: nothing
        assert (await app.schedules.get("nightly")).fired == 0
        clock.advance(1)
        await ticker.fire_due()
        await ticker.fire_due()  # the same tick again: nothing more
        s2 = await fired(app, "default", 1)
        assert s2.fired == 1 and s2.last_tick_at == s.next_at and local(s2.next_at) == then
        await wait_until(lambda: _ran(runs, 1))
        keys = set(keys_of_runs(database_url).values())
        assert len(keys) == 1 and keys.pop().endswith(f":{round(s.next_at * 1000)}")


async def fired(app: App, tenant: str, n: int) -> Schedule:
    """The only schedule of `tenant` once `n` ticks are recorded started (the test's call of
    the ticker and the ticker's own loop may share the work)."""

    async def done() -> bool:
        return sum(s.fired for s in await app.schedules.list(tenant=tenant)) >= n

    await wait_until(done, timeout=5)
    (only,) = await app.schedules.list(tenant=tenant)
    return only


def local(t: float) -> str:
    return datetime.fromtimestamp(t, BERLIN).strftime("%Y-%m-%d %H:%M %Z")


async def _ran(runs: list[str], n: int) -> bool:
    return len(runs) >= n


@pytest.mark.parametrize("catch_up", ["one", "skip"])
async def test_ticks_missed_while_every_server_was_down_follow_catch_up(
    database_url: str, catch_up: CatchUp
) -> None:
    """A minutely schedule; every server is down for 10 minutes and a new one starts: "one"
    starts one tick for the missed ones, "skip" none; the next tick starts as usual."""
    clock = ManualClock(wall_offset=1_800_000_000.0)
    runs: list[str] = []
    first = server(database_url, clock, runs, schedule_poll_secs=3600.0)
    async with first.running():
        s = await first.schedules.set(
            "minutely",
            workflow="tick",
            every=60,
            catch_up=catch_up,
            tenant="acme",
        )
    clock.advance(s.next_at - clock.wall() + 600 + 5)  # ticks due .. due+540 over the grace
    later = server(database_url, clock, runs, schedule_poll_secs=3600.0)
    async with later.running():
        assert later.tick_loop is not None
        await ticker_idle(later)
        await later.tick_loop.ticker.fire_due()
        s2 = await fired(later, "acme", 1 if catch_up == "skip" else 2)
        late = s.next_at + 600  # passed 5 s ago: late, not missed; started either way
        if catch_up == "one":
            assert s2.fired == 2 and s2.missed == 9  # one start for the 10 missed, and `late`
            expected = {round((late - 60) * 1000), round(late * 1000)}
        else:
            assert s2.fired == 1 and s2.missed == 10
            expected = {round(late * 1000)}
        assert s2.next_at == late + 60
        clock.advance(60)
        await later.tick_loop.ticker.fire_due()
        expected.add(round((late + 60) * 1000))
        await wait_until(lambda: _ran(runs, len(expected)))
        got = {int(k.rsplit(":", 1)[1]) for k in keys_of_runs(database_url).values()}
        assert got == expected
        assert len(runs) == len(expected)


async def test_a_tenant_manages_only_its_own_schedules_in_its_own_sessions(
    database_url: str,
) -> None:
    runs: list[str] = []
    app = server(database_url, ManualClock(), runs, schedule_poll_secs=3600.0)
    async with app.running():
        mine = await app.schedules.set("a", workflow="tick", every=60, principal=ACME)
        assert (mine.tenant, mine.session) == ("acme", "acme")
        await app.schedules.set(
            "b", workflow="tick", every=60, session="acme/nightly", principal=ACME
        )
        await app.schedules.set("a", workflow="tick", every=60, tenant="globex")
        with pytest.raises(Forbidden):
            await app.schedules.set(
                "c", workflow="tick", every=60, session="globex", principal=ACME
            )
        with pytest.raises(Forbidden):
            await app.schedules.set("c", workflow="tick", every=60, tenant="globex", principal=ACME)
        with pytest.raises(Forbidden):
            await app.schedules.get("a", tenant="globex", principal=ACME)
        assert [s.name for s in await app.schedules.list(principal=ACME)] == ["a", "b"]
        assert (await app.schedules.get("a", principal=ACME)).tenant == "acme"
        everyone = await app.schedules.list(principal=OPS)
        assert [(s.tenant, s.name) for s in everyone] == [
            ("acme", "a"),
            ("acme", "b"),
            ("globex", "a"),
        ]
        await app.schedules.delete("a", principal=ACME)  # its own `a`, not globex's
        with pytest.raises(NotFound):
            await app.schedules.get("a", principal=ACME)
        assert (await app.schedules.get("a", tenant="globex", principal=OPS)).tenant == "globex"


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"cron": "61 * * * *"}, BadValue),
        ({"cron": "* * * * *", "timezone": "Nowhere/City"}, BadValue),
        ({"every": 0}, BadValue),
        ({"every": 60, "catch_up": "all"}, BadValue),
        ({"every": 60, "input": {"x": "y" * 70_000}}, BadValue),
        ({"every": 60, "input": {"x": object()}}, BadValue),
        ({"every": 60, "workflow": "nope"}, NotFound),
        ({"every": 60, "name": "a/b"}, BadValue),
        ({"every": 60, "name": ""}, BadValue),
        ({"every": 60, "session": 5}, BadType),
    ],
)
async def test_bad_values_are_refused_and_nothing_is_stored(
    database_url: str, kwargs: dict[str, Any], error: type
) -> None:
    app = server(database_url, ManualClock(), [], schedule_poll_secs=3600.0)
    async with app.running():
        args: dict[str, Any] = {"name": "x", "workflow": "tick", **kwargs}
        name = args.pop("name")
        with pytest.raises(error):
            await app.schedules.set(name, **args)
        assert await app.schedules.list() == []


async def test_a_change_wakes_the_ticker_at_once(database_url: str) -> None:
    """A schedule set while the ticker sleeps (its poll an hour) is fired at its first tick."""
    runs: list[str] = []
    app = server(database_url, FastClock(speed=1), runs, schedule_poll_secs=3600.0)
    async with app.running():
        await asyncio.sleep(0.1)  # the ticker is asleep, no schedule
        await app.schedules.set("soon", workflow="tick", every=1)
        await wait_until(lambda: _ran(runs, 1), timeout=5)


async def test_a_change_made_on_a_peer_wakes_the_ticker(database_url: str) -> None:
    """On PostgreSQL a schedule set through one server wakes every server's ticker at once
    (NOTIFY yoke_schedules; their poll here is an hour); on SQLite, with no NOTIFY, a peer's
    change is found by the poll (here 0.3 s)."""
    poll = 0.3 if database_url.startswith("sqlite:") else 3600.0
    a = server(database_url, ManualClock(), [], schedule_poll_secs=poll)
    b = server(database_url, ManualClock(), [], schedule_poll_secs=3600.0)
    async with a.running(), b.running():
        await ticker_idle(a)
        assert a.tick_loop is not None
        looks = a.tick_loop.looks
        await b.schedules.set("elsewhere", workflow="tick", every=60)

        async def a_looked() -> bool:
            assert a.tick_loop is not None
            return a.tick_loop.looks > looks

        await wait_until(a_looked, timeout=2)


def test_tick_keys_name_the_schedule_and_the_tick() -> None:
    assert tick_key("abc", 1.5) == "yoke-schedule:abc:1500"


async def test_ticks_claimed_by_a_server_that_died_are_started_by_another_once(
    database_url: str,
) -> None:
    """A server claims a tick and dies before starting it: at the claim's deadline a live
    server claims it again and starts it; the dead server's start, had it been sent, would
    have been the same start (the tick's idempotency key)."""
    clock = ManualClock(wall_offset=1_800_000_000.0)
    runs: list[str] = []
    app = server(database_url, clock, runs, schedule_poll_secs=3600.0)
    async with app.running():
        assert app.tick_loop is not None and app._backend is not None
        s = await app.schedules.set("m", workflow="tick", every=60)
        store = app._backend.schedules
        row = await store.get("default", "m")
        assert row is not None
        # The dying server's claim (its clock a little ahead): the tick is decided and
        # `next_at` moved on.
        seq = await store.claim(
            row, next_at=s.next_at + 60, firing=(s.next_at,), until=s.next_at + 10, missed=0
        )
        assert seq is not None
        ticker = app.tick_loop.ticker
        await ticker_idle(app)
        clock.advance(s.next_at + 5 - clock.wall())
        await ticker.fire_due()
        assert runs == []  # before the claim's deadline, nobody else starts it
        clock.advance(5)
        await ticker.fire_due()
        await fired(app, "default", 1)
        await wait_until(lambda: _ran(runs, 1))
        again = await app.executions.start(
            "tick", None, session="default", idempotency_key=tick_key(row.schedule_id, s.next_at)
        )
        assert keys_of_runs(database_url)[runs[0]] == tick_key(row.schedule_id, s.next_at)
        assert again.execution_id == runs[0]  # the late starter gets the same start
        assert len(runs) == 1


async def test_a_schedule_this_server_cannot_read_is_put_off_not_fatal(database_url: str) -> None:
    """A stored schedule whose time zone this server's tz database lacks (another server's was
    newer) is logged and looked at again an hour later; the ticker, and the server, go on."""
    clock = ManualClock(wall_offset=1_800_000_000.0)
    app = server(database_url, clock, [], schedule_poll_secs=3600.0)
    async with app.running():
        assert app.tick_loop is not None and app._backend is not None
        now = clock.wall()
        odd = NewSchedule(
            tenant="acme",
            name="odd",
            schedule_id="odd-1",
            workflow="tick",
            input="null",
            session="acme",
            cron="0 * * * *",
            every=None,
            timezone="Mars/Olympus_Mons",
            catch_up="one",
            updated_by="",
            now=now,
            next_at=now,
        )
        await app._backend.schedules.put(odd, most=10)
        await ticker_idle(app)
        await app.tick_loop.ticker.fire_due()
        row = await app._backend.schedules.get("acme", "odd")
        assert row is not None and row.next_at == now + 3600 and row.fired == 0
        await app.schedules.set("fine", workflow="tick", every=60)  # the ticker still runs
        await ticker_idle(app)
