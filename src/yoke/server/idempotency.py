"""Idempotency-Key replay: a retry of a creating POST gets the first answer back, byte for byte.

Per principal, the key is kept with a fingerprint of the request (method, path and the body's
canonical JSON) and the first successful answer (status, body, the headers a client acts on).
A retry with the same key and request replays that answer; the same key with another request is
422; keys are forgotten after the retention (default 24 h). Error answers are not kept: a 429,
503 or 404 changes nothing, so its retry must be tried afresh. A tenant keeps at most
`YOKE_IDEMPOTENCY_MAX_PER_TENANT` answers: past it its oldest are forgotten (not refused: a
bound reached by refusal would stop that tenant's keyed requests for up to a day; a start
keeps its key in its own row anyway, so a forgotten answer never makes a second start).

Two requests racing with one key: inside one process they are serialised by a per-key lock;
across processes the store's insert-if-absent (`keep_answer`) decides, and the loser answers
with the kept answer, so both clients see the same one. The starts service also dedups its own
durable start per (principal, key), so a key never makes two starts even if this layer forgets.

`AnswerStore` is the protocol this layer needs; `StoreAnswers` puts it on the durable store
(table `yoke_idempotency`: kept across restarts and shared by servers on one database), and
`MemoryAnswers` keeps answers in this process only (for tests and embedding). This module must
never look inside an answer's body: it keeps and replays bytes.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from starlette.responses import Response

from yoke.errors import BadValue, IdempotencyConflict, StoreUnavailable
from yoke.executions.fingerprints import fingerprint
from yoke.retry import within
from yoke.store import AnswerRow, Store

log = logging.getLogger("yoke.server")

REPLAYED_HEADER = "Idempotent-Replayed"
KEPT_HEADERS = ("location", "retry-after")
MAX_KEY = 255


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredAnswer:
    principal: str
    tenant: str
    key: str
    fingerprint: str
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...]
    created_at: float
    expires_at: float


@runtime_checkable
class AnswerStore(Protocol):
    async def find_answer(self, principal: str, key: str, *, now: float) -> StoredAnswer | None:
        """The kept answer, unless it expired before `now`."""
        ...

    async def keep_answer(self, answer: StoredAnswer, *, now: float) -> StoredAnswer:
        """Keep `answer` unless a live one is kept for (principal, key); return the kept one."""
        ...

    async def forget_answers(self, *, now: float) -> int:
        """Delete every answer that expired before `now`; return how many."""
        ...


class MemoryAnswers:
    def __init__(self, *, keep_at_most: int | None = None) -> None:
        self._answers: dict[tuple[str, str], StoredAnswer] = {}  # in the order kept
        self._keep_at_most = keep_at_most

    def __repr__(self) -> str:
        return f"MemoryAnswers({len(self._answers)} kept)"

    async def find_answer(self, principal: str, key: str, *, now: float) -> StoredAnswer | None:
        found = self._answers.get((principal, key))
        return found if found is not None and found.expires_at > now else None

    async def keep_answer(self, answer: StoredAnswer, *, now: float) -> StoredAnswer:
        slot = (answer.principal, answer.key)
        found = self._answers.get(slot)
        if found is not None and found.expires_at > now:
            return found
        self._answers.pop(slot, None)
        self._answers[slot] = answer
        if self._keep_at_most is not None:
            mine = [k for k, a in self._answers.items() if a.tenant == answer.tenant]
            for k in mine[: max(0, len(mine) - self._keep_at_most)]:  # its oldest go first
                del self._answers[k]
        return answer

    async def forget_answers(self, *, now: float) -> int:
        old = [k for k, a in self._answers.items() if a.expires_at <= now]
        for k in old:
            del self._answers[k]
        return len(old)


def check_key(key: str) -> str:
    if not 1 <= len(key) <= MAX_KEY or not key.isascii() or not key.isprintable():
        raise BadValue(f"Idempotency-Key must be 1 to {MAX_KEY} printable ASCII characters")
    return key


def request_fingerprint(method: str, path: str, body: bytes) -> str:
    """The fingerprint of a creating POST (`executions.fingerprints`, the one rule)."""
    try:
        content: object = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        content = {"bytes": body.hex()}  # not JSON (or too deep): refused, compared as bytes
    try:
        return fingerprint(method, path, content)
    except (ValueError, RecursionError):  # too deep to write back
        return fingerprint(method, path, {"bytes": body.hex()})


def replay(answer: StoredAnswer) -> Response:
    response = Response(answer.body, status_code=answer.status, media_type="application/json")
    for name, value in answer.headers:
        response.headers[name] = value
    response.headers[REPLAYED_HEADER] = "true"
    return response


class Replayer:
    def __init__(
        self, answers: AnswerStore, *, retention: float, store_timeout: float | None = None
    ) -> None:
        self.answers = answers
        self.retention = retention
        # A store that does not answer: the lookup is answered 503 within this, and an answer
        # that cannot be kept is given all the same (a retry then finds its start by the key).
        self.store_timeout = store_timeout
        # Per (principal, key): the lock and how many requests hold or wait for it.
        self._locks: dict[tuple[str, str], tuple[asyncio.Lock, list[int]]] = {}

    async def run(
        self,
        *,
        principal: str,
        tenant: str,
        key: str,
        fp: str,
        now: Callable[[], float],
        answer: Callable[[], Awaitable[Response]],
    ) -> tuple[Response, bool]:
        """The answer for this request and whether it was a replay."""
        slot = (principal, check_key(key))
        lock, users = self._locks.setdefault(slot, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                find = self.answers.find_answer(principal, key, now=now())
                kept = await within(self.store_timeout, "find an earlier answer", find)
                if kept is not None:
                    return self._replay_or_refuse(kept, fp), True
                response = await answer()
                if not 200 <= response.status_code < 300:
                    return response, False
                t = now()
                mine = StoredAnswer(
                    principal=principal,
                    tenant=tenant,
                    key=key,
                    fingerprint=fp,
                    status=response.status_code,
                    body=bytes(response.body),
                    headers=tuple((n, v) for n, v in response.headers.items() if n in KEPT_HEADERS),
                    created_at=t,
                    expires_at=t + self.retention,
                )
                try:
                    keep = self.answers.keep_answer(mine, now=t)
                    kept = await within(self.store_timeout, "keep the answer", keep)
                except StoreUnavailable as exc:
                    log.warning("an answer to Idempotency-Key %r was not kept: %s", key, exc)
                    return response, False
                if kept is mine or kept == mine:
                    return response, False
                return self._replay_or_refuse(kept, fp), True  # another process was first
        finally:
            users[0] -= 1
            if not users[0]:  # forget idle locks: memory stays O(requests in flight)
                self._locks.pop(slot, None)

    @staticmethod
    def _replay_or_refuse(kept: StoredAnswer, fp: str) -> Response:
        if kept.fingerprint != fp:
            raise IdempotencyConflict(f"Idempotency-Key {kept.key!r} was used for another request")
        return replay(kept)


class StoreAnswers:
    """`AnswerStore` over the durable store (`find_answer`, `keep_answer`, `forget_answers`):
    kept answers survive a restart and are shared by every server on one database."""

    def __init__(self, store: Store, *, keep_at_most: int | None = None) -> None:
        self._store = store
        self._keep_at_most = keep_at_most  # answers kept per tenant, at most

    def __repr__(self) -> str:
        return f"StoreAnswers({self._store!r})"

    async def find_answer(self, principal: str, key: str, *, now: float) -> StoredAnswer | None:
        row = await self._store.find_answer(principal, key, now=now)
        return None if row is None else _stored(row)

    async def keep_answer(self, answer: StoredAnswer, *, now: float) -> StoredAnswer:
        row = await self._store.keep_answer(
            AnswerRow(
                principal=answer.principal,
                tenant=answer.tenant,
                key=answer.key,
                fingerprint=answer.fingerprint,
                status=answer.status,
                body=answer.body.decode(),
                headers=json.dumps([list(h) for h in answer.headers]),
                created_at=answer.created_at,
                expires_at=answer.expires_at,
            ),
            now=now,
            keep_at_most=self._keep_at_most,
        )
        kept = _stored(row)
        return answer if kept == answer else kept

    async def forget_answers(self, *, now: float) -> int:
        return await self._store.forget_answers(now=now)


def _stored(row: AnswerRow) -> StoredAnswer:
    return StoredAnswer(
        principal=row.principal,
        tenant=row.tenant,
        key=row.key,
        fingerprint=row.fingerprint,
        status=row.status,
        body=row.body.encode(),
        headers=tuple((str(n), str(v)) for n, v in json.loads(row.headers)),
        created_at=row.created_at,
        expires_at=row.expires_at,
    )
