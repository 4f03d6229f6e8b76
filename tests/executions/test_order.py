"""Queue order (priority, fewest running per session, oldest head) and per-key caps."""

from __future__ import annotations

import asyncio
import random

import pytest

import yoke
from yoke.errors import Conflict, Forbidden
from yoke.executions import Limits, StartStatus

from .helpers import Gates, make_app

OPERATOR = yoke.Principal("op", ["OPERATOR"])


async def test_priority_goes_first(database_url: str) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=1))
    async with app.running():
        ex = app.executions
        await ex.start("hold", {"gate": "h"}, session="h")
        for gate, prio, session in [("low", 0, "s1"), ("high", 5, "s2"), ("mid", 1, "s3")]:
            s = await ex.start("hold", {"gate": gate}, priority=prio, session=session)
            assert s.status is StartStatus.QUEUED
        for done, expected in [("h", "high"), ("high", "mid"), ("mid", "low")]:
            gates.open(done)
            await gates.started_one(expected)
        gates.open("low")
        assert gates.started == ["h", "high", "mid", "low"]


async def test_the_session_with_fewest_running_goes_first(database_url: str) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=3))
    async with app.running():
        ex = app.executions
        for gate, session in [("a1", "A"), ("a2", "A"), ("c1", "C")]:
            assert (await ex.start("hold", {"gate": gate}, session=session)).status is (
                StartStatus.GRANTED
            )
        a3 = await ex.start("hold", {"gate": "a3"}, session="A")  # older, but A runs 2
        b1 = await ex.start("hold", {"gate": "b1"}, session="B")  # B runs none
        assert (a3.status, b1.status) == (StartStatus.QUEUED, StartStatus.QUEUED)
        assert (a3.position, b1.position) == (1, 2)  # arrival order estimate
        gates.open("c1")
        await gates.started_one("b1")
        assert "a3" not in gates.started
        gates.open("a1")
        await gates.started_one("a3")
        for g in ("a2", "a3", "b1"):
            gates.open(g)


async def test_oldest_head_wins_a_tie(database_url: str) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=1))
    async with app.running():
        ex = app.executions
        await ex.start("hold", {"gate": "h"}, session="H")
        await ex.start("hold", {"gate": "x"}, session="X")
        await ex.start("hold", {"gate": "y"}, session="Y")
        gates.open("h")
        await gates.started_one("x")
        gates.open("x")
        await gates.started_one("y")
        gates.open("y")
        assert gates.started == ["h", "x", "y"]


async def test_set_priority_reorders_a_queued_start_and_is_audited(database_url: str) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=1))
    async with app.running():
        ex = app.executions
        h = await ex.start("hold", {"gate": "h"})
        await ex.start("hold", {"gate": "a"}, session="A")
        b = await ex.start("hold", {"gate": "b"}, session="B")
        with pytest.raises(Forbidden):
            await ex.set_priority(b.start_id, 10, principal=yoke.Principal("nobody"))
        changed = await ex.set_priority(b.start_id, 10, principal=OPERATOR)
        assert changed.priority == 10 and changed.position == 1
        with pytest.raises(Conflict):
            await ex.set_priority(h.start_id, 3, principal=OPERATOR)
        gates.open("h")
        await gates.started_one("b")
        gates.open("b")
        await gates.started_one("a")
        gates.open("a")
        (entry,) = await ex.audit()
        assert (entry.kind, entry.principal, entry.subject) == ("priority", "op", b.start_id)
        assert (entry.before, entry.after) == ({"priority": 0}, {"priority": 10})


async def test_a_full_workflow_cap_does_not_block_other_workflows(database_url: str) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running_per_workflow={"hold": 1}))

    @app.workflow()
    async def other(ctx: yoke.Context, input: object) -> object:
        return input

    async with app.running():
        ex = app.executions
        a = await ex.start("hold", {"gate": "a"})
        b = await ex.start("hold", {"gate": "b"})
        assert (a.status, b.status) == (StartStatus.GRANTED, StartStatus.QUEUED)
        o = await ex.start(other, 1)
        assert o.status is StartStatus.GRANTED
        gates.open("a")
        assert (await ex.wait_granted(b.start_id, 10)).status is StartStatus.GRANTED
        gates.open("b")


async def test_a_session_cap_holds_only_that_session(database_url: str) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running_per_session=1))
    async with app.running():
        ex = app.executions
        a1 = await ex.start("hold", {"gate": "a1"}, session="A")
        a2 = await ex.start("hold", {"gate": "a2"}, session="A")
        b1 = await ex.start("hold", {"gate": "b1"}, session="B")
        assert [s.status for s in (a1, a2, b1)] == [
            StartStatus.GRANTED,
            StartStatus.QUEUED,
            StartStatus.GRANTED,
        ]
        assert app.store is not None
        ledger = await app.store.ledger()
        assert ledger["session:A"] == 1 and ledger["session:B"] == 1 and ledger["global"] == 2
        gates.open("a1")
        assert (await ex.wait_granted(a2.start_id, 10)).status is StartStatus.GRANTED
        gates.open("a2")
        gates.open("b1")


async def test_positions_follow_priority_then_arrival_through_random_changes(
    database_url: str,
) -> None:
    """Every queued start's `position` is its rank by (priority desc, arrival) among the
    queued starts, after random starts, priority changes, cancels and grants."""
    rng = random.Random(7)
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=2))
    async with app.running():
        ex = app.executions
        arrival: dict[str, int] = {}
        priority: dict[str, int] = {}
        queued: set[str] = set()
        for n in range(60):
            action = rng.random()
            if action < 0.5 or not queued:
                st = await ex.start("hold", {"gate": f"g{n}"}, priority=rng.randint(-2, 2))
                arrival[st.start_id], priority[st.start_id] = n, st.priority
                if st.status is StartStatus.QUEUED:
                    queued.add(st.start_id)
            elif action < 0.7:
                sid = rng.choice(sorted(queued))
                priority[sid] = rng.randint(-3, 3)
                await ex.set_priority(sid, priority[sid], principal=OPERATOR)
            elif action < 0.85:
                sid = rng.choice(sorted(queued))
                await ex.cancel_start(sid)
                queued.discard(sid)
            else:  # a running start ends: the next in line is granted
                for name in gates.started:
                    if not gates.gate(name).is_set():
                        gates.open(name)
                        break
                before = len(queued)
                await _until_granted(ex, queued, before)
            expected = sorted(queued, key=lambda s: (-priority[s], arrival[s]))
            got = {s: (await ex.get(s)).position for s in queued}
            assert got == {s: i + 1 for i, s in enumerate(expected)}, n
        for name in list(gates.gates):
            gates.open(name)


async def _until_granted(ex: yoke.executions.Executions, queued: set[str], before: int) -> None:
    for _ in range(500):
        for sid in list(queued):
            if (await ex.get(sid)).status is not StartStatus.QUEUED:
                queued.discard(sid)
        if len(queued) < before or not queued:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no queued start was granted after a slot freed")
