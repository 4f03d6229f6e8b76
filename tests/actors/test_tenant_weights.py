"""Tenant weights stored in the database (`app.tenants`) and applied live by the drain: with
three tenants backlogged, a worker's starts follow weights 1:2:4; changes are ADMIN-only,
bounded, reviewed and audited, and a failed change leaves the stored settings as they were.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest

import yoke
from tests.actors.conftest import FAST, wait_for
from yoke.actors import ActorSettings, Event, Queue
from yoke.config import Settings
from yoke.errors import BadType, BadValue, Conflict, Forbidden, Vetoed
from yoke.executions import Principal

ADMIN = Principal("root", roles={"ADMIN"})
WEIGHTS = {"a": 1, "b": 2, "c": 4}
SLOTS = 4
BACKLOG = 300  # events per tenant: c, the heaviest, drains after ~525 starts
MEASURED = 280  # starts counted, all three tenants backlogged throughout


def app_for(url: str, **settings: object) -> yoke.App:
    values: dict[str, Any] = {**FAST, "concurrency": SLOTS, **settings}
    return yoke.App(
        settings=Settings(database_url=url),
        actor_settings=ActorSettings(worker_id="w1", **values),
    )


async def test_weights_set_live_share_the_worker(app_url: str) -> None:
    app = app_for(app_url)
    starts: list[tuple[float, str]] = []
    since = float("inf")  # when the weights were set
    warm, enough = asyncio.Event(), asyncio.Event()

    @app.actor(subscribe=["s"], key="k", queue=Queue(concurrency=1000))
    async def work(ctx: yoke.ActorCtx, event: Event) -> None:
        now = time.monotonic()
        starts.append((now, ctx.tenant))
        if len(starts) == 30:
            warm.set()
        if sum(1 for t, _ in starts[-MEASURED:] if t > since) >= MEASURED:
            enough.set()
        await asyncio.sleep(0.005)

    async with app.running():
        # Equal weights first: the three tenants start evenly.
        for tenant in WEIGHTS:
            rows = [{"k": f"{tenant}{i % 50}"} for i in range(BACKLOG)]
            await app.append_many("s", rows, tenant=tenant)
        await wait_for(warm)
        for tenant, weight in WEIGHTS.items():
            await app.tenants.set_weight(tenant, weight, principal=ADMIN)
        since = time.monotonic()
        await wait_for(enough, 60)
    after = [tenant for t, tenant in starts if t > since][:MEASURED]
    shares = {t: n / len(after) for t, n in Counter(after).items()}
    total = sum(WEIGHTS.values())
    for tenant, weight in WEIGHTS.items():
        # Within 5 points of the ideal share (1/7, 2/7, 4/7); equal weights give 1/3 each.
        assert abs(shares.get(tenant, 0.0) - weight / total) <= 0.05, shares
    stored = {s.tenant: s.weight for s in await list_settings(app_url)}
    assert stored == {t: float(w) for t, w in WEIGHTS.items()}


async def test_a_heavy_tenant_holds_the_rows_of_its_share_with_a_shallow_claim(
    app_url: str,
) -> None:
    # With claim_depth 1 a worker holds about two rounds of its slots (16 rows for 8 slots).
    # Windows by weight let the heavy tenant hold 12 of them and run its 6 of 8 slots; equal
    # windows (4 rows each) would hold it to 4 running, half the slots.
    weights = {"heavy": 9, "l1": 1, "l2": 1, "l3": 1}
    setup = app_for(app_url)
    async with setup.running():
        await setup.tenants.set_weight("heavy", weights["heavy"], principal=ADMIN)
    app = app_for(app_url, concurrency=8, claim_depth=1)
    warm, measured = 40, 240
    starts: list[str] = []
    enough = asyncio.Event()

    @app.actor(subscribe=["s"], key="k", queue=Queue(concurrency=1000))
    async def work(ctx: yoke.ActorCtx, event: Event) -> None:
        starts.append(ctx.tenant)
        if len(starts) == warm + measured:
            enough.set()
        # Long enough that a claim's round trip on a loaded machine (several ms) stays small
        # beside it: at 20 ms the heavy tenant's share fell to 0.66-0.70 at a load of 8.
        await asyncio.sleep(0.05)

    async with app.running():
        for tenant in ("l1", "l2", "l3", "heavy"):
            n = 400 if tenant == "heavy" else 150  # every tenant backlogged throughout
            rows = [{"k": f"{tenant}{i % 50}"} for i in range(n)]
            await app.append_many("s", rows, tenant=tenant)
        await wait_for(enough, 60)
    counted = Counter(starts[warm : warm + measured])
    shares = {t: counted[t] / measured for t in weights}
    total = sum(weights.values())
    for tenant, weight in weights.items():
        assert abs(shares[tenant] - weight / total) <= 0.05, shares


async def list_settings(url: str) -> list[yoke.executions.tenants.TenantSettings]:
    app = app_for(url)
    async with app.running():
        return await app.tenants.list(principal=ADMIN)


async def test_changes_are_admin_only_bounded_reviewed_and_audited(app_url: str) -> None:
    app = app_for(app_url)
    vetoes: list[str] = []
    app.add_reviewer(lambda change: "no" if change.subject in vetoes else None)
    async with app.running():
        acme = Principal("acme-bot", roles=(), tenant="acme")
        operator = Principal("op", roles={"OPERATOR"})
        with pytest.raises(Forbidden):
            await app.tenants.set_weight("acme", 5, principal=acme)
        with pytest.raises(Forbidden):
            await app.tenants.set_weight("acme", 5, principal=operator)
        for bad in (0, -1, 1e9, float("nan")):
            with pytest.raises(BadValue):
                await app.tenants.set_weight("acme", bad, principal=ADMIN)
        with pytest.raises(BadType):
            await app.tenants.set_weight("acme", "5", principal=ADMIN)  # type: ignore[arg-type]
        with pytest.raises(BadValue):
            await app.tenants.set_max_running("acme", 0, principal=ADMIN)
        with pytest.raises(BadValue):
            await app.tenants.set("acme", principal=ADMIN)  # nothing to change
        vetoes.append("globex")
        with pytest.raises(Vetoed):
            await app.tenants.set_weight("globex", 3, principal=ADMIN)
        vetoes.clear()
        # Nothing above was stored.
        assert await app.tenants.list(principal=ADMIN) == []
        got = await app.tenants.set("acme", weight=3, actors={"max_running": 2}, principal=ADMIN)
        assert (got.weight, got.max_running, got.updated_by) == (3.0, 2, "root")
        got = await app.tenants.set_max_running("acme", None, principal=ADMIN)
        assert (got.weight, got.max_running) == (3.0, None)  # the weight is kept
        await app.tenants.set_weight("globex", 2, principal=Principal("r2", roles={"ADMIN"}))
        # A plain tenant reads only its own row; an operator reads all.
        assert [s.tenant for s in await app.tenants.list(principal=acme)] == ["acme"]
        with pytest.raises(Forbidden):
            await app.tenants.get("globex", principal=acme)
        assert [s.tenant for s in await app.tenants.list(principal=operator)] == [
            "acme",
            "globex",
        ]
        assert (await app.tenants.get("initech", principal=operator)).weight is None  # not set
        audit = [e for e in await app.executions.audit(limit=100) if e.kind == "tenant"]
    assert [(e.principal, e.subject, e.after["weight"], e.after["actors"]["max_running"])
            for e in audit[-3:]] == [
        ("root", "acme", 3.0, 2),
        ("root", "acme", 3.0, None),
        ("r2", "globex", 2.0, None),
    ]  # fmt: skip
    assert (audit[-3].before["weight"], audit[-3].before["actors"]["max_running"]) == (None, None)


async def test_two_changes_decided_on_the_same_row_never_both_land(app_url: str) -> None:
    app = app_for(app_url)
    both_read = asyncio.Event()
    reviewing = 0

    async def slow_reviewer(change: object) -> None:
        nonlocal reviewing
        reviewing += 1
        if reviewing == 2:
            both_read.set()
        await wait_for(both_read)  # each change has read the row before either writes

    app.add_reviewer(slow_reviewer)
    async with app.running():
        got = await asyncio.gather(
            app.tenants.set_weight("race-co", 5, principal=ADMIN),
            app.tenants.set_max_running("race-co", 2, principal=ADMIN),
            return_exceptions=True,
        )
        refused = [g for g in got if isinstance(g, Conflict)]
        landed = [g for g in got if not isinstance(g, BaseException)]
        assert len(refused) == 1 and len(landed) == 1, got
        stored = await app.tenants.get("race-co", principal=ADMIN)
        audit = [e for e in await app.executions.audit(limit=1000) if e.subject == "race-co"]
    # The stored row is the winner's alone (not a blend of both), and one entry is audited.
    assert (stored.weight, stored.max_running) == (landed[0].weight, landed[0].max_running)
    assert len(audit) == 1


@pytest.mark.postgres
async def test_a_change_made_elsewhere_reaches_a_worker_at_once(pg_url: str) -> None:
    """On PostgreSQL a change is pushed (NOTIFY yoke_tenant_settings): a worker whose backup
    poll is ten minutes away applies a weight and a cap set through another process's app."""
    from tests.actors.conftest import truncate_actor_tables

    truncate_actor_tables(pg_url)
    worker = app_for(pg_url, tenant_settings_poll=600.0)

    @worker.actor(subscribe=["s"], key="k")
    async def work(ctx: yoke.ActorCtx, event: Event) -> None:
        return None

    elsewhere = yoke.App(settings=Settings(database_url=pg_url))
    async with worker.running(), elsewhere.running():
        drain = worker.actors._drain
        assert drain is not None
        rules = drain._rules
        await rules.ready.wait()
        assert rules.weights == {} and rules.caps == {}
        await elsewhere.tenants.set_weight("a", 3.0, principal=ADMIN)
        await elsewhere.tenants.set_max_running("b", 2, principal=ADMIN)
        deadline = time.monotonic() + 5
        while (rules.weights, rules.caps) != ({"a": 3.0}, {"b": 2}):
            assert time.monotonic() < deadline, (rules.weights, rules.caps)
            await asyncio.sleep(0.02)  # the worker's listener runs on this loop
