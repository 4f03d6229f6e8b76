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
) -> AnswerRow:
    return AnswerRow(
        principal=principal,
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
