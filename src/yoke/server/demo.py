"""`yoke demo`: the durable scheduler at work, with its dashboard.

It serves a small app (a workflow that records a step and does ~80 ms of work, a `refund`
workflow whose step is retried and fails for a card ending in 0000, an actor that counts
orders per tenant) with `yoke serve`'s server on an embedded SQLite file, sets limits
(4 slots), and sends real HTTP starts: one tenant floods 100x the load of each of five light
tenants, more than the slots can serve. A live terminal view shows each tenant's starts, queue
and waits while the dashboard (its URL is printed) shows the same from the server; after the
flood it prints a summary (the light tenants' p50/p99 wait, the flood's share of starts, Jain's
index, starts per second) and stops, or with `keep` serves on until Ctrl-C.

This module must never reach into the scheduler: it reads what the dashboard reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

import yoke
from yoke.executions import Limits
from yoke.server.asgi import Server
from yoke.server.recorder import percentile

SLOTS = 4
WORK_SECONDS = 0.08  # mean work per start: capacity SLOTS / WORK_SECONDS = 50 starts/s
LIGHT_RATE = 0.5  # starts/s per light tenant
FLOOD_FACTOR = 100  # the flood sends 100x a light tenant's load: 50/s, all of the capacity
LIGHT = ("ada", "bob", "cyd", "dee", "eve")
FLOOD = "flood"


def demo_app(database_url: str) -> yoke.App:
    app = yoke.App(database_url, limits=Limits(max_running=SLOTS, on_limit="queue"))

    @app.workflow()
    async def order(ctx: yoke.Context, input: Any) -> Any:
        seconds = float(input.get("seconds", WORK_SECONDS)) if isinstance(input, dict) else 0.0
        await ctx.step("work", asyncio.sleep, seconds)  # the work a real workflow would do
        await app.append("orders", {"tenant": ctx.session, "order": input}, tenant=ctx.session)
        return {"worked": seconds}

    @app.workflow(retry=yoke.Retry(max_attempts=3, backoff=0.05), timeout=30)
    async def refund(ctx: yoke.Context, input: Any) -> Any:
        card = str(input.get("card", "")) if isinstance(input, dict) else ""
        await ctx.step("validate", lambda: {"card": card[-4:]})
        return await ctx.step("pay back", _pay_back, card)  # retried, then FAILED if declined

    @app.actor(subscribe=["orders"], key="tenant")
    async def tally(actor: Any, event: Any) -> None:
        await actor.state.update(lambda s: {**s, "orders": s.get("orders", 0) + 1})

    return app


def _pay_back(card: str) -> dict[str, str]:
    if card.endswith("0000"):
        raise ConnectionError(f"the card network declined card ...{card[-4:]}")
    return {"refunded": card[-4:]}


def _free_port(preferred: int) -> int:
    for port in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            chosen: int = s.getsockname()[1]
            return chosen
    raise OSError("no free port on 127.0.0.1")


@dataclass(frozen=True, kw_only=True)
class Summary:
    seconds: float
    starts: int
    starts_per_second: float
    light_p50: float | None
    light_p99: float | None
    flood_p50: float | None
    flood_share: float | None
    jain: float | None
    url: str


class Demo:
    def __init__(self, server: Server, url: str, seconds: float, seed: int) -> None:
        self.server = server
        self.url = url
        self.seconds = seconds
        self.rng = random.Random(seed)
        self.sent: Counter[str] = Counter()
        self.began = time.monotonic()
        self.tasks: set[asyncio.Task[None]] = set()

    async def flood(self, client: httpx.AsyncClient) -> None:
        """Poisson arrivals per tenant, each a real `POST /v1/starts`."""
        rates = {FLOOD: LIGHT_RATE * FLOOD_FACTOR, **dict.fromkeys(LIGHT, LIGHT_RATE)}
        tenants, weights = list(rates), list(rates.values())
        total = sum(weights)
        deadline = self.began + self.seconds
        next_at = time.monotonic()
        while next_at < deadline:
            next_at += self.rng.expovariate(total)
            delay = next_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tenant = self.rng.choices(tenants, weights)[0]
            work = round(self.rng.expovariate(1 / WORK_SECONDS), 4)
            task = asyncio.create_task(self._post(client, tenant, work))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _post(self, client: httpx.AsyncClient, tenant: str, work: float) -> None:
        self.sent[tenant] += 1
        with contextlib.suppress(httpx.HTTPError):
            await client.post(
                "/v1/starts",
                json={"workflow": "order", "input": {"seconds": work}, "session": tenant},
            )

    def window(self) -> int:
        return int(time.monotonic() - self.began) + 2

    def view(self) -> Group:
        rec = self.server.state.recorder
        served = rec.sessions(self.window())
        kernel = self.server.app.executions.kernel
        table = Table(expand=True)
        for column in ("tenant", "sent", "started", "queued", "p50 wait ms", "p99 wait ms"):
            table.add_column(column, justify="left" if column == "tenant" else "right")
        for tenant in (FLOOD, *LIGHT):
            won = served.get(tenant)
            waits = won.waits if won else ()
            table.add_row(
                Text(tenant, style="red" if tenant == FLOOD else ""),
                f"{self.sent[tenant]:,}",
                f"{won.starts if won else 0:,}",
                f"{kernel.lane_stats(tenant).queued:,}",
                _ms(percentile(waits, 0.5)),
                _ms(percentile(waits, 0.99)),
            )
        elapsed = min(time.monotonic() - self.began, self.seconds)
        head = Text.assemble(
            ("yoke demo", "bold"),
            f"  durable starts over HTTP, {SLOTS} slots, work ~{WORK_SECONDS * 1000:.0f} ms; "
            f"'{FLOOD}' sends {FLOOD_FACTOR}x each light tenant's load  ",
            (f"{elapsed:4.1f}/{self.seconds:.0f} s", "cyan"),
            "\ndashboard: ",
            (f"{self.url}/ui/", "underline"),
        )
        return Group(head, table)

    def summary(self) -> Summary:
        rec = self.server.state.recorder
        seconds = self.window()
        served = rec.sessions(seconds)
        light = [w for t in LIGHT if (s := served.get(t)) for w in s.waits]
        flood = served.get(FLOOD)
        total = rec.totals(seconds)[0]
        jains = [j for j in rec.series(seconds, [])["jain"] if j is not None]
        elapsed = time.monotonic() - self.began
        return Summary(
            seconds=elapsed,
            starts=total,
            starts_per_second=total / elapsed if elapsed else 0.0,
            light_p50=percentile(light, 0.5),
            light_p99=percentile(light, 0.99),
            flood_p50=percentile(flood.waits, 0.5) if flood else None,
            flood_share=(flood.starts / total) if flood and total else None,
            jain=statistics.fmean(jains) if jains else None,
            url=self.url,
        )


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:,.0f}"


def _summary_table(s: Summary) -> Table:
    table = Table(title="Summary", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    share = "-" if s.flood_share is None else f"{s.flood_share:.0%}"
    table.add_row("light tenants' wait p50 / p99 (ms)", f"{_ms(s.light_p50)} / {_ms(s.light_p99)}")
    table.add_row("flood's wait p50 (ms)", _ms(s.flood_p50))
    table.add_row("flood's share of starts", share)
    table.add_row("Jain's index (mean per second)", "-" if s.jain is None else f"{s.jain:.2f}")
    table.add_row("starts per second", f"{s.starts_per_second:.1f} ({s.starts:,} in all)")
    return table


async def run(
    seconds: float = 20.0,
    *,
    keep: bool = False,
    port: int = 8000,
    seed: int = 1,
    console: Console | None = None,
    directory: Path | None = None,
) -> Summary:
    console = console or Console()
    with contextlib.ExitStack() as stack:
        folder = directory or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        app = demo_app(f"sqlite:///{folder}/demo.db")
        server = Server(app, tokens=None)
        chosen = _free_port(port)
        if port and chosen != port:
            console.print(f"port {port} on 127.0.0.1 is taken: serving on port {chosen} instead")
        url = f"http://127.0.0.1:{chosen}"
        config = uvicorn.Config(
            server, host="127.0.0.1", port=chosen, lifespan="on", log_level="warning"
        )
        web = uvicorn.Server(config)
        serving = asyncio.create_task(web.serve())
        while not web.started:
            if serving.done():
                await serving  # it failed to start: raise why
            await asyncio.sleep(0.05)  # waiting for uvicorn to listen
        demo = Demo(server, url, seconds, seed)
        limits = httpx.Limits(max_connections=64)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:
            arrivals = asyncio.create_task(demo.flood(client))
            with Live(demo.view(), console=console, refresh_per_second=4) as live:
                while not arrivals.done():
                    await asyncio.wait({arrivals}, timeout=0.25)
                    live.update(demo.view())
            await arrivals
            if demo.tasks:
                await asyncio.wait(demo.tasks, timeout=5)
        summary = demo.summary()
        console.print()
        console.print(_summary_table(summary))
        if keep:
            console.print(f"Serving on {url}/ui/ (database {folder}/demo.db); Ctrl-C to stop.")
            with contextlib.suppress(asyncio.CancelledError):
                await serving
        web.should_exit = True
        await serving
        return summary
