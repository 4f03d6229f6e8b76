"""The fair claim against the first-come claim (`YOKE_ACTOR_CLAIM`), in the same run.

1. Drain/s: N no-op events appended beforehand over 100 instances (one tenant, then ten
   tenants sharing them), drained by one worker (64 slots) in this process, from its start to
   its last durable completion; fair and first-come alternate run by run, and the figure is
   the ratio fair / first-come of each pair (target >= 0.9).
2. Light tenants' waits (the issue's scenario): one worker, 8 slots, `process()` takes 5 ms
   (T); one tenant appends 10,000 events over 100 instances (1,000 per call) while the worker
   runs, and right after five light tenants append 20 events each. The wait of a light event
   is from its append's commit to its `process()` start, in T (wall time: it includes every
   stall of the worker's event loop), and in rounds (the starts of any tenant in between, per
   slot: what the claim and the kernel decided); p50 and p99 over the light events; the
   flood's share of the starts from the light tenants' first start to their last;
   Jain's index over the six tenants' starts in that span. Ideal sfq (kernel alone): p50 8 T,
   p99 15 T, flood share 1/6.

Every figure: median (min-max) of several runs, a fresh database per run.
Run: `.venv/bin/python -m bench.bench_fairclaim [--quick]`; markdown on stdout, raw figures in
bench/results/fairclaim.json. PostgreSQL: `YOKE_BENCH_PG` (default postgres@127.0.0.1:5432).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench.common import Figure, fresh_databases, machine
from yoke.actors import ActorCtx, ActorRuntime, ActorSettings, Event, Queue
from yoke.actors.fairness import jain
from yoke.app import open_store

PG = os.environ.get("YOKE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
ROOT = Path(__file__).resolve().parents[1]
MODES = ("fair", "first-come")
T = 0.005
SLOTS = 8
LIGHT = [f"light{i}" for i in range(5)]
PER_LIGHT = 20
FLOOD = 10_000


async def drain_run(url: str, mode: str, n: int, tenants: int) -> float:
    store = open_store(url)
    await store.open()
    try:
        rt = ActorRuntime(settings=ActorSettings(worker_id="bench", concurrency=64, claim=mode))
        done = asyncio.Event()
        seen = 0

        @rt.actor(subscribe=["bench"], key="k")
        async def noop(ctx: ActorCtx, event: Event) -> None:
            nonlocal seen
            seen += 1
            if seen == n:
                done.set()

        per = n // tenants
        for t in range(tenants):
            for base in range(0, per, 1000):
                items = [{"k": i % 100} for i in range(base, min(per, base + 1000))]
                # Owned by the worker-to-be, as its own appends would be.
                events = rt.registry.new_events("bench", items, tenant=f"t{t}")
                await store.actors.append_events(events, owner="bench", now=time.time())
        async with rt.running(store.actors):
            t0 = time.perf_counter()
            await done.wait()
            drain = rt.drain
            assert drain is not None
            await drain.flush()
            t1 = time.perf_counter()
        return n / (t1 - t0)
    finally:
        await store.close()


async def light_run(url: str, mode: str, flood: int) -> dict[str, float]:
    store = open_store(url)
    await store.open()
    try:
        rt = ActorRuntime(settings=ActorSettings(worker_id="bench", concurrency=SLOTS, claim=mode))
        starts: list[tuple[float, str]] = []
        appended: dict[str, float] = {}
        began: dict[str, float] = {}
        done = asyncio.Event()

        @rt.actor(subscribe=["s"], key="k", queue=Queue(concurrency=1000))
        async def work(ctx: ActorCtx, event: Event) -> None:
            now = time.perf_counter()
            starts.append((now, ctx.tenant))
            if ctx.tenant != "flood":
                began[event.data["k"]] = now
                if len(began) == len(LIGHT) * PER_LIGHT:
                    done.set()
            await asyncio.sleep(T)

        async with rt.running(store.actors):
            for base in range(0, flood, 1000):
                rows = [{"k": f"f{i % 100}"} for i in range(base, base + 1000)]
                await rt.append_many("s", rows, tenant="flood")

            async def light(tenant: str) -> None:
                keys = [f"{tenant}-{i}" for i in range(PER_LIGHT)]
                await rt.append_many("s", [{"k": k} for k in keys], tenant=tenant)
                appended.update(dict.fromkeys(keys, time.perf_counter()))

            await asyncio.gather(*(light(t) for t in LIGHT))
            await asyncio.wait_for(done.wait(), 300)
        waits = sorted((began[k] - appended[k]) / T for k in appended)
        # The same waits counted in starts (any tenant's, between the append and its own
        # start) per slot: what the claim and the kernel decide, whatever the machine's load.
        rounds = sorted(
            sum(1 for t, _ in starts if appended[k] < t < began[k]) / SLOTS for k in appended
        )
        first, last = min(began.values()), max(began.values())
        span = [tenant for t, tenant in starts if first <= t <= last]
        counts = {t: span.count(t) for t in ["flood", *LIGHT]}
        return {
            "p50": statistics.median(waits),
            "p99": waits[max(0, round(0.99 * len(waits)) - 1)],
            "p50_rounds": statistics.median(rounds),
            "p99_rounds": rounds[max(0, round(0.99 * len(rounds)) - 1)],
            "flood_share": counts["flood"] / len(span),
            "jain": jain(counts.values()),
        }
    finally:
        await store.close()


def fmt(values: list[float], digits: int = 0) -> str:
    return Figure.of(values).fmt(digits=digits)


async def main(quick: bool) -> None:
    runs = 3
    n = 5_000 if quick else 20_000
    flood = 4_000 if quick else FLOOD
    figures: dict[str, Any] = {"n": n, "runs": runs, "flood": flood}
    backends = ("postgres", "sqlite")
    drains: dict[tuple[str, int, str], list[float]] = {}
    lights: dict[tuple[str, str], list[dict[str, float]]] = {}
    for kind in backends:
        async with fresh_databases(kind, PG) as fresh:
            for _ in range(runs):
                for tenants in (1, 10):
                    for mode in MODES:
                        rate = await drain_run(await fresh(), mode, n, tenants)
                        drains.setdefault((kind, tenants, mode), []).append(rate)
                for mode in MODES:
                    got = await light_run(await fresh(), mode, flood)
                    lights.setdefault((kind, mode), []).append(got)
    figures["drain_per_s"] = {f"{k}/{t} tenants/{m}": v for (k, t, m), v in drains.items()}
    figures["light"] = {f"{k}/{m}": v for (k, m), v in lights.items()}

    print("## Fair claim vs first-come claim\n")
    print(
        f"One worker in the bench's process; {runs} runs, median (min-max); {machine()}. "
        "Fair: each tenant holds at most its weighted share of 64 x (1 + 16) claimed rows, "
        "claimed again when a quarter is free; "
        "first-come: up to 2,048 rows held, claimed again when 500 slots are free.\n"
    )
    print(f"Drain of {n:,} no-op events over 100 instances, 64 slots:\n")
    print("| store | tenants | fair events/s | first-come events/s | fair / first-come, per run |")
    print("| --- | --- | --- | --- | --- |")
    for kind in backends:
        for tenants in (1, 10):
            fair, old = drains[(kind, tenants, "fair")], drains[(kind, tenants, "first-come")]
            ratio = fmt([f / o for f, o in zip(fair, old, strict=True)], 2)
            print(f"| {kind} | {tenants} | {fmt(fair)} | {fmt(old)} | {ratio} |")
    print(
        f"\nLight tenants' waits: 8 slots, process() {T * 1000:.0f} ms (T), a flood of "
        f"{flood:,} events appended live, then {len(LIGHT)} light tenants x {PER_LIGHT} events "
        "(ideal sfq: p50 8 T, p99 15 T, flood share 0.17):\n"
    )
    print(
        "| store | claim | light p50 (T) | light p99 (T) | p50 (rounds) | p99 (rounds) "
        "| flood share | Jain |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for kind in backends:
        for mode in MODES:
            rows = lights[(kind, mode)]
            print(
                f"| {kind} | {mode} | {fmt([r['p50'] for r in rows])} "
                f"| {fmt([r['p99'] for r in rows])} | {fmt([r['p50_rounds'] for r in rows], 1)} "
                f"| {fmt([r['p99_rounds'] for r in rows], 1)} "
                f"| {fmt([r['flood_share'] for r in rows], 2)} "
                f"| {fmt([r['jain'] for r in rows], 2)} |"
            )
    print()
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "fairclaim.json").write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    asyncio.run(main(parser.parse_args().quick))
