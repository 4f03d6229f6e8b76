"""Fencing within one worker: a claim is finished only under the owner epoch it was made under.

A worker can lose an instance and get it back (taken over while it looked stale, then handed
back): its rows are then claimable by it again, under a newer epoch. What it still holds from
before (a completion or a requeue under the old epoch) must be refused even though the worker
id matches, or an event would be finished twice: once by the old claim and once by the new.
"""

from __future__ import annotations

import json

from yoke.actors.protocol import ActorStore
from yoke.store.actor_records import ClaimedEvent, Completion, InstanceRef, NewEvent, Target

REF = InstanceRef(tenant="t", actor="a", instance_id="x")


def _events(n: int) -> list[NewEvent]:
    target = Target(actor=REF.actor, instance_id=REF.instance_id, group_id="")
    return [
        NewEvent(tenant=REF.tenant, stream="s", data=json.dumps({"i": i}), targets=(target,))
        for i in range(n)
    ]


def _done(c: ClaimedEvent, epoch: int | None = None) -> Completion:
    return Completion(queue_id=c.queue_id, epoch=c.epoch if epoch is None else epoch)


async def _lose_and_regain(store: ActorStore) -> None:
    """w2 takes x over from w1 (silent since 1.0), then w1 (alive again) takes it back."""
    took = await store.fleet.claim_orphans("w2", stale_before=2.0, now=2.0)
    assert took.instances == 1 and took.requeued == 3
    assert await store.fleet.worker_heartbeat("w1", now=3.0)
    back = await store.fleet.claim_orphans("w1", stale_before=2.5, now=3.0)
    assert back.instances == 1


async def test_a_claim_from_before_a_lost_and_regained_instance_is_refused(
    actor_store: ActorStore,
) -> None:
    s = actor_store
    await s.fleet.register_worker("w1", hostname="h", pid=1, now=1.0)
    await s.fleet.register_worker("w2", hostname="h", pid=2, now=1.0)
    await s.append_events(_events(3), owner="w1", now=1.0)
    old = await s.claim_next("w1", limit=10, now=1.0)
    assert len(old) == 3
    e = old[0].epoch
    assert {c.epoch for c in old} == {e}

    await _lose_and_regain(s)
    new = await s.claim_next("w1", limit=10, now=4.0)
    # The same rows, claimed again by the same worker, under an epoch two hand-overs newer.
    assert [c.queue_id for c in new] == [c.queue_id for c in old]
    e2 = new[0].epoch
    assert e2 == e + 2 and {c.epoch for c in new} == {e2}
    done, retried, dead = new

    # Under the old epoch, nothing is finished, put back or dead-lettered.
    assert await s.complete("w1", [_done(done, e)]) == []
    assert not await s.requeue("w1", _done(retried, e), available_at=4.0, error="old")
    assert not await s.dead_letter("w1", _done(dead, e), error="old", now=4.0)
    info = await s.get_instance(REF)
    assert info is not None and (info.pending, info.in_flight, info.dead) == (0, 3, 0)
    assert await s.claim_next("w1", limit=10, now=5.0) == []  # all three still in flight

    # Under the epoch they were claimed with, each succeeds once (a requeued row stays with
    # its worker during its backoff: still in flight, one attempt counted).
    assert await s.complete("w1", [_done(done)]) == [done.queue_id]
    assert await s.requeue("w1", _done(retried), available_at=4.0, error="new")
    assert await s.dead_letter("w1", _done(dead), error="new", now=4.0)
    info = await s.get_instance(REF)
    assert info is not None and (info.pending, info.in_flight, info.dead) == (0, 1, 1)
    (letter,) = await s.dead_letters(REF)
    assert letter.queue_id == dead.queue_id and letter.attempts == 1 and letter.error == "new"
    assert await s.complete("w1", [_done(retried)]) == [retried.queue_id]
    info = await s.get_instance(REF)
    assert info is not None and (info.pending, info.in_flight, info.dead) == (0, 0, 1)


async def test_a_completion_batch_mixing_epochs_finishes_only_the_current_claims(
    actor_store: ActorStore,
) -> None:
    s = actor_store
    await s.fleet.register_worker("w1", hostname="h", pid=1, now=1.0)
    await s.fleet.register_worker("w2", hostname="h", pid=2, now=1.0)
    await s.append_events(_events(3), owner="w1", now=1.0)
    old = await s.claim_next("w1", limit=10, now=1.0)
    await _lose_and_regain(s)
    new = await s.claim_next("w1", limit=10, now=4.0)
    # One statement, each row with its own epoch: the stale ones are refused, the rest done.
    batch = [_done(new[0]), _done(old[1]), _done(new[2])]
    assert await s.complete("w1", batch) == sorted([new[0].queue_id, new[2].queue_id])
    assert await s.complete("w1", [_done(new[1])]) == [new[1].queue_id]
    info = await s.get_instance(REF)
    assert info is not None and (info.pending, info.in_flight) == (0, 0)
