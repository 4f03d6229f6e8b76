"""Tenants in admission, on both stores: a start's tenant (the principal's, a trusted caller's
`tenant=` or session), a tenant's `executions.max_running` across all its sessions, its queue
bound refusing that tenant alone, its start rate (429 with when a token will be there), `*`
as every tenant's defaults, and a ledger that keeps no row per session ever seen."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from yoke.app import App
from yoke.errors import BadValue, Forbidden, LimitExceeded, RateLimited
from yoke.executions import ExecutionStatus, Limits, Principal, StartStatus

from .helpers import Gates, count_rows, fast_settings, make_app, wait_until

ADMIN = Principal("root", roles=["ADMIN"])


async def test_a_starts_tenant_is_its_principals_else_the_trusted_callers(
    database_url: str,
) -> None:
    gates = Gates()
    app = make_app(database_url, gates)
    async with app.running():
        ex = app.executions
        acme = Principal("acme-ci", tenant="acme")
        mine = await ex.start("hold", {"gate": "g"}, session="acme/cart", principal=acme)
        assert mine.tenant == "acme"
        # A trusted caller: the session's first segment, or an explicit tenant.
        assert (await ex.start("hold", {"gate": "g"}, session="globex/x")).tenant == "globex"
        named = await ex.start("hold", {"gate": "g"}, session="shared", tenant="initech")
        assert named.tenant == "initech"
        ops = Principal("ops", roles=["OPERATOR"])
        assert (await ex.start("hold", {"gate": "g"}, session="umbrella", principal=ops)).tenant
        with pytest.raises(Forbidden):  # a principal bound to a tenant starts in its own only
            await ex.start("hold", {"gate": "g"}, session="acme", principal=acme, tenant="other")
        for bad in ("*", "a/b", ""):
            with pytest.raises(BadValue):
                await ex.start("hold", {"gate": "g"}, session="s", tenant=bad)
        with pytest.raises(BadValue):
            await ex.start("hold", {"gate": "g"}, session="*/x")
        # Stored with the start and its execution, and listed by it.
        assert mine.execution_id is not None
        assert (await ex.get_execution(mine.execution_id)).tenant == "acme"
        assert (await ex.get(named.start_id)).tenant == "initech"
        page = await ex.list(tenant="initech")
        assert [e.tenant for e in page.items] == ["initech"]
        gates.open("g")


async def test_a_tenants_cap_holds_across_all_its_sessions(database_url: str) -> None:
    """Six starts of one tenant in six sessions under its executions.max_running of 2: two
    run, the rest wait (another tenant's start is not held by it), and as each ends the next
    of the tenant goes, never more than two at once."""
    gates = Gates()
    app = make_app(database_url, gates)
    async with app.running():
        await app.tenants.set("acme", executions={"max_running": 2}, principal=ADMIN)
        ex = app.executions
        starts = [await ex.start("hold", {"gate": f"a{i}"}, session=f"acme/s{i}") for i in range(6)]
        assert [s.status for s in starts].count(StartStatus.GRANTED) == 2
        other = await ex.start("hold", {"gate": "g"}, session="globex")
        assert other.status is StartStatus.GRANTED
        assert app.store is not None
        assert (await app.store.ledger())["tenant:acme"] == 2
        running_most = 0
        for _ in range(6):
            running = [g for g in gates.started if g.startswith("a") and not gates.gate(g).is_set()]
            running_most = max(running_most, len(running))
            assert len(running) <= 2, running
            gates.open(running[0])

            async def next_one(before: int = len(gates.started)) -> bool:
                return len(gates.started) > before or len(gates.started) >= 7

            await wait_until(next_one)
        assert running_most == 2
        gates.open("g")


async def test_the_queue_bound_refuses_that_tenant_alone(database_url: str) -> None:
    """`*` gives every tenant a queue of 2: the flooding tenant's third waiting start is
    refused (LimitExceeded with a retry estimate) while another tenant's start still waits
    its turn and is granted; the shared queue was never full for it."""
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=1))
    async with app.running():
        await app.tenants.set("*", executions={"max_queued": 2}, principal=ADMIN)
        ex = app.executions
        held = await ex.start("hold", {"gate": "slot"}, session="evil/0")
        assert held.status is StartStatus.GRANTED
        waiting = [await ex.start("hold", {"gate": "e"}, session=f"evil/{i}") for i in (1, 2)]
        assert all(s.status is StartStatus.QUEUED for s in waiting)
        with pytest.raises(LimitExceeded) as refused:
            await ex.start("hold", {"gate": "e"}, session="evil/3")
        assert "tenant 'evil'" in str(refused.value) and "max_queued" in str(refused.value)
        assert refused.value.retry_after is not None and refused.value.retry_after > 0
        light = await ex.start("hold", {"gate": "l"}, session="acme")
        assert light.status is StartStatus.QUEUED  # in line, not refused
        gates.open("slot")
        gates.open("e")
        gates.open("l")
        granted = await ex.wait_granted(light.start_id, timeout=10)
        assert granted.status is StartStatus.GRANTED


async def test_star_defaults_apply_and_a_tenants_own_value_wins(database_url: str) -> None:
    gates = Gates()
    app = make_app(database_url, gates)
    async with app.running():
        await app.tenants.set("*", executions={"max_running": 1}, principal=ADMIN)
        await app.tenants.set("acme", executions={"max_running": 3}, principal=ADMIN)
        ex = app.executions
        acme = [await ex.start("hold", {"gate": "g"}, session=f"acme/{i}") for i in range(4)]
        globex = [await ex.start("hold", {"gate": "g"}, session=f"globex/{i}") for i in range(3)]
        assert [s.status for s in acme].count(StartStatus.GRANTED) == 3  # its own cap
        assert [s.status for s in globex].count(StartStatus.GRANTED) == 1  # the default
        # Clearing its own value: the default applies to its next start.
        await app.tenants.set("acme", executions={"max_running": None}, principal=ADMIN)
        assert ex.tenants.executions("acme").max_running == 1
        gates.open("g")


async def test_a_tenants_start_rate_refuses_with_when_a_token_is_there(
    database_url: str,
) -> None:
    """executions.rate 2/s with a burst of 2: two starts go at once, the third is refused
    before anything is written (RateLimited, retry_after up to half a second); another tenant
    is not slowed; once the token is there, the next start goes."""
    app = make_app(database_url)

    @app.workflow()
    async def quick(ctx: Any, input: Any) -> Any:
        return input

    async with app.running():
        await app.tenants.set("acme", executions={"rate": 2, "burst": 2}, principal=ADMIN)
        ex = app.executions
        for i in range(2):
            assert (await ex.start("quick", i, session="acme")).status is StartStatus.GRANTED
        before = count_rows(database_url, "yoke_starts")
        with pytest.raises(RateLimited) as refused:
            await ex.start("quick", 3, session="acme")
        wait = refused.value.retry_after
        assert wait is not None and 0 < wait <= 0.51, wait
        assert count_rows(database_url, "yoke_starts") == before  # nothing written
        for i in range(5):  # another tenant: no rate
            assert (await ex.start("quick", i, session="globex")).status is StartStatus.GRANTED
        await asyncio.sleep(wait)
        assert (await ex.start("quick", 4, session="acme")).status is StartStatus.GRANTED


async def test_the_ledger_keeps_no_row_per_session_ever_seen(database_url: str) -> None:
    """Starts in 200 sessions of their own, each ended: every ledger row went back to zero
    and is gone, so the ledger does not grow with the names callers invent."""
    app = make_app(database_url)

    @app.workflow()
    async def quick(ctx: Any, input: Any) -> Any:
        return input

    async with app.running():
        ex = app.executions
        starts = await asyncio.gather(
            *(ex.start("quick", i, session=f"t{i % 7}/s{i}") for i in range(200))
        )
        for s in starts:
            assert s.execution_id is not None
            assert (await ex.wait(s.execution_id, 10)).status is ExecutionStatus.SUCCEEDED

        async def settled() -> bool:
            return count_rows(database_url, "yoke_ledger") == 0

        await wait_until(settled)


@pytest.mark.postgres
async def test_a_change_made_by_another_server_applies_at_once(pg_url: str) -> None:
    """On PostgreSQL a change is pushed (NOTIFY): a server whose backup poll is ten minutes
    away applies a tenant cap set through another server's app, and its queued start goes
    when the cap is raised."""
    from tests.conftest import _truncate
    from yoke.actors import ActorSettings

    _truncate(pg_url)
    gates = Gates()
    here = App(
        settings=fast_settings(pg_url),
        actor_settings=ActorSettings(worker_id="w", tenant_settings_poll=600.0),
    )
    here.workflow("hold")(gates.hold)
    elsewhere = make_app(pg_url)
    async with here.running(), elsewhere.running():
        await elsewhere.tenants.set("acme", executions={"max_running": 1}, principal=ADMIN)
        deadline = time.monotonic() + 5
        while here.executions.tenants.executions("acme").max_running != 1:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        first = await here.executions.start("hold", {"gate": "g"}, session="acme/1")
        second = await here.executions.start("hold", {"gate": "g"}, session="acme/2")
        assert (first.status, second.status) == (StartStatus.GRANTED, StartStatus.QUEUED)
        await elsewhere.tenants.set("acme", executions={"max_running": 2}, principal=ADMIN)
        granted = await here.executions.wait_granted(second.start_id, timeout=5)
        assert granted.status is StartStatus.GRANTED
        gates.open("g")
