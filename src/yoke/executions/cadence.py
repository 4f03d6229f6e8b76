"""When a schedule's ticks fall, and what a ticker does with the ticks that have passed.

Pure: no clock, no store, no asyncio; every time is epoch seconds given by the caller, and a
tick is a whole millisecond (its idempotency key names it). A cron expression (five fields:
minute, hour, day of month, month, day of week) is read by cronsim in the schedule's time zone
(zoneinfo), so daylight-saving changes follow cron's usual rule as cronsim implements it: a
time that does not exist on the spring-forward day fires at the first minute after the jump
(02:30 in Europe/Berlin fires at 03:00), and a time that occurs twice on the fall-back day
fires once, at its first occurrence. `every` ticks fall on multiples of its period since the
epoch, so every server, and a server after a restart, agrees on them.

`plan` is the whole catch-up rule: a tick that passed less than `grace` seconds ago is late and
is started; older ones were missed (no server ran the ticker then): with `catch_up="one"` the
latest missed tick stands for all of them (one start), with `"skip"` none is started.

This module must never read a clock or touch the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from yoke.errors import BadType, BadValue

CatchUp = Literal["one", "skip"]
CATCH_UPS: tuple[CatchUp, ...] = ("one", "skip")
MAX_CRON = 200  # characters of a cron expression
MIN_EVERY = 1.0  # seconds: the shortest period
MAX_EVERY = 366 * 86400.0  # seconds: the longest period
MAX_SCAN = 1_000  # missed ticks of a cron schedule counted one by one, at most
MAX_LATE = 100  # late ticks started in one plan; the older of more are counted missed


@dataclass(frozen=True, kw_only=True, slots=True)
class Cadence:
    """A cron expression in a time zone, or a period in seconds (exactly one of them)."""

    cron: str | None = None
    every: float | None = None
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.every is None):
            raise BadValue("a schedule needs exactly one of cron= and every=")
        if not isinstance(self.timezone, str) or not 0 < len(self.timezone) <= 64:
            raise BadValue("timezone must be an IANA time zone name such as 'Europe/Berlin'")
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            raise BadValue(f"unknown time zone {self.timezone!r}") from None
        if self.every is not None:
            every = self.every
            if isinstance(every, bool) or not isinstance(every, int | float):
                raise BadType(f"every must be a number of seconds, not {type(every).__name__}")
            if not MIN_EVERY <= every <= MAX_EVERY:  # NaN fails this too
                raise BadValue(f"every must be {MIN_EVERY:g}-{MAX_EVERY:g} seconds, got {every!r}")
            return
        cron = self.cron
        if not isinstance(cron, str):
            raise BadType(f"cron must be a str, not {type(cron).__name__}")
        if len(cron) > MAX_CRON or len(cron.split()) != 5:
            raise BadValue(
                "cron must be five fields (minute hour day-of-month month day-of-week), "
                f"at most {MAX_CRON} characters, got {cron[:MAX_CRON]!r}"
            )
        try:
            CronSim(cron, datetime.now(ZoneInfo(self.timezone)))
        except CronSimError as exc:
            raise BadValue(f"bad cron expression {cron!r}: {exc}") from None

    def describe(self) -> str:
        if self.every is not None:
            return f"every {self.every:g}s"
        return f"{self.cron} ({self.timezone})"

    def next_after(self, t: float) -> float:
        """The first tick strictly after `t`."""
        if self.every is not None:
            period = round(self.every * 1000)
            return (_ms(t) // period + 1) * period / 1000
        # cronsim works in whole minutes: from the minute of `t`, the first match after it.
        for tick in CronSim(self._expr(), self._minute(t, 0)):
            if tick.timestamp() > t:
                return tick.timestamp()
        raise BadValue(f"cron {self.cron!r} never fires")  # pragma: no cover (cronsim checks)

    def last_before(self, t: float) -> float:
        """The last tick strictly before `t`."""
        if self.every is not None:
            period = round(self.every * 1000)
            return ((_ms(t) - 1) // period) * period / 1000
        for tick in CronSim(self._expr(), self._minute(t, 60), reverse=True):
            if tick.timestamp() < t:
                return tick.timestamp()
        raise BadValue(f"cron {self.cron!r} never fired")  # pragma: no cover

    def at_or_after(self, t: float) -> float:
        """The first tick at or after `t` (ticks are whole milliseconds)."""
        return self.next_after(t - 0.001)

    def count(self, first: float, last: float) -> int:
        """Ticks from the tick `first` to the tick `last`, both counted; a cron schedule's
        are counted one by one up to `MAX_SCAN`."""
        if self.every is not None:
            return round((last - first) / self.every) + 1
        n, t = 1, first
        while t < last and n < MAX_SCAN:
            t, n = self.next_after(t), n + 1
        return n

    def _expr(self) -> str:
        assert self.cron is not None
        return self.cron

    def _minute(self, t: float, plus: int) -> datetime:
        """`t`'s minute (plus `plus` seconds) as a time in the schedule's zone."""
        return datetime.fromtimestamp(t // 60 * 60 + plus, ZoneInfo(self.timezone))


def _ms(t: float) -> int:
    return int(t * 1000 // 1)


def tick_ms(t: float) -> int:
    """A tick's name: its time in whole milliseconds."""
    return round(t * 1000)


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """What to do with the ticks due by `now`: start `starts` (tick times, oldest first),
    count `missed` (stood for by a start of catch_up "one", or over the scan's bounds) and
    `skipped` (catch_up "skip"), and look again at `next_at`."""

    starts: tuple[float, ...]
    missed: int
    skipped: int
    next_at: float


def plan(cadence: Cadence, due: float, now: float, *, grace: float, catch_up: CatchUp) -> Plan:
    """The ticks from `due` (the schedule's next tick) to `now`, by the catch-up rule."""
    lo = now - grace
    late: list[float] = []
    t = due if due >= lo else cadence.at_or_after(lo)
    while t <= now:
        late.append(t)
        t = cadence.next_after(t)
    old, last_old = 0, None
    if due < lo:  # ticks no server started in time
        last_old = cadence.last_before(lo)
        old = cadence.count(due, last_old)
    if len(late) > MAX_LATE:
        old += len(late) - MAX_LATE
        last_old = late[-MAX_LATE - 1]
        late = late[-MAX_LATE:]
    starts: list[float] = []
    missed = skipped = 0
    if last_old is not None and catch_up == "one":
        starts.append(last_old)
        missed = old - 1
    elif last_old is not None:
        skipped = old
    starts.extend(late)
    return Plan(starts=tuple(starts), missed=missed, skipped=skipped, next_at=t)
