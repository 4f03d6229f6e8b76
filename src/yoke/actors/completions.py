"""Writes of the drain that must reach the store: group commit of completions. Every write of a
claimed row (these batches, a requeue, a dead letter) is retried through `yoke.retry.until_done`.

Completions are queued here as they happen; one writer task deletes them in batches of at most
`batch_size` rows, each batch taking whatever finished while the previous statement ran, so
under load a completion costs a fraction of a transaction. Completions may also come in bursts
with gaps between them (the results of one executor frame at a time, every few milliseconds):
then each statement would take one burst. So while more are bound to end (`busy`: the drain
still holds rows), a batch smaller than `gather` waits for more, up to `linger` seconds; the
drain `nudge`s the writer when it holds nothing more, so an idle worker's completions are
written at once. (`bench_executors --drain-only`, 20,000 events through an executor: about 230
statements without it, one per frame of 64 results or two; 100-130 with it.) A batch
that fails because the store is unavailable is retried with backoff, never dropped (one it
refuses for good is written row by row, and a row refused alone becomes a dead letter of the
refusal: `refusals.py`); rows the
store refuses (fenced: the instance belongs to another worker now) are logged, and the drain
is told whose they were (each completion carries a tag of the drain's choosing): those
instances are lost here, and what the drain holds of them must not run.

Why retry rather than log and move on: a claimed row whose completion, requeue or dead letter
is not written stays claimed in the store, and this worker claims pending rows only, so the
event would be stuck "in flight" until the worker stops (nothing may be lost when the store
returns). Only a stopping worker gives up, after a few attempts: its `stop_worker`, or
else a peer's takeover of its instances once it is stale (or its own restart), puts every row
it still has claimed back to pending, and the event runs again (at least once).

This module must never touch the kernels or decide anything but when to write.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from yoke.actors.protocol import ActorStore
from yoke.actors.refusals import bury
from yoke.clock import Clock
from yoke.errors import YokeError
from yoke.retry import RetryPolicy, until_done
from yoke.store.actor_records import Completion

log = logging.getLogger("yoke.actors.drain")

Tag = TypeVar("Tag")


Verb = Callable[[str, list[Completion]], Awaitable[list[int]]]


class CompletionWriter(Generic[Tag]):
    """Writes claims off in batches: completions (`store.complete`, the default `verb`), or
    with another verb of the same shape, releases (`store.release_claims`)."""

    def __init__(
        self,
        store: ActorStore,
        worker_id: str,
        *,
        clock: Clock,
        batch_size: int,
        retry: RetryPolicy,
        on_fenced: Callable[[list[Tag]], None],
        verb: Verb | None = None,
        on_batch: Callable[[list[Tag]], None] | None = None,
        what: str = "completions",
        gather: int = 0,
        linger: float = 0.0,
        busy: Callable[[], bool] = lambda: False,
    ) -> None:
        self._store = store
        self._worker_id = worker_id
        self._clock = clock
        self._batch = batch_size
        self._retry = retry
        self._on_fenced = on_fenced  # called with the tags of the completions refused
        self._verb: Verb = verb or store.complete
        # Called with the tags of every batch once it is written (or given up), refused or not.
        self._on_batch = on_batch
        self._what = what
        self._gather = min(gather, batch_size)  # rows a batch waits for while `busy`...
        self._linger = linger  # ...for this many seconds at most
        self._busy = busy
        self._enough = asyncio.Event()  # set when a lingering batch should be written now
        self._lingering = False
        self._done: list[Completion] = []
        self._tags: list[Tag] = []  # parallel to _done
        self._wake = asyncio.Event()
        # Held while a batch is written (and retried): flush() waits for it.
        self._writing = asyncio.Lock()
        self._stopping = False
        self.given_up = 0  # completions a stopping worker could not write (rows left claimed)

    def __len__(self) -> int:
        return len(self._done)

    def __repr__(self) -> str:
        return (
            f"CompletionWriter(pending={len(self._done)}, writing={self._writing.locked()}, "
            f"stopping={self._stopping}, given_up={self.given_up})"
        )

    def add(self, done: Completion, tag: Tag) -> None:
        self._done.append(done)
        self._tags.append(tag)
        self._wake.set()
        if self._lingering and len(self._done) >= self._gather:
            self._enough.set()

    def nudge(self) -> None:
        """Nothing more is bound to end soon: a batch waiting for more is written now."""
        if self._lingering:
            self._enough.set()

    def stop(self) -> None:
        """The worker is stopping: a batch the store keeps refusing is given up after a few
        attempts instead of holding the shutdown forever."""
        self._stopping = True
        self.nudge()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._done:
                if len(self._done) < self._gather and self._busy() and not self._stopping:
                    await self._wait_for_more()
                async with self._writing:
                    if self._done:
                        await self._write_batch()

    async def _wait_for_more(self) -> None:
        self._enough.clear()
        self._lingering = True
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._linger):
                    await self._enough.wait()
        finally:
            self._lingering = False

    async def flush(self) -> None:
        """Write every completion added so far, including a batch being retried right now."""
        while True:
            async with self._writing:
                if not self._done:
                    return
                await self._write_batch()

    async def _write_batch(self) -> None:
        batch, tags = self._done[: self._batch], self._tags[: self._batch]
        del self._done[: len(batch)], self._tags[: len(batch)]
        try:
            stored = await until_done(
                lambda: self._verb(self._worker_id, batch),
                policy=self._retry,
                what=f"writing {len(batch)} {self._what}",
                stopping=lambda: self._stopping,
                log=log,
            )
        except YokeError as exc:  # refused for good, not an outage: never retried as it is
            stored = await self._alone(batch, exc), 1
        if self._on_batch is not None:
            self._on_batch(tags if stored is not None else tags + self._tags)
        if stored is None:  # stopping, and the store refuses: the rest would be refused alike
            self.given_up += len(batch) + len(self._done)
            self._done.clear()
            self._tags.clear()
            return
        ok, attempts = stored
        missing = len(batch) - len(ok)
        if not missing:
            return
        if attempts > 1:
            log.warning(
                "%d %s not found on a retry: written by an attempt whose answer was "
                "lost, or refused (their instances belong to another worker)",
                missing,
                self._what,
            )
            return
        log.warning("%d %s refused: their instances belong to another worker", missing, self._what)
        written = set(ok)
        self._on_fenced([t for c, t in zip(batch, tags, strict=True) if c.queue_id not in written])

    async def _alone(self, batch: list[Completion], refusal: YokeError) -> list[int]:
        """The store refused `batch` for good: each row is written alone, and a row refused
        alone becomes a dead letter of the refusal (`refusals.bury`). Returns the rows dealt
        with (none is taken for fenced: a fenced one is refused by its dead letter too)."""
        for done in batch:
            if len(batch) > 1:
                try:
                    await until_done(
                        functools.partial(self._verb, self._worker_id, [done]),
                        policy=self._retry,
                        what=f"writing {self._what} one at a time",
                        stopping=lambda: self._stopping,
                        log=log,
                    )
                    continue
                except YokeError as exc:
                    refusal = exc
            await bury(
                self._store,
                self._worker_id,
                done,
                refusal=refusal,
                what=f"writing it off ({self._what})",
                now=self._clock.wall(),
                policy=self._retry,
                stopping=lambda: self._stopping,
            )
        return [done.queue_id for done in batch]
