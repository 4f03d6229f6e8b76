"""The one timer machinery: fire due timers exactly once, on time, from any number of processes.

Every timer of yoke goes through a `TimerDispatch`: an actor's `ctx.schedule` (its event is
appended when due, `actors/timers.py`), and an execution's wake-ups (a sleep's end, a signal
wait's timeout, a delayed start: `executions/timers.py`). Each kind keeps its rows where its
own transaction lives and says how to read and fire them (a `TimerSource`); the loop is shared.

The loop holds the earliest pending timers in memory (read ahead, a page of `batch_size`),
sleeps until the first is due, and fires everything due in one store call (`ahead` seconds
early, for a source that holds what it fired until its due time). Firing is the
source's: it must take each timer at most once however many processes fire at the same time
(delete it, or move it out of its pending state, under a row lock or a single writer), and
answer how many it took. So the work between "due" and "fired" is one round trip: reading
happens before the due time, not after it, and adds no lateness.

While `run()` runs, a second task reads the next page (after the last timer held) when the
held ones run low, so that a steady stream of timers never waits for a read either. The
firing loop reads the first page itself: when it holds nothing, when a timer was scheduled
(`wake()`: a NOTIFY on PostgreSQL, in-process on SQLite: the new timer may come first), after
an error, and at the latest after the backup poll. A timer another process was firing when it
died stays pending and is found by such a read. `next_sleep` is the timing decision, a pure
function of `now`, so it is tested with a fake clock; both tasks change the held list only
between awaits. `stats()` names the loop's state (`waiting`: asleep until a wake, the next due
timer or the backup poll).

This module must never name a store backend or a kind of timer, and reads time only through
its `Clock`.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from yoke.clock import Clock
from yoke.errors import YokeError
from yoke.retry import Backoff, RetryPolicy, severity

log = logging.getLogger("yoke.timers")


class Due(Protocol):
    """A pending timer as a source reads it: when it is due, and its order among equals."""

    @property
    def fire_at_ms(self) -> int: ...

    @property
    def timer_id(self) -> int: ...


T = TypeVar("T", bound=Due)


class TimerSource(Protocol[T]):
    """Where one kind of timer lives: its pending timers in (fire_at_ms, timer_id) order, and
    how due ones fire (each at most once across every process; the count this call fired)."""

    async def upcoming(self, *, limit: int, after: tuple[int, int] | None) -> list[T]: ...

    async def fire(self, due: Sequence[T], *, now: float) -> int: ...


def next_sleep(now: float, next_fire_at_ms: int | None, poll: float) -> float:
    """Seconds to sleep before looking again: until the next timer, at most `poll`."""
    if next_fire_at_ms is None:
        return poll
    return min(poll, max(0.0, next_fire_at_ms / 1000.0 - now))


def _fire_at(t: Due) -> int:
    return t.fire_at_ms


@dataclass(frozen=True, kw_only=True, slots=True)
class TimerStats:
    fired: int  # timers this loop fired (not those another worker fired first)
    held: int  # pending timers read and held here, earliest first
    reads: int  # first-page reads done (at boot, on a wake, after an error, on the backup poll)
    waiting: bool  # asleep until a wake, the next held timer or the backup poll


class TimerDispatch(Generic[T]):
    def __init__(
        self,
        *,
        source: TimerSource[T],
        clock: Clock,
        on_fired: Callable[[], None],
        poll_interval: float = 10.0,
        batch_size: int = 500,
        retry: RetryPolicy | None = None,
        ahead: float = 0.0,
    ) -> None:
        self._source = source
        # Fire this many seconds before the due time: for a source that holds what it fired
        # until its time (the executions'), the store's round trip is then off the due time.
        self._ahead = ahead
        self._clock = clock
        self._on_fired = on_fired
        self._poll = poll_interval
        self._batch = batch_size
        self._retry = retry or RetryPolicy()
        self._wake = asyncio.Event()
        # The earliest pending timers as last read, by (fire_at_ms, timer_id); `_stale` asks
        # for a new first page (a timer was scheduled, or a fire failed). `_page` numbers the
        # first-page reads: a next page read before the latest one is dropped. `_more`: the
        # last page was full, so the table may hold later timers.
        self._upcoming: list[T] = []
        self._read_at = 0.0
        self._stale = True
        self._page = 0
        self._more = False
        self._low = asyncio.Event()  # the held timers run low: read the next page
        self._waiting = False
        self._reads = 0
        self.fired = 0

    def __repr__(self) -> str:
        return (
            f"TimerDispatch({type(self._source).__name__}, fired={self.fired}, "
            f"upcoming={len(self._upcoming)}, "
            f"more={self._more}, stale={self._stale}, waiting={self._waiting}, "
            f"poll={self._poll})"
        )

    def stats(self) -> TimerStats:
        return TimerStats(
            fired=self.fired, held=len(self._upcoming), reads=self._reads, waiting=self._waiting
        )

    @property
    def idle(self) -> bool:
        """Asleep with no wake pending: nothing fires until the next timer, poll or wake."""
        return self._waiting and not self._wake.is_set()

    def wake(self) -> None:
        """A timer was scheduled (here or, through NOTIFY, elsewhere): read again, it may be
        earlier than every timer held here."""
        self._stale = True
        self._wake.set()

    async def _read(self) -> None:
        # Cleared before the await: a wake() while the read runs asks for one more read.
        self._stale = False
        self._read_at = self._clock.monotonic()
        self._page += 1
        page = self._page
        got = await self._source.upcoming(limit=self._batch, after=None)
        self._reads += 1
        if page == self._page:
            self._upcoming, self._more = got, len(got) == self._batch

    async def _read_next_pages(self) -> None:
        """Keep the held timers topped up: read the page after the last one held when asked."""
        while True:
            await self._low.wait()
            self._low.clear()
            if not self._upcoming or not self._more or len(self._upcoming) > self._batch // 2:
                continue
            page, last = self._page, self._upcoming[-1]
            try:
                got = await self._source.upcoming(
                    limit=self._batch, after=(last.fire_at_ms, last.timer_id)
                )
            except YokeError as exc:  # the firing loop reads for itself when it runs out
                log.warning("reading the next timers failed: %s", exc)
                continue
            if page == self._page:  # no first page read meanwhile: `got` follows `last`
                self._upcoming.extend(got)
                self._more = len(got) == self._batch

    def _must_read(self) -> bool:
        return (
            self._stale
            or not self._upcoming
            or self._clock.monotonic() - self._read_at >= self._poll
        )

    async def fire_due(self) -> float:
        """Fire every due timer; returns how long to sleep before the next look."""
        while True:
            if self._must_read():
                await self._read()
            now = self._clock.wall() + self._ahead  # fire what is due by then
            n = bisect.bisect_right(self._upcoming, int(now * 1000), key=_fire_at)
            if not n:
                break
            due = self._upcoming[:n]
            try:
                fired = await self._source.fire(due, now=now)
            except BaseException:
                self._stale = True  # some may have fired (a lost reply): read what is left
                raise
            # The others were fired by another worker (or are being: if it dies first, they
            # are still in the table for the next read).
            del self._upcoming[:n]
            if fired:
                self.fired += fired
                self._on_fired()
            if len(self._upcoming) <= self._batch // 2 and self._more:
                self._low.set()
        nxt = self._upcoming[0].fire_at_ms if self._upcoming else None
        return next_sleep(self._clock.wall() + self._ahead, nxt, self._poll)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._read_next_pages(), name="yoke-timer-read-ahead")
            await self._fire_loop()

    async def _fire_loop(self) -> None:
        backoff = Backoff(self._retry)
        while True:
            self._wake.clear()
            try:
                delay = await self.fire_due()
                backoff.ok()
            except YokeError as exc:
                delay = backoff.failed(exc)
                log.log(severity(exc), "firing timers failed (retrying in %.2fs): %s", delay, exc)
            self._waiting = True
            try:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
            finally:
                self._waiting = False
