"""Timer lateness of the executions' timers: delayed starts, fired by the one timer loop.

N delayed starts (`start(..., at=)`) of a no-op workflow, due evenly over a few seconds, are
scheduled ahead of their times on one server with no limits; then the loop fires them. Per
timer, in ms after its due time: offered (the loop handed it to the server's queue: the timer
machinery's own lateness, what issue 27 bounds at 20 ms p99), measured once with nothing
admitted (the loop alone) and once admitted, with the lateness to its grant (its execution's
slot taken: what a workflow sees). p50, p99 and max per run; the median (min-max) of `runs`
runs per store, on fresh databases. A sleep's wake-up and a signal wait's timeout are the same
rows (a `wake` start) on the same loop.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yoke
from bench.common import Figure, fresh_databases, machine
from yoke.store import StartRow

RESULTS = Path(__file__).resolve().parent / "results"


def percentiles(late: Sequence[float]) -> dict[str, float]:
    s = sorted(late)
    return {"p50": s[len(s) // 2], "p99": s[int(len(s) * 0.99)], "max": s[-1], "n": len(s)}


async def one_run(
    url: str, n: int, spread: float, *, admit: bool = True
) -> dict[str, dict[str, float]]:
    app = yoke.App(url)

    @app.workflow()
    async def noop(ctx: yoke.Context, input: Any) -> Any:
        return None

    offered_late: list[float] = []
    granted_late: list[float] = []
    done = asyncio.Event()

    def on_grant(start: yoke.Start) -> None:
        if start.due_at is not None:
            granted_late.append((time.time() - start.due_at) * 1000)
            if len(granted_late) == n:
                done.set()

    async with app.running():
        source: Any = app.executions.timers._source  # the bench stamps what the loop hands on
        offer = source._admit

        def stamped(rows: Sequence[StartRow]) -> None:
            now = time.time()
            offered_late.extend((now - (r.due_at_ms or 0) / 1000) * 1000 for r in rows)
            if admit:
                offer(rows)
            elif len(offered_late) == n:
                done.set()

        source._admit = stamped
        app.executions.add_grant_listener(on_grant)
        t0 = time.time()
        probe = 500  # how long scheduling takes here, from a first slice
        await asyncio.gather(*(app.executions.start(noop, at=t0 + 3600) for _ in range(probe)))
        per = (time.time() - t0) / probe
        base = time.time() + per * n * 3 + 3.0  # a loaded machine schedules slower
        step = spread / n
        for chunk in range(0, n, 500):
            await asyncio.gather(
                *(
                    app.executions.start(noop, at=base + i * step)
                    for i in range(chunk, min(n, chunk + 500))
                )
            )
        if time.time() > base:
            raise RuntimeError("scheduling took longer than planned: timers were due already")
        await asyncio.wait_for(done.wait(), timeout=base + spread + 120 - time.time())
    if not admit:
        return {"offered": percentiles(offered_late)}
    return {"offered": percentiles(offered_late), "granted": percentiles(granted_late)}


async def main(quick: bool) -> None:
    runs = 3
    n, spread, admitted_spread = (2_000, 1.0, 4.0) if quick else (10_000, 5.0, 20.0)
    results: dict[str, list[dict[str, dict[str, float]]]] = {}
    alone: dict[str, list[dict[str, dict[str, float]]]] = {}
    for kind in ("sqlite", "postgres"):
        results[kind], alone[kind] = [], []
        async with fresh_databases(kind) as fresh:
            for _ in range(runs):  # taking turns: both see the same load
                alone[kind].append(await one_run(await fresh(), n, spread, admit=False))
                results[kind].append(await one_run(await fresh(), n, admitted_spread))
    RESULTS.mkdir(exist_ok=True)
    raw = {"n": n, "spread": spread, "admitted": results, "alone": alone}
    (RESULTS / "timers.json").write_text(json.dumps(raw))
    print("## Timers: delayed starts and wake-ups on the one timer loop\n")
    print(
        f"{n:,} delayed starts of a no-op workflow, scheduled ahead on one server with no "
        f"limits; lateness in ms after the due time; {runs} runs, median (min-max); "
        f"{machine()}.\n"
    )
    print(
        f"| store | loop alone ({n / spread:,.0f} timers/s): p50 | p99 | max "
        f"| admitted ({n / admitted_spread:,.0f} timers/s): offered p50 | p99 "
        "| granted p50 | p99 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for kind, label in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        rs, alone_rs = results[kind], alone[kind]

        def f(what: str, p: str, rs: list[dict[str, dict[str, float]]] = rs) -> str:
            return Figure.of([r[what][p] for r in rs]).fmt(digits=1)

        print(
            f"| {label} | {f('offered', 'p50', alone_rs)} | {f('offered', 'p99', alone_rs)} "
            f"| {f('offered', 'max', alone_rs)} | {f('offered', 'p50')} | {f('offered', 'p99')} "
            f"| {f('granted', 'p50')} | {f('granted', 'p99')} |"
        )
    print(
        "\n_Offered_: the loop handed the start to this server's queue (fired up to 50 ms early "
        "in the store, held until its due time); _loop alone_: nothing admitted (the timer "
        "machinery's own lateness); _admitted_: each start is admitted and its no-op execution "
        "runs in the same process (_granted_: its slot taken)."
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    asyncio.run(main(parser.parse_args().quick))
    sys.stdout.flush()
