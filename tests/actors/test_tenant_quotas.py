"""Quotas on what a tenant makes, on both stores: `actors.max_instances` refuses the append that
would create one instance too many, `actors.max_timers` the schedule that would hold one timer
too many (QuotaExceeded, and the batch writes nothing); a timer fired gives its place back; a
timer already accepted is fired whatever the quota; another tenant is never refused for it;
`*` gives the quota to every tenant without its own; and the counts stay exact under racing
appends on PostgreSQL."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import yoke
from tests.actors.conftest import FAST
from yoke.actors import ActorSettings, Event
from yoke.config import Settings
from yoke.errors import QuotaExceeded
from yoke.executions import Principal

ADMIN = Principal("root", roles={"ADMIN"})


def app_for(url: str) -> yoke.App:
    app = yoke.App(
        settings=Settings(database_url=url),
        actor_settings=ActorSettings(worker_id="w1", **FAST),
        actor_worker=False,  # nothing drains: what is held stays held
    )

    @app.actor(subscribe=["carts"], key="cart_id")
    async def cart(ctx: yoke.ActorCtx, event: Event) -> None:
        return None

    return app


def instances(url: str, tenant: str) -> int:
    from tests.executions.helpers import count_rows

    return count_rows(url, "actor_instances", f"tenant = '{tenant}'")


async def held(app: yoke.App, tenant: str, kind: str) -> int:
    store: Any = app.actors.store()
    counts: dict[str, int] = await store.tenants.held(tenant)
    return counts.get(kind, 0)


async def test_max_instances_refuses_the_append_that_would_pass_it(app_url: str) -> None:
    app = app_for(app_url)
    async with app.running():
        await app.tenants.set("acme", actors={"max_instances": 3}, principal=ADMIN)
        await app.append_many("carts", [{"cart_id": f"c{i}"} for i in range(2)], tenant="acme")
        # Two new ones would make 4: the whole batch is refused, c2 included.
        with pytest.raises(QuotaExceeded) as refused:
            await app.append_many("carts", [{"cart_id": "c2"}, {"cart_id": "c3"}], tenant="acme")
        assert "max_instances" in str(refused.value) and "acme" in str(refused.value)
        assert instances(app_url, "acme") == 2
        await app.append("carts", {"cart_id": "c0"}, tenant="acme")  # an existing one: fine
        await app.append("carts", {"cart_id": "c2"}, tenant="acme")  # the third
        with pytest.raises(QuotaExceeded):
            await app.append("carts", {"cart_id": "c9"}, tenant="acme")
        # Another tenant is not refused for acme's quota; `*` gives every tenant one.
        await app.append_many("carts", [{"cart_id": f"g{i}"} for i in range(10)], tenant="globex")
        await app.tenants.set("*", actors={"max_instances": 11}, principal=ADMIN)
        await app.append("carts", {"cart_id": "g10"}, tenant="globex")
        with pytest.raises(QuotaExceeded):
            await app.append("carts", {"cart_id": "g11"}, tenant="globex")
        assert (instances(app_url, "acme"), instances(app_url, "globex")) == (3, 11)
        assert await held(app, "acme", "instances") == 3
        assert await held(app, "globex", "instances") == 11


async def test_max_timers_refuses_the_schedule_and_a_fired_timer_gives_its_place_back(
    app_url: str,
) -> None:
    app = app_for(app_url)
    async with app.running():
        await app.tenants.set("acme", actors={"max_timers": 2}, principal=ADMIN)
        rt = app.actors
        now = time.time()
        await rt.schedule_many("carts", [({"cart_id": "a"}, now + 600)], tenant="acme")
        with pytest.raises(QuotaExceeded) as refused:
            await rt.schedule_many(
                "carts", [({"cart_id": "b"}, now + 0.2), ({"cart_id": "c"}, now + 600)],
                tenant="acme",
            )  # fmt: skip
        assert "max_timers" in str(refused.value)
        assert await held(app, "acme", "timers") == 1
        await rt.schedule("carts", {"cart_id": "b"}, tenant="acme", fire_at=now + 0.2)
        with pytest.raises(QuotaExceeded):
            await rt.schedule("carts", {"cart_id": "c"}, tenant="acme", fire_at=now + 600)
        # The timers fire on a worker (this app runs none): fire the due one as a worker does.
        due = [t for t in await rt.store().upcoming_timers(limit=10) if t.tenant == "acme"]
        soon = [t for t in due if t.fire_at_ms <= (now + 1) * 1000]
        await asyncio.sleep(0.3)
        events = [
            (t.timer_id, rt.registry.new_events(t.stream, [{"cart_id": "b"}], tenant=t.tenant)[0])
            for t in soon
        ]
        assert await rt.store().fire_timers(events, owner=None, now=time.time()) == [
            t.timer_id for t in soon
        ]
        assert await held(app, "acme", "timers") == 1
        await rt.schedule("carts", {"cart_id": "c"}, tenant="acme", fire_at=now + 600)
        assert await held(app, "acme", "timers") == 2


async def test_a_timer_accepted_is_fired_whatever_the_instance_quota(app_url: str) -> None:
    """A fire batch carries every tenant's due timers: a tenant at its instance quota whose
    timer would make a new instance must not hold back the batch (nor anyone's timers)."""
    app = app_for(app_url)
    async with app.running():
        rt = app.actors
        now = time.time()
        await rt.schedule("carts", {"cart_id": "new"}, tenant="acme", fire_at=now)
        await rt.schedule("carts", {"cart_id": "x"}, tenant="globex", fire_at=now)
        await app.tenants.set("acme", actors={"max_instances": 0}, principal=ADMIN)
        due = await rt.store().upcoming_timers(limit=10)
        events = [
            (
                t.timer_id,
                rt.registry.new_events(t.stream, [{"cart_id": t.tenant}], tenant=t.tenant)[0],
            )
            for t in due
        ]
        fired = await rt.store().fire_timers(events, owner=None, now=time.time())
        assert sorted(fired) == sorted(t.timer_id for t in due)
        assert instances(app_url, "acme") == 1  # counted, not refused
        with pytest.raises(QuotaExceeded):
            await app.append("carts", {"cart_id": "other"}, tenant="acme")


@pytest.mark.postgres
async def test_racing_appends_never_pass_the_quota(pg_url: str) -> None:
    """Twenty appends racing on their own connections, each making a new instance of one
    tenant under a quota of 7: exactly 7 land, the others are refused, and the count says 7."""
    from tests.actors.conftest import truncate_actor_tables

    truncate_actor_tables(pg_url)
    app = app_for(pg_url)
    async with app.running():
        await app.tenants.set("acme", actors={"max_instances": 7}, principal=ADMIN)
        got = await asyncio.gather(
            *(app.append("carts", {"cart_id": f"c{i}"}, tenant="acme") for i in range(20)),
            return_exceptions=True,
        )
        refused = [g for g in got if isinstance(g, QuotaExceeded)]
        assert len(refused) == 13 and all(isinstance(g, int) for g in got if g not in refused)
        assert instances(pg_url, "acme") == 7
        assert await held(app, "acme", "instances") == 7
