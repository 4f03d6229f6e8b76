"""Group commit for the store verbs that touch the hot ledger rows (logs, grants, finishes).

Every grant and every finish changes the same few ledger rows (`global`, the session's, the
workflow's), and a row lock is held until the commit: one transaction per start would let the
ledger take one start per commit. A batcher sends the requests that arrive while a batch is in
the store as the next batch, so the rows are locked once for many starts. The first request of
an idle batcher is not delayed: it goes at the next turn of the event loop.

Overlap. With `overlap=2`, a second batch may go to the store while the first one's
transaction commits, instead of waiting for the first one's answer to be handled: on
PostgreSQL it runs on a second pooled connection (its rows up to the ledger's are written while
the first commits; the ledger rows' lock then orders the two), on SQLite it joins the open
transaction or begins the next one as soon as the first's COMMIT is done. Whatever the store
does, the answers are handed back (`apply`) in the order the batches were formed, so the
admission core sees the results of its picks in the order it made them. Overlap never changes
what is granted: a start counts as holding its slots in the kernel from the moment it is picked
into a batch, and the ledger, under its row locks, decides each batch exactly.

`GroupCommit` answers each request with a future (a finish: its execution's task waits for its
end to be recorded; a caller that goes away cancels its future, so a failure set on it is
always read); `Batcher` answers none (logs and grants: `apply` hands a whole batch's results,
or its error, to the admission core, so nobody needs a future per start).

This module must never name a store or decide policy; it only groups calls and keeps order.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

log = logging.getLogger("yoke.executions")
Req = TypeVar("Req")
Res = TypeVar("Res")


class _Flight(Generic[Req, Res]):
    """One batch sent to the store: what it carried and, once the store answered, how."""

    __slots__ = ("batch", "done", "error", "result")

    def __init__(self, batch: list[Req]) -> None:
        self.batch = batch
        self.done = False
        self.result: Res | None = None
        self.error: BaseException | None = None


class Batcher(Generic[Req, Res]):
    """`put(request)`; `send(batch)` is the store's part of a batch (up to `overlap` batches in
    the store at once); `apply(batch, result, error)` deals with its outcome, synchronously,
    in the order the batches were formed (`error` is set, and `result` None, if `send`
    raised). An `apply` that raises is only logged: the next batch goes."""

    def __init__(
        self,
        send: Callable[[Sequence[Req]], Awaitable[Res]],
        apply: Callable[[Sequence[Req], Res | None, BaseException | None], None],
        *,
        max_batch: int = 256,
        overlap: int = 1,
    ) -> None:
        self._send = send
        self._apply = apply
        self._max_batch = max_batch
        self._waiting: list[Req] = []
        self._flights: deque[_Flight[Req, Res]] = deque()  # in the store, in formed order
        self._tasks: set[asyncio.Task[None]] = set()
        self._flying = 0  # tasks made and not yet done with their batch
        self._forming = False  # a task is made that has not taken its batch yet
        self.overlap = overlap

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(waiting={len(self._waiting)}, "
            f"in_store={len(self._flights)}, overlap={self._overlap})"
        )

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def overlap(self) -> int:
        return self._overlap

    @overlap.setter
    def overlap(self, overlap: int) -> None:
        """Takes effect for the next batch formed (those in the store stay)."""
        if overlap < 1:
            raise ValueError("overlap must be at least 1")
        self._overlap = overlap
        self._go()

    @property
    def in_store(self) -> int:
        """Batches sent and not yet handed back."""
        return len(self._flights)

    async def idle(self) -> None:
        """Return once every request put so far has been sent and handed back."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    def put(self, request: Req) -> None:
        self._waiting.append(request)
        self._go()

    def _go(self) -> None:
        """Form the next batch at the next turn of the loop, if one more may be in the store."""
        if self._forming or not self._waiting or self._flying >= self._overlap:
            return
        self._forming = True
        self._flying += 1
        task = asyncio.get_running_loop().create_task(self._fly())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _fly(self) -> None:
        # Taken at the task's first step: what arrived by then is this batch, and batches
        # are formed (and so handed back) in the order their tasks first ran.
        self._forming = False
        batch = self._waiting[: self._max_batch]
        del self._waiting[: self._max_batch]
        flight: _Flight[Req, Res] = _Flight(batch)
        self._flights.append(flight)
        self._go()  # past `max_batch`, the rest may go beside it
        try:
            flight.result = await self._send(batch)
        except Exception as exc:  # `apply` learns it
            flight.error = exc
        except BaseException as exc:  # cancelled: handed back failed, and the cancel goes on
            flight.error = exc
            raise
        finally:
            flight.done = True
            self._hand_back()
            self._flying -= 1
            self._go()  # what arrived meanwhile goes now

    def _hand_back(self) -> None:
        """Apply every answered batch at the head of the line: a batch answered before an
        older one waits for it."""
        while self._flights and self._flights[0].done:
            flight = self._flights.popleft()
            try:
                self._apply(flight.batch, flight.result, flight.error)
            except Exception:  # a bug in one batch's handling must not stop the next
                log.exception("a batch failed")


class _Place(Generic[Res]):
    __slots__ = ("done", "value")

    def __init__(self) -> None:
        self.done = False
        self.value: Res | None = None


class InLine(Generic[Res]):
    """Outcomes handed back (`apply`) in the order their places were taken (`place()`, as a
    batch forms), whatever order they come in (`fill`): what `Batcher` does for its own
    batches, for requests that ride in another batcher's batches (grants in a finish batch)."""

    def __init__(self, apply: Callable[[Res], None]) -> None:
        self._apply = apply
        self._line: deque[_Place[Res]] = deque()

    def place(self) -> _Place[Res]:
        place: _Place[Res] = _Place()
        self._line.append(place)
        return place

    def fill(self, place: _Place[Res], value: Res) -> None:
        place.done, place.value = True, value
        line = self._line
        while line and line[0].done:
            head = line.popleft()
            try:
                self._apply(head.value)  # type: ignore[arg-type]
            except Exception:  # a bug in one batch's handling must not stop the next
                log.exception("a batch failed")


class GroupCommit(Generic[Req, Res]):
    """`submit(request)` gives a future of its result; `flush(batch)` answers a whole batch
    (one result per request, in order) or raises, which fails every request of the batch."""

    def __init__(
        self,
        flush: Callable[[Sequence[Req]], Awaitable[Sequence[Res]]],
        *,
        max_batch: int = 256,
        overlap: int = 1,
    ) -> None:
        self._batches: Batcher[tuple[Req, asyncio.Future[Res]], Sequence[Res]] = Batcher(
            self._send, self._answer, max_batch=max_batch, overlap=overlap
        )
        self._flush = flush

    def __repr__(self) -> str:
        return repr(self._batches).replace("Batcher", "GroupCommit", 1)

    @property
    def overlap(self) -> int:
        return self._batches.overlap

    @overlap.setter
    def overlap(self, overlap: int) -> None:
        self._batches.overlap = overlap

    @property
    def waiting(self) -> int:
        return self._batches.waiting

    async def idle(self) -> None:
        """Return once every request submitted so far is answered."""
        await self._batches.idle()

    def submit(self, request: Req) -> asyncio.Future[Res]:
        fut: asyncio.Future[Res] = asyncio.get_running_loop().create_future()
        self._batches.put((request, fut))
        return fut

    async def _send(self, batch: Sequence[tuple[Req, asyncio.Future[Res]]]) -> Sequence[Res]:
        return await self._flush([req for req, _ in batch])

    @staticmethod
    def _answer(
        batch: Sequence[tuple[Req, asyncio.Future[Res]]],
        results: Sequence[Res] | None,
        error: BaseException | None,
    ) -> None:
        if error is not None:
            for _, fut in batch:
                if fut.done():
                    continue
                if isinstance(error, Exception):
                    fut.set_exception(error)
                else:  # cancelled: nobody will answer these
                    fut.cancel()
            return
        assert results is not None
        for (_, fut), res in zip(batch, results, strict=True):
            if not fut.done():
                fut.set_result(res)
