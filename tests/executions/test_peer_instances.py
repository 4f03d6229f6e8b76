"""Two instances on one database: a runtime limit change made on one, and an instance declared
dead by its peer while it still runs an execution. Both apps run in this process (each has its
own store, kernel and instance id), which is all another process would have in common."""

from __future__ import annotations

import time

import pytest

from yoke.executions import ADMIN, Limits, Principal, StartStatus

from .helpers import Gates, make_app, wait_until

ADMIN_P = Principal(name="root", roles=frozenset({ADMIN}))


@pytest.mark.parametrize(
    "after_its_heartbeat",
    [
        True,
        pytest.param(
            False,
            marks=pytest.mark.xfail(
                strict=True,
                reason="a peer applies a limit change at its next heartbeat; until then it "
                "grants under its own (older) caps: the caps are not in the ledger",
            ),
        ),
    ],
)
async def test_a_limit_lowered_on_one_instance_holds_on_its_peer(
    database_url: str, after_its_heartbeat: bool
) -> None:
    gates = Gates()
    a = make_app(database_url, gates, limits=Limits(max_running=5))
    b = make_app(database_url, gates, limits=Limits(max_running=5))
    async with a.running(), b.running():
        await a.executions.set_limits(Limits(max_running=1), principal=ADMIN_P)
        if after_its_heartbeat:

            async def b_follows() -> bool:
                return await b.executions.limits() == Limits(max_running=1)

            await wait_until(b_follows, timeout=5)  # at B's next heartbeat (0.2 s here)
        first = await a.executions.start("hold", {"gate": "x"})
        assert first.status is StartStatus.GRANTED
        # The limit is global (one ledger): a peer must not grant a second execution.
        second = await b.executions.start("hold", {"gate": "x"})
        try:
            assert second.status is StartStatus.QUEUED
        finally:
            gates.open("x")


async def test_an_instance_declared_dead_stops_what_its_peer_aborted(database_url: str) -> None:
    gates = Gates()
    a = make_app(database_url, gates, limits=Limits(max_running=1))
    b = make_app(database_url, gates, limits=Limits(max_running=1))
    async with a.running(), b.running():
        assert a.store is not None and b.store is not None
        assert a.instance_id is not None and b.instance_id is not None
        a_id = a.instance_id
        first = await a.executions.start("hold", {"gate": "a"})
        assert first.status is StartStatus.GRANTED
        await gates.started_one("a")
        # A's heartbeats lapse (a pause longer than `instance_stale_after`): B recovers A.
        now = time.time()
        rec = await b.store.recover_dead(stale_before=now + 3600, now=now, exclude=b.instance_id)
        assert a.instance_id in rec.instances
        # A hears of it at its next heartbeat (0.2s): what B aborted must stop running in A.
        store_a = a.store

        async def a_reregistered() -> bool:
            return await store_a.heartbeat(a_id, now=time.time())

        await wait_until(a_reregistered, timeout=5)
        try:
            await wait_until(
                lambda: _no_runs(a),
                timeout=3,
            )
        finally:
            gates.open("a")


async def _no_runs(app: object) -> bool:
    from yoke.app import App

    assert isinstance(app, App)
    return app.executions.stats().executions == 0
