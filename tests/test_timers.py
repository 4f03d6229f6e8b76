"""The one timer loop (`yoke.timers.TimerDispatch`) over any `TimerSource`, with a fake clock:
it fires exactly what is due (or due within `ahead`, for a source that holds what it fired
until its time), in order, each once; it sleeps until the next one; and a source that fires
fewer than it was handed (another process took the rest) loses none of its later timers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from yoke.clock import ManualClock
from yoke.timers import TimerDispatch


@dataclass(frozen=True)
class Tick:
    timer_id: int
    fire_at_ms: int


class Source:
    def __init__(self, ticks: list[Tick], *, taken_elsewhere: set[int] | None = None) -> None:
        self.pending = sorted(ticks, key=lambda t: (t.fire_at_ms, t.timer_id))
        self.fired: list[int] = []
        self.elsewhere = taken_elsewhere or set()

    async def upcoming(self, *, limit: int, after: tuple[int, int] | None) -> list[Tick]:
        rows = [t for t in self.pending if after is None or (t.fire_at_ms, t.timer_id) > after]
        return rows[:limit]

    async def fire(self, due: Sequence[Tick], *, now: float) -> int:
        took = [t for t in due if t.fire_at_ms <= now * 1000 and t.timer_id not in self.elsewhere]
        self.fired += [t.timer_id for t in took]
        gone = {t.timer_id for t in due if t.fire_at_ms <= now * 1000}
        self.pending = [t for t in self.pending if t.timer_id not in gone]
        return len(took)


def at(clock: ManualClock, seconds: float) -> int:
    return int((clock.wall() + seconds) * 1000)


async def test_it_fires_what_is_due_in_order_and_sleeps_until_the_next() -> None:
    clock = ManualClock()
    ticks = [Tick(i, at(clock, 1.0 + i)) for i in range(3)]
    source = Source(ticks)
    loop = TimerDispatch(source=source, clock=clock, on_fired=lambda: None, batch_size=2)
    assert await loop.fire_due() == 1.0  # nothing due: until the first
    assert source.fired == []
    clock.advance(2.0)
    assert await loop.fire_due() == 1.0  # the first two, then the third in a second
    assert source.fired == [0, 1] and loop.fired == 2
    clock.advance(1.0)
    await loop.fire_due()
    assert source.fired == [0, 1, 2]
    assert loop.stats().held == 0


async def test_ahead_fires_early_by_at_most_its_lead() -> None:
    clock = ManualClock()
    source = Source([Tick(1, at(clock, 1.0)), Tick(2, at(clock, 1.2))])
    loop = TimerDispatch(source=source, clock=clock, on_fired=lambda: None, ahead=0.05)
    assert abs(await loop.fire_due() - 0.95) < 1e-6  # woken 50 ms before the first
    clock.advance(0.95)
    await loop.fire_due()
    assert source.fired == [1]  # due in 50 ms: fired now; the next, 250 ms away, is not
    clock.advance(0.2)
    await loop.fire_due()
    assert source.fired == [1, 2]


async def test_timers_another_process_took_are_not_counted_and_the_rest_still_fire() -> None:
    clock = ManualClock()
    source = Source([Tick(i, at(clock, 0.5)) for i in range(4)], taken_elsewhere={1, 3})
    loop = TimerDispatch(source=source, clock=clock, on_fired=lambda: None)
    clock.advance(1.0)
    await loop.fire_due()
    assert source.fired == [0, 2] and loop.fired == 2 and loop.stats().held == 0
