"""Group commit of `process()` completions: one writer, batches as large as the backlog.

Completions are queued here as they happen; one writer task deletes them in batches of at most
`batch_size` rows, each batch taking whatever finished while the previous statement ran, so
under load a completion costs a fraction of a transaction (PEERS.md observation 1). A batch
that fails because the store is unavailable is retried with backoff, never dropped; rows the
store refuses (fenced: the instance belongs to another worker now) are counted and logged.

This module must never touch the kernels or decide anything but when to write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from yoke.actors.protocol import ActorStore
from yoke.errors import YokeError
from yoke.store.actor_records import Completion

log = logging.getLogger("yoke.actors.drain")


class CompletionWriter:
    def __init__(
        self,
        store: ActorStore,
        worker_id: str,
        *,
        batch_size: int,
        retry_after: float,
        on_fenced: Callable[[int], None],
    ) -> None:
        self._store = store
        self._worker_id = worker_id
        self._batch = batch_size
        self._retry_after = retry_after
        self._on_fenced = on_fenced
        self._done: list[Completion] = []
        self._wake = asyncio.Event()
        # Held while a batch is written (and retried): flush() waits for it.
        self._writing = asyncio.Lock()

    def __len__(self) -> int:
        return len(self._done)

    def __repr__(self) -> str:
        return f"CompletionWriter(pending={len(self._done)}, writing={self._writing.locked()})"

    def add(self, done: Completion) -> None:
        self._done.append(done)
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._done:
                async with self._writing:
                    if self._done:
                        await self._write_batch()

    async def flush(self) -> None:
        """Write every completion added so far, including a batch being retried right now."""
        while True:
            async with self._writing:
                if not self._done:
                    return
                await self._write_batch()

    async def _write_batch(self) -> None:
        batch = self._done[: self._batch]
        del self._done[: len(batch)]
        pause = self._retry_after
        while True:
            try:
                ok = await self._store.complete(self._worker_id, batch)
                break
            except YokeError as exc:
                log.warning(
                    "writing %d completions failed (retrying in %.1fs): %s", len(batch), pause, exc
                )
                await asyncio.sleep(pause)
                pause = min(pause * 2, 10.0)
        if len(ok) != len(batch):
            fenced = len(batch) - len(ok)
            self._on_fenced(fenced)
            log.warning("%d completions refused: their instances belong to another worker", fenced)
