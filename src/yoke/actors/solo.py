"""`Solo`: a suspect runs alone on its worker, so that a call that kills workers is found.

A suspect is a queue row claimed by a worker that died (`ClaimedEvent.suspect`): it may be
the call that killed it. Before a suspect runs, every call of this worker in flight ends and
no other starts; then the caller marks its row `solo` in the store, so that if this worker
dies while it runs, whoever recovers the row knows it ran alone and charges it a crash attempt
(a dead letter at `CRASH_ATTEMPTS`). Rows that were only claimed, or in flight beside it, are
never charged: each runs alone in turn, ends, and is a suspect no more. One suspect at a time;
while one waits or runs, other calls wait (only after a worker died, and only for its rows).

`Dispatch` counts the calls it starts (`started`, `ended`) and asks here before each one. This
module only counts and waits: no store, no kernel.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class Solo:
    def __init__(self) -> None:
        self.running = 0  # calls of this worker in flight
        self._suspects = 0  # waiting for their turn, or running alone
        self._one = asyncio.Lock()
        self._changed = asyncio.Event()

    def __repr__(self) -> str:
        return f"Solo(running={self.running}, suspects={self._suspects})"

    @property
    def holding(self) -> bool:
        """Whether a call must wait (`turn`): a suspect waits to run alone, or runs."""
        return self._suspects > 0

    def started(self) -> None:
        self.running += 1

    def ended(self) -> None:
        self.running -= 1
        self._changed.set()

    async def turn(self) -> None:
        """Wait until no suspect waits or runs."""
        while self._suspects:
            await self._change()

    @contextlib.asynccontextmanager
    async def alone(self) -> AsyncIterator[None]:
        """Run the body with no other call of this worker in flight, none starting."""
        self._suspects += 1
        try:
            async with self._one:
                while self.running:
                    await self._change()
                self.running += 1
                try:
                    yield
                finally:
                    self.running -= 1
        finally:
            self._suspects -= 1
            self._changed.set()

    async def _change(self) -> None:
        self._changed.clear()
        await self._changed.wait()
