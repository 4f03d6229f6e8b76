"""`yoke demo`: one tenant floods a fair scheduler and a plain FIFO, side by side, live.

The same arrivals go to both: a heavy tenant sends 100x the load of each light tenant, and the
heavy load alone is more than the 8 slots can serve. Under the FIFO the light tenants wait behind
an ever-growing flood; under the fair scheduler they wait about one task time. Real asyncio tasks,
real timers; nothing is simulated but the work itself (a sleep).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from yoke.fair import Scheduler, create_fair_scheduler, create_scheduler

SLOTS = 8
TASK_SECONDS = 0.010  # mean task time; capacity is SLOTS / TASK_SECONDS = 800 tasks/s
LIGHT_RATE = 8.0  # tasks/s per light tenant
FLOOD_FACTOR = 100  # the flood sends 100x a light tenant's load: 800/s, all of the capacity
LIGHT_TENANTS = ("ada", "bob", "cyd", "dee", "eve")
FLOOD = "flood"


@dataclass
class TenantLog:
    submitted: int = 0
    waits: list[float] = field(default_factory=list)

    def percentile(self, q: float) -> float | None:
        if not self.waits:
            return None
        ordered = sorted(self.waits)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Lane:
    title: str
    sched: Scheduler
    logs: dict[str, TenantLog] = field(default_factory=dict)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def submit(self, tenant: str, work: Callable[[], Awaitable[None]]) -> None:
        log = self.logs.setdefault(tenant, TenantLog())
        log.submitted += 1
        queued_at = time.monotonic()

        async def run() -> None:
            log.waits.append(time.monotonic() - queued_at)
            await work()

        task = asyncio.create_task(self._guarded(self.sched.schedule(run, tenant=tenant)))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    @staticmethod
    async def _guarded(awaitable: Awaitable[None]) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await awaitable  # the demo cancels what is still queued when it ends


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:,.0f}"


def _table(lane: Lane) -> Table:
    table = Table(title=lane.title, title_style="bold", expand=True)
    for column in ("tenant", "sent", "started", "queued", "p50 wait ms", "p99 wait ms"):
        table.add_column(column, justify="left" if column == "tenant" else "right")
    stats = lane.sched.stats().tenants
    for tenant in (FLOOD, *LIGHT_TENANTS):
        log = lane.logs.get(tenant, TenantLog())
        tstats = stats.get(tenant)
        style = "red" if tenant == FLOOD else ""
        table.add_row(
            Text(tenant, style=style),
            f"{log.submitted:,}",
            f"{len(log.waits):,}",
            f"{tstats.queued if tstats else 0:,}",
            _ms(log.percentile(0.5)),
            _ms(log.percentile(0.99)),
        )
    return table


def _view(lanes: list[Lane], elapsed: float, seconds: float, width: int) -> Group:
    grid = Table.grid(expand=True)
    tables = [_table(lane) for lane in lanes]
    if width >= 110:  # side by side when the terminal is wide enough, else one above the other
        grid.add_column()
        grid.add_column()
        grid.add_row(*tables)
    else:
        grid.add_column()
        for table in tables:
            grid.add_row(table)
    head = Text.assemble(
        ("yoke demo", "bold"),
        f"  {SLOTS} slots, tasks of ~{TASK_SECONDS * 1000:.0f} ms; '{FLOOD}' sends "
        f"{FLOOD_FACTOR}x the load of each light tenant  ",
        (f"{elapsed:4.1f}/{seconds:.0f} s", "cyan"),
    )
    return Group(head, grid)


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What one scheduler did for the light tenants, in seconds, and the flood's share."""

    scheduler: str
    light_p50: float | None
    light_p99: float | None
    light_max: float | None
    flood_share: float | None


def _outcomes(lanes: list[Lane]) -> list[Outcome]:
    out = []
    for lane in lanes:
        logs = [lane.logs.get(t, TenantLog()) for t in LIGHT_TENANTS]
        light = TenantLog(waits=[w for log in logs for w in log.waits])
        started = sum(len(log.waits) for log in lane.logs.values())
        flood = len(lane.logs.get(FLOOD, TenantLog()).waits)
        out.append(
            Outcome(
                scheduler=lane.title,
                light_p50=light.percentile(0.5),
                light_p99=light.percentile(0.99),
                light_max=max(light.waits, default=None),
                flood_share=flood / started if started else None,
            )
        )
    return out


def _summary(outcomes: list[Outcome]) -> Table:
    table = Table(title="Summary: light tenants' waits (ms) and the flood's share of starts")
    table.add_column("scheduler", no_wrap=True)
    for column in ("light p50", "light p99", "light max", "flood share"):
        table.add_column(column, justify="right")
    for o in outcomes:
        share = "-" if o.flood_share is None else f"{o.flood_share:.0%}"
        table.add_row(o.scheduler, _ms(o.light_p50), _ms(o.light_p99), _ms(o.light_max), share)
    return table


async def _arrivals(lanes: list[Lane], seconds: float, rng: random.Random) -> None:
    """Poisson arrivals per tenant, each one submitted to every lane at the same moment."""
    rates = {FLOOD: LIGHT_RATE * FLOOD_FACTOR, **dict.fromkeys(LIGHT_TENANTS, LIGHT_RATE)}
    total = sum(rates.values())
    tenants, weights = list(rates), list(rates.values())
    deadline = time.monotonic() + seconds
    next_at = time.monotonic()
    while next_at < deadline:
        next_at += rng.expovariate(total)
        delay = next_at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tenant = rng.choices(tenants, weights)[0]
        duration = rng.expovariate(1 / TASK_SECONDS)
        for lane in lanes:
            lane.submit(tenant, functools.partial(asyncio.sleep, duration))


async def run_demo(
    seconds: float = 12.0, *, console: Console | None = None, seed: int = 1
) -> list[Outcome]:
    console = console or Console()
    lanes = [
        Lane("fair (create_fair_scheduler)", create_fair_scheduler(SLOTS)),
        Lane("FIFO (create_scheduler)", create_scheduler(SLOTS)),
    ]
    started = time.monotonic()
    arrivals = asyncio.create_task(_arrivals(lanes, seconds, random.Random(seed)))
    width = console.width
    with Live(_view(lanes, 0, seconds, width), console=console, refresh_per_second=8) as live:
        while not arrivals.done():
            await asyncio.wait({arrivals}, timeout=0.25)
            live.update(_view(lanes, time.monotonic() - started, seconds, width))
    await arrivals
    for lane in lanes:
        for task in list(lane.tasks):
            task.cancel()
        await asyncio.gather(*lane.tasks)
    outcomes = _outcomes(lanes)
    console.print()
    console.print(_summary(outcomes))
    return outcomes
