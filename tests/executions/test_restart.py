"""Restart, resume, replay of recorded steps, and children on their parent's slot."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from yoke.errors import BadValue, Conflict
from yoke.executions import Context, ExecutionStatus, Limits, StartKind, StartStatus

from .helpers import Gates, make_app


async def test_restart_of_a_finished_execution_takes_a_slot_like_a_start(database_url: str) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=1))
    async with app.running():
        ex = app.executions
        first = await ex.start("hold", {"gate": "first"})
        gates.open("first")
        assert first.execution_id is not None
        await ex.wait(first.execution_id, 10)
        gates.gates.pop("first")  # the restart will hold on a fresh gate
        await ex.start("hold", {"gate": "blocker"}, session="other")
        again = await ex.restart(first.execution_id)
        assert again.status is StartStatus.QUEUED and again.kind is StartKind.RESTART
        assert again.execution_id is None and again.source_execution_id == first.execution_id
        gates.open("blocker")
        granted = await ex.wait_granted(again.start_id, 10)
        assert granted.status is StartStatus.GRANTED and granted.execution_id is not None
        gates.open("first")
        new = await ex.wait(granted.execution_id, 10)
        assert new.status is ExecutionStatus.SUCCEEDED
        assert new.restarted_from == first.execution_id and new.input == {"gate": "first"}


async def test_restart_of_a_running_execution_leaves_it_its_slot(database_url: str) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=1))
    async with app.running():
        ex = app.executions
        old = await ex.start("hold", {"gate": "g"})
        assert old.execution_id is not None
        again = await ex.restart(old.execution_id)
        assert again.status is StartStatus.QUEUED
        assert (await ex.get_execution(old.execution_id)).status is ExecutionStatus.RUNNING
        gates.open("g")
        assert (await ex.wait(old.execution_id, 10)).status is ExecutionStatus.SUCCEEDED
        granted = await ex.wait_granted(again.start_id, 10)
        assert granted.status is StartStatus.GRANTED


def stepped_app(
    database_url: str, calls: Counter[str], fail_at: set[str], names: dict[str, str] | None = None
) -> Any:
    app = make_app(database_url, limits=Limits(max_running=1))

    def work(name: str) -> Any:
        calls[name] += 1
        if name in fail_at:
            raise RuntimeError(f"{name} failed")
        return {"done": name}

    @app.workflow()
    async def three(ctx: Context, input: Any) -> Any:
        out = []
        for step in ("one", "two", "three"):
            label = (names or {}).get(step, step)
            out.append(await ctx.step(label, work, step))
        return out

    return app


async def test_resume_reuses_the_recorded_steps(database_url: str) -> None:
    calls: Counter[str] = Counter()
    fail_at = {"two"}
    app = stepped_app(database_url, calls, fail_at)
    async with app.running():
        ex = app.executions
        s = await ex.start("three")
        assert s.execution_id is not None
        failed = await ex.wait(s.execution_id, 10)
        assert failed.status is ExecutionStatus.FAILED and "two failed" in str(failed.error)
        fail_at.clear()
        r = await ex.resume(s.execution_id)
        assert r.status is StartStatus.GRANTED and r.kind is StartKind.RESUME
        assert r.execution_id is not None
        done = await ex.wait(r.execution_id, 10)
        assert done.status is ExecutionStatus.SUCCEEDED and done.resumed_from == s.execution_id
        assert done.output == [{"done": "one"}, {"done": "two"}, {"done": "three"}]
        assert calls == Counter({"one": 1, "two": 2, "three": 1})
        with pytest.raises(Conflict):
            await ex.resume(r.execution_id)  # SUCCEEDED: nothing to resume


async def test_restart_from_a_step_reruns_it_and_what_follows(database_url: str) -> None:
    calls: Counter[str] = Counter()
    app = stepped_app(database_url, calls, set())
    async with app.running():
        ex = app.executions
        s = await ex.start("three")
        assert s.execution_id is not None
        await ex.wait(s.execution_id, 10)
        with pytest.raises(BadValue):
            await ex.restart(s.execution_id, from_step="four")
        r = await ex.restart(s.execution_id, from_step="two")
        assert r.execution_id is not None
        done = await ex.wait(r.execution_id, 10)
        assert done.status is ExecutionStatus.SUCCEEDED
        assert calls == Counter({"one": 1, "two": 2, "three": 2})


async def test_a_replay_that_asks_for_another_step_fails(database_url: str) -> None:
    calls: Counter[str] = Counter()
    names: dict[str, str] = {}
    app = stepped_app(database_url, calls, {"three"}, names)
    async with app.running():
        ex = app.executions
        s = await ex.start("three")
        assert s.execution_id is not None
        await ex.wait(s.execution_id, 10)
        names["two"] = "renamed"
        r = await ex.resume(s.execution_id)
        assert r.execution_id is not None
        e = await ex.wait(r.execution_id, 10)
        assert e.status is ExecutionStatus.FAILED and "ReplayMismatch" in str(e.error)


async def test_a_child_runs_on_its_parents_slot_and_is_not_rerun(database_url: str) -> None:
    runs: Counter[str] = Counter()
    fail = {"parent"}
    app = make_app(database_url, limits=Limits(max_running=1))

    @app.workflow()
    async def child(ctx: Context, input: Any) -> Any:
        runs["child"] += 1
        assert app.store is not None
        assert (await app.store.ledger())["global"] == 1  # no slot of its own
        return input * 2

    @app.workflow()
    async def parent(ctx: Context, input: Any) -> Any:
        got = await ctx.child(child, input)
        if "parent" in fail:
            raise RuntimeError("after the child")
        return got + 1

    async with app.running():
        ex = app.executions
        s = await ex.start(parent, 20)
        assert s.execution_id is not None
        e = await asyncio.wait_for(ex.wait(s.execution_id), 10)
        assert e.status is ExecutionStatus.FAILED
        kids = list((await ex.list(workflow="child")).items)
        assert len(kids) == 1 and kids[0].parent_id == s.execution_id
        assert kids[0].status is ExecutionStatus.SUCCEEDED and kids[0].output == 40
        with pytest.raises(Conflict):
            await ex.restart(kids[0].execution_id)
        fail.clear()
        r = await ex.resume(s.execution_id)
        assert r.execution_id is not None
        done = await ex.wait(r.execution_id, 10)
        assert done.status is ExecutionStatus.SUCCEEDED and done.output == 41
        assert runs["child"] == 1
