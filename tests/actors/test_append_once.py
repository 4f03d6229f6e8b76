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


async def test_a_tenant_keeps_at_most_its_bound_of_keys_its_oldest_go_first(
    actor_store: ActorStore,
) -> None:
    """Keys are bounded per tenant: past the bound a tenant's oldest key is forgotten (a retry
    with it appends afresh), never another tenant's."""
    theirs = NewEvent(tenant="t2", stream="s", data="{}", targets=())
    kept, _ = await actor_store.append_event_once(
        theirs, key=EventKey(principal="bob", key="b", fingerprint="fp", expires_at=NOW + 99),
        owner=None, now=NOW,
    )  # fmt: skip
    first: dict[str, int] = {}
    for i in range(5):
        k = EventKey(principal="alice", key=f"k{i}", fingerprint="fp", expires_at=NOW + 60 + i,
                     keep_at_most=2)  # fmt: skip
        first[k.key], appended = await actor_store.append_event_once(
            event(i), key=k, owner=None, now=NOW
        )
        assert appended
    for name, expect_kept in (("k4", True), ("k3", True), ("k2", False), ("k0", False)):
        k = EventKey(principal="alice", key=name, fingerprint="fp", expires_at=NOW + 70,
                     keep_at_most=2)  # fmt: skip
        eid, appended = await actor_store.append_event_once(event(9), key=k, owner=None, now=NOW)
        # A kept key answers its first event; a forgotten one appends afresh (and, being a
        # new key, makes the tenant forget its oldest again).
        assert (eid == first[name], appended) == (expect_kept, not expect_kept), name
    bob = EventKey(principal="bob", key="b", fingerprint="fp", expires_at=NOW + 99)
    assert await actor_store.append_event_once(theirs, key=bob, owner=None, now=NOW) == (
        kept,
        False,
    )
