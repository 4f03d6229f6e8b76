"""Runtime changes: roles, reviewers, the control log, and limits re-applied at boot."""

from __future__ import annotations

from typing import Any

import pytest

import yoke
from yoke.errors import Forbidden, Vetoed
from yoke.executions import Change, Limits, StartStatus

from .helpers import Gates, make_app

ADMIN = yoke.Principal("root", ["ADMIN"], tenant="ops")
OPERATOR = yoke.Principal("op", ["OPERATOR"])


async def test_roles_are_required(database_url: str) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=1))
    async with app.running():
        ex = app.executions
        await ex.start("hold", {"gate": "a"})
        b = await ex.start("hold", {"gate": "b"})
        with pytest.raises(Forbidden):
            await ex.set_limits(Limits(max_running=5), principal=OPERATOR)
        with pytest.raises(Forbidden):
            await ex.set_limits(Limits(), principal=None)  # type: ignore[arg-type]
        with pytest.raises(Forbidden):
            await ex.set_priority(b.start_id, 1, principal=yoke.Principal("x", ["VIEWER"]))
        assert await ex.limits() == Limits(max_running=1)
        assert await ex.audit() == []
        # ADMIN may also re-prioritise.
        assert (await ex.set_priority(b.start_id, 2, principal=ADMIN)).priority == 2
        gates.open("a")
        gates.open("b")


async def test_reviewers_can_veto_and_then_nothing_changes(database_url: str) -> None:
    seen: list[Change] = []
    app = make_app(database_url)

    def no_big_limits(change: Change) -> str | None:
        seen.append(change)
        if change.kind == "limits" and (change.after["max_running"] or 0) > 10:
            return "max_running above 10 needs a change request"
        return None

    async def async_reviewer(change: Change) -> str | None:
        return "frozen" if change.after.get("on_limit") == "reject" else None

    app.add_reviewer(no_big_limits)
    app.add_reviewer(async_reviewer)
    async with app.running():
        ex = app.executions
        with pytest.raises(Vetoed, match="change request") as info:
            await ex.set_limits(Limits(max_running=50), principal=ADMIN)
        assert info.value.reason == "max_running above 10 needs a change request"
        assert isinstance(info.value, Forbidden)
        with pytest.raises(Vetoed, match="frozen"):
            await ex.set_limits(Limits(max_running=5, on_limit="reject"), principal=ADMIN)
        assert await ex.limits() == Limits()
        assert await ex.audit() == []
        await ex.set_limits(Limits(max_running=5), principal=ADMIN)
        assert await ex.limits() == Limits(max_running=5)
        assert seen[0].principal == ADMIN and seen[0].before["max_running"] is None
        (entry,) = await ex.audit()
        assert (entry.kind, entry.principal, entry.tenant, entry.roles) == (
            "limits",
            "root",
            "ops",
            ("ADMIN",),
        )
        assert entry.before["max_running"] is None and entry.after["max_running"] == 5
        assert entry.at > 0


async def test_the_newest_recorded_limits_win_over_configuration_at_boot(database_url: str) -> None:
    first = make_app(database_url, limits=Limits(max_running=7))
    async with first.running():
        await first.executions.set_limits(Limits(max_running=2), principal=ADMIN)
        await first.executions.set_limits(Limits(max_running=1), principal=ADMIN)
    gates = Gates()
    second = make_app(database_url, gates, limits=Limits(max_running=7))
    async with second.running():
        ex = second.executions
        assert await ex.limits() == Limits(max_running=1)
        a = await ex.start("hold", {"gate": "a"})
        b = await ex.start("hold", {"gate": "b"})
        assert (a.status, b.status) == (StartStatus.GRANTED, StartStatus.QUEUED)
        gates.open("a")
        gates.open("b")
    assert [e.after["max_running"] for e in await _audit(database_url)] == [2, 1]


async def test_raising_a_limit_admits_queued_starts(database_url: str) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=1))
    async with app.running():
        ex = app.executions
        await ex.start("hold", {"gate": "a"})
        b = await ex.start("hold", {"gate": "b"})
        assert b.status is StartStatus.QUEUED
        await ex.set_limits(Limits(max_running=2), principal=ADMIN)
        assert (await ex.wait_granted(b.start_id, 10)).status is StartStatus.GRANTED
        gates.open("a")
        gates.open("b")


async def test_a_session_limit_set_at_runtime_holds_the_sessions_already_there(
    database_url: str,
) -> None:
    """A per-session limit set while a session has starts running and queued applies to that
    session at once: its queued start waits, blocked by its session (not sent to the ledger
    again and again to be told FULL), while another session's start is granted."""
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running_per_workflow=1))
    async with app.running():
        ex = app.executions
        a = await ex.start("hold", {"gate": "a"}, session="s")
        b = await ex.start("hold", {"gate": "b"}, session="s")
        assert (a.status, b.status) == (StartStatus.GRANTED, StartStatus.QUEUED)
        assert ex.kernel.blocked_by(b.start_id) == ("workflow", "hold")
        await ex.set_limits(Limits(max_running_per_session=1), principal=ADMIN)
        assert ex.kernel.blocked_by(b.start_id) == ("lane", "s")
        c = await ex.start("hold", {"gate": "c"}, session="t")
        assert c.status is StartStatus.GRANTED
        for name in "abc":
            gates.open(name)


async def _audit(database_url: str) -> list[Any]:
    app = make_app(database_url)
    async with app.running():
        return await app.executions.audit()
