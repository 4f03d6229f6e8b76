"""The store verbs behind Idempotency-Key replay, on every backend: an answer is kept once per
(principal, key), the first one wins a race, it is found until it expires, and expired ones are
forgotten (and give their key back)."""

from __future__ import annotations

import asyncio
import uuid

from yoke.store import AnswerRow, Store


def _answer(
    principal: str,
    key: str,
    *,
    status: int = 201,
    at: float = 100.0,
    ttl: float = 50.0,
    body: str = '{"n":1}',
    tenant: str = "t",
) -> AnswerRow:
    return AnswerRow(
        principal=principal,
        tenant=tenant,
        key=key,
        fingerprint="fp-" + body,
        status=status,
        body=body,
        headers='[["location","/v1/starts/x"]]',
        created_at=at,
        expires_at=at + ttl,
    )


async def test_an_answer_is_kept_found_and_expires(store: Store) -> None:
    p, k = f"p-{uuid.uuid4().hex}", "key-1"
    first = _answer(p, k)
    assert await store.find_answer(p, k, now=100.0) is None
    assert await store.keep_answer(first, now=100.0) == first
    assert await store.find_answer(p, k, now=149.0) == first
    assert await store.find_answer(p, "other", now=149.0) is None
    assert await store.find_answer("someone-else", k, now=149.0) is None
    assert await store.find_answer(p, k, now=150.0) is None  # expired at expires_at
    assert await store.forget_answers(now=150.0) >= 1
    assert await store.find_answer(p, k, now=100.0) is None


async def test_a_live_answer_wins_and_an_expired_one_gives_its_key_back(store: Store) -> None:
    p, k = f"p-{uuid.uuid4().hex}", "key-2"
    first = _answer(p, k, status=202, body='{"n":1}')
    second = _answer(p, k, status=201, body='{"n":2}', at=120.0)
    assert await store.keep_answer(first, now=100.0) == first
    assert await store.keep_answer(second, now=120.0) == first
    later = _answer(p, k, status=201, body='{"n":3}', at=200.0)
    assert await store.keep_answer(later, now=200.0) == later


async def test_racing_keeps_agree_on_one_answer(store: Store) -> None:
    p, k = f"p-{uuid.uuid4().hex}", "key-3"
    tries = [_answer(p, k, body=f'{{"n":{i}}}') for i in range(8)]
    kept = await asyncio.gather(*(store.keep_answer(a, now=100.0) for a in tries))
    assert len(set(kept)) == 1 and kept[0] in tries


async def used(store: Store, tenant: str, kind: str) -> int:
    """What `tenant` is counted to hold of `kind`."""
    from yoke.store.tenantverbs import TenantVerbs

    held = await TenantVerbs(store._t).held(tenant)  # type: ignore[attr-defined]
    return held.get(kind, 0)


async def test_a_tenant_keeps_at_most_its_bound_and_its_oldest_go_first(store: Store) -> None:
    """One tenant sending keys by the thousand forgets its own oldest answers, never another
    tenant's; the count follows every keep, eviction and expiry exactly."""
    other = _answer("globex-ci", "theirs", tenant="globex", ttl=500.0)
    await store.keep_answer(other, now=100.0, keep_at_most=3)
    mine = [_answer("acme-ci", f"k{i}", at=100.0 + i, tenant="acme") for i in range(7)]
    for a in mine:
        assert await store.keep_answer(a, now=a.created_at, keep_at_most=3) == a
    kept = [a.key for a in mine if await store.find_answer("acme-ci", a.key, now=107.0)]
    assert kept == ["k4", "k5", "k6"]  # the newest three; the oldest went first
    assert await store.find_answer("globex-ci", "theirs", now=107.0) == other
    assert await used(store, "acme", "answers") == 3
    assert await used(store, "globex", "answers") == 1
    # A replay of a kept key changes nothing; expiry counts down with the rows it deletes.
    assert await store.keep_answer(mine[6], now=107.0, keep_at_most=3) == mine[6]
    assert await used(store, "acme", "answers") == 3
    assert await store.forget_answers(now=155.0) == 2  # k4 and k5 (expires 154, 155)
    assert await used(store, "acme", "answers") == 1
    assert await used(store, "globex", "answers") == 1
