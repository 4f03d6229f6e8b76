"""Group commit for the store verbs that touch the hot ledger rows (logs, grants, finishes).

Every grant and every finish changes the same few ledger rows (`global`, the session's, the
workflow's), and a row lock is held until the commit: one transaction per start would let the
ledger take one start per commit. `GroupCommit` sends the requests that arrive while a batch
is in the store as the next batch, so the rows are locked once for many starts. The first
request of an idle batcher is not delayed: it goes at the next turn of the event loop.

`GroupCommit` answers each request with a future (a finish: its execution's task waits for its
end to be recorded; a caller that goes away cancels its future, so a failure set on it is
always read); `Batcher` answers none (logs and grants: the batch itself hands the
results to the admission core, so nobody needs a future per start).

This module must never name a store or decide policy; it only groups calls.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

log = logging.getLogger("yoke.executions")
Req = TypeVar("Req")
Res = TypeVar("Res")


class GroupCommit(Generic[Req, Res]):
    """`submit(request)` gives a future of its result; `flush(batch)` answers a whole batch
    (one result per request, in order) or raises, which fails every request of the batch."""

    def __init__(
        self, flush: Callable[[Sequence[Req]], Awaitable[Sequence[Res]]], *, max_batch: int = 256
    ) -> None:
        self._flush = flush
        self._max_batch = max_batch
        self._waiting: list[tuple[Req, asyncio.Future[Res]]] = []
        self._runner: asyncio.Task[None] | None = None

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def idle(self) -> None:
        """Return once every request submitted so far is answered."""
        while self._runner is not None:
            await asyncio.wait([self._runner])

    def submit(self, request: Req) -> asyncio.Future[Res]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Res] = loop.create_future()
        self._waiting.append((request, fut))
        if self._runner is None:
            self._runner = loop.create_task(self._run())
        return fut

    async def _run(self) -> None:
        try:
            while self._waiting:
                batch = self._waiting[: self._max_batch]
                del self._waiting[: self._max_batch]
                try:
                    results = await self._flush([req for req, _ in batch])
                except Exception as exc:
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                except BaseException:
                    for _, fut in batch:
                        fut.cancel()
                    raise
                for (_, fut), res in zip(batch, results, strict=True):
                    if not fut.done():
                        fut.set_result(res)
        finally:
            self._runner = None
            if self._waiting:  # cancelled: nobody would ever answer these
                for _, fut in self._waiting:
                    fut.cancel()
                self._waiting.clear()


class Batcher(Generic[Req]):
    """`put(request)`; `flush(batch)` deals with a whole batch itself. A flush that raises has
    dealt with its batch too: the error is only logged, and the next batch goes."""

    def __init__(
        self, flush: Callable[[Sequence[Req]], Awaitable[None]], *, max_batch: int = 256
    ) -> None:
        self._flush = flush
        self._max_batch = max_batch
        self._waiting: list[Req] = []
        self._runner: asyncio.Task[None] | None = None

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def idle(self) -> None:
        """Return once every request put so far has been flushed."""
        while self._runner is not None:
            await asyncio.wait([self._runner])

    def put(self, request: Req) -> None:
        self._waiting.append(request)
        if self._runner is None:
            self._runner = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            while self._waiting:
                batch = self._waiting[: self._max_batch]
                del self._waiting[: self._max_batch]
                try:
                    await self._flush(batch)
                except Exception:  # the flush dealt with its batch; a bug must not stop the next
                    log.exception("a batch failed")
        finally:
            self._runner = None
