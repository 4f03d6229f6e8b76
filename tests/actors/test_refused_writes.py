"""A write of a claimed row that the store refuses for good (not an outage) is not retried
forever: the event becomes a dead letter whose error is the refusal, and its group's slot is
freed, so the rest of its group runs (`actors/refusals.py`, `errors.TRANSIENT`).

The refusal is the database's own (`tests/refusals.py`): a trigger on `actor_queues` refuses an
update whose error text carries a marker, or the delete (the completion) of an event whose data
carries another, as a CHECK would, on both backends.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from tests.actors.conftest import MakeRuntime, open_actor_store
from tests.executions.helpers import wait_until
from tests.refusals import Refusal, refusing
from yoke.actors import ActorCtx, Backoff, Event
from yoke.actors.protocol import ActorStore
from yoke.store.actor_records import InstanceRef

REF = InstanceRef(tenant="default", actor="a", instance_id="x")

REFUSE_ERROR = Refusal(
    name="test_refuse_error",
    table="actor_queues",
    op="UPDATE",
    when="NEW.error LIKE '%refuse-me%'",
    message="this error text is refused",
)
REFUSE_DONE = Refusal(
    name="test_refuse_done",
    table="actor_queues",
    op="DELETE",
    when="(SELECT CAST(data AS TEXT) FROM stream_events WHERE event_id = OLD.event_id) "
    "LIKE '%refuse-done%'",
    message="this completion is refused",
)
REFUSE_DEAD = Refusal(
    name="test_refuse_dead",
    table="actor_queues",
    op="UPDATE",
    when="NEW.status = 'dead'",
    message="no dead letters",
)


@pytest.fixture
async def opened(app_url: str) -> AsyncIterator[ActorStore]:
    """The actor verbs of a store of `app_url`, its schema made."""
    backend = open_actor_store(app_url)
    await backend.open()
    try:
        yield backend.actors
    finally:
        await backend.close()


async def _run(
    rt_store: ActorStore, make_runtime: MakeRuntime, first: dict[str, str], backoff: Backoff
) -> list[int]:
    rt = make_runtime("w1")
    ran: list[int] = []

    @rt.actor(subscribe=["s"], key="k", backoff=backoff)
    async def a(ctx: ActorCtx, event: Event) -> None:
        ran.append(event.data["i"])
        if "fail" in event.data:
            raise ValueError(event.data["fail"])

    async with rt.running(rt_store):
        await rt.append_many("s", [{"k": "x", "i": 0, **first}, {"k": "x", "i": 1}])
        await rt.append_many("s", [{"k": "x", "i": 2}])

        async def rest_done() -> bool:  # before: event 0 held its group slot for ever
            info = await rt_store.get_instance(REF)
            return info is not None and info.pending == 0 and info.in_flight <= 1 and len(ran) == 3

        await wait_until(rest_done, timeout=8.0)
        await asyncio.sleep(0.2)  # event 0 is not run again meanwhile
        drain = rt.drain
        assert drain is not None
        await drain.flush()
        assert drain.stats().held == 0
    return ran


@pytest.mark.parametrize(
    ("first", "max_attempts", "refused"),
    [
        ({"fail": "refuse-me"}, None, "its retry"),  # the requeue's error text is refused
        ({"fail": "refuse-me"}, 1, "its dead letter"),  # so is the dead letter's
        ({"tag": "refuse-done"}, None, "writing it off (completions)"),  # the completion
    ],
    ids=["requeue", "dead-letter", "completion"],
)
async def test_a_refused_write_buries_the_event_and_frees_its_group(
    app_url: str,
    opened: ActorStore,
    make_runtime: MakeRuntime,
    first: dict[str, str],
    max_attempts: int | None,
    refused: str,
) -> None:
    with refusing(app_url, REFUSE_ERROR, REFUSE_DONE):
        backoff = Backoff(initial=0.01, max_attempts=max_attempts)
        ran = await _run(opened, make_runtime, first, backoff)
    assert ran == [0, 1, 2]  # in order, event 0 once: not retried
    info = await opened.get_instance(REF)
    assert info is not None and (info.pending, info.in_flight, info.dead) == (0, 0, 1), info
    dead = await opened.dead_letters(REF)
    assert len(dead) == 1 and json.loads(dead[0].data)["i"] == 0, dead
    assert dead[0].error is not None
    assert dead[0].error.startswith(f"the store refused {refused}: Conflict"), dead[0].error


async def test_a_refused_dead_letter_of_the_refusal_leaves_the_row_and_frees_the_group(
    app_url: str, opened: ActorStore, make_runtime: MakeRuntime
) -> None:
    """When the store refuses the dead letter of the refusal too, the failure is logged and the
    row stays claimed (stop_worker puts it back): the group goes on all the same."""
    with refusing(app_url, REFUSE_ERROR, REFUSE_DEAD):
        ran = await _run(opened, make_runtime, {"fail": "refuse-me"}, Backoff(initial=0.01))
    assert ran == [0, 1, 2]
    info = await opened.get_instance(REF)
    # stop_worker put event 0 back to pending: it runs again (at least once)
    assert info is not None and (info.pending, info.dead) == (1, 0), info
