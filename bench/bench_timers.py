"""Timer lateness of the executions' timers: delayed starts, fired by the one timer loop.

N delayed starts (`start(..., at=)`) of a no-op workflow, due evenly over `spread` seconds, are
scheduled ahead of their times on one server with no limits; then the loop fires them. Two
figures per timer, in ms: due -> fired (the statement that moved it to QUEUED on this server
returned: the timer machinery's own lateness, what issue 27 bounds at 20 ms p99) and due ->
granted (its execution's slot taken: the lateness a workflow sees, admission included). p50,
p99 and max per run; the median (min-max) of `runs` runs per store, on fresh databases. A sleep's
wake-up and a signal wait's timeout are the same rows (a `wake` start) on the same loop.
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

    fired_late: list[float] = []
    granted_late: list[float] = []
    done = asyncio.Event()

    def on_grant(start: yoke.Start) -> None:
        if start.due_at is not None:
            granted_late.append((time.time() - start.due_at) * 1000)
            if len(granted_late) == n:
                done.set()

    def fired_all() -> None:
        if not admit and len(fired_late) == n:
            done.set()

    async with app.running():
        assert app.store is not None
        time_verbs: Any = app.store.time
        fire = time_verbs.fire

        async def timed_fire(*args: Any, **kwargs: Any) -> list[StartRow]:
            rows: list[StartRow] = await fire(*args, **kwargs)
            now = time.time()
            fired_late.extend((now - (r.due_at_ms or 0) / 1000) * 1000 for r in rows)
            fired_all()
            return rows if admit else []  # not admitted: the timer loop's own lateness

        time_verbs.fire = timed_fire
        app.executions.add_grant_listener(on_grant)
        # How long scheduling takes here, from a first slice; the timers are due after it.
        t0 = time.time()
        probe = 200
        await asyncio.gather(*(app.executions.start(noop, at=t0 + 3600) for _ in range(probe)))
        per = (time.time() - t0) / probe
        base = time.time() + per * n * 3 + 5.0  # a loaded machine schedules slower
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
        return {"fired": percentiles(fired_late)}
    return {"fired": percentiles(fired_late), "granted": percentiles(granted_late)}


async def main(quick: bool) -> None:
    runs = 3
    n, spread = (2_000, 2.0) if quick else (10_000, 5.0)
    results: dict[str, list[dict[str, dict[str, float]]]] = {}
    alone: dict[str, list[dict[str, dict[str, float]]]] = {}
    for kind in ("sqlite", "postgres"):
        results[kind], alone[kind] = [], []
        async with fresh_databases(kind) as fresh:
            for _ in range(runs):  # taking turns: both see the same load
                results[kind].append(await one_run(await fresh(), n, spread))
                alone[kind].append(await one_run(await fresh(), n, spread, admit=False))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "timers.json").write_text(
        json.dumps({"n": n, "spread": spread, "admitted": results, "alone": alone})
    )
    print("## Timers: delayed starts and wake-ups on the one timer loop\n")
    print(
        f"{n:,} delayed starts of a no-op workflow due evenly over {spread:g} s, scheduled "
        f"ahead, one server, no limits; lateness in ms after the due time; {runs} runs, "
        f"median (min-max); {machine()}.\n"
    )
    print(
        "| store | fired, loop alone: p50 | p99 | fired, admitted: p50 | p99 | max "
        "| granted: p50 | p99 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for kind, label in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        rs, alone_rs = results[kind], alone[kind]

        def f(what: str, p: str, rs: list[dict[str, dict[str, float]]] = rs) -> str:
            return Figure.of([r[what][p] for r in rs]).fmt(digits=1)

        print(
            f"| {label} | {f('fired', 'p50', alone_rs)} | {f('fired', 'p99', alone_rs)} "
            f"| {f('fired', 'p50')} | {f('fired', 'p99')} | {f('fired', 'max')} "
            f"| {f('granted', 'p50')} | {f('granted', 'p99')} |"
        )
    print(
        "\n_Loop alone_: the fired starts are not admitted (the timer machinery's own lateness, "
        "due -> the firing statement returned); _admitted_: each fired start is admitted and "
        "its no-op execution runs in the same process while the loop fires the next ones."
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    asyncio.run(main(parser.parse_args().quick))
    sys.stdout.flush()
