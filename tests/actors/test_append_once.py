"""`append_event_once`: an Idempotency-Key appends one event, even when many appends with it
race (on PostgreSQL each on its own pooled connection, so the claims really interleave); the
key used for another request is refused, and an expired key appends afresh. Every backend."""

from __future__ import annotations

import asyncio

import pytest

from yoke.actors.protocol import ActorStore
from yoke.errors import IdempotencyConflict
from yoke.store.actor_records import EventKey, NewEvent

RACERS = 8
NOW = 1000.0


def event(n: int) -> NewEvent:
    return NewEvent(tenant="t1", stream="s", data=f'{{"n": {n}}}', targets=())


def key(name: str, fp: str = "fp", expires_at: float = NOW + 60) -> EventKey:
    return EventKey(principal="alice", key=name, fingerprint=fp, expires_at=expires_at)


async def test_racing_appends_with_one_key_append_one_event(actor_store: ActorStore) -> None:
    answers = await asyncio.gather(
        *(
            actor_store.append_event_once(event(0), key=key("k1"), owner=None, now=NOW)
            for _ in range(RACERS)
        )
    )
    assert len({eid for eid, _ in answers}) == 1, answers  # every racer answers the same event
    assert sum(appended for _, appended in answers) == 1, answers  # and only one appended it
    # Another key, and the same key of another principal, are other events.
    other, appended = await actor_store.append_event_once(
        event(1), key=key("k2"), owner=None, now=NOW
    )
    assert appended and other != answers[0][0]
    bob = EventKey(principal="bob", key="k1", fingerprint="fp", expires_at=NOW + 60)
    theirs, appended = await actor_store.append_event_once(event(2), key=bob, owner=None, now=NOW)
    assert appended and theirs not in (other, answers[0][0])


async def test_a_key_used_for_another_request_is_refused(actor_store: ActorStore) -> None:
    first, _ = await actor_store.append_event_once(event(0), key=key("k"), owner=None, now=NOW)
    with pytest.raises(IdempotencyConflict):
        await actor_store.append_event_once(event(1), key=key("k", "other"), owner=None, now=NOW)
    again, appended = await actor_store.append_event_once(
        event(0), key=key("k"), owner=None, now=NOW + 1
    )
    assert (again, appended) == (first, False)


async def test_an_expired_key_appends_afresh(actor_store: ActorStore) -> None:
    first, _ = await actor_store.append_event_once(
        event(0), key=key("k", expires_at=NOW + 10), owner=None, now=NOW
    )
    later = NOW + 11
    second, appended = await actor_store.append_event_once(
        event(0), key=key("k", "new", expires_at=later + 10), owner=None, now=later
    )
    assert appended and second != first
