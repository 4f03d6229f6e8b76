"""yoke.fair against plain asyncio, measured in the same run.

1. Unlimited path: ns that `await s.schedule(fn)` adds over a bare `await fn()` on a no-op, and
   the time ratio on a task that yields once (targets: <= 100 ns, <= 1.05). Timed with the
   thread's CPU clock, so that other processes on the shared machine do not count.
2. Capped path: 100,000 tasks through 64 slots against `asyncio.Semaphore(64)`, as throughput
   ratios (targets: >= 0.9 with 1 tenant, >= 0.8 with 10,000 tenants), for no-op tasks (which
   never contend: each finishes before the next starts) and for tasks that yield once (which
   keep all 64 slots busy and a queue behind them).

Run: `.venv/bin/python -m bench.bench_fair [--quick]`; prints a markdown section.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.common import Figure
from yoke.fair import create_fair_scheduler, create_scheduler


async def noop() -> None:
    return None


async def yield_once() -> None:
    await asyncio.sleep(0)


async def _unlimited_rounds(runs: int, n: int) -> dict[str, list[float]]:
    """All variants inside one event loop, interleaved round by round, so that a slow moment
    of the shared machine falls on every variant of that round alike."""
    sched = create_fair_scheduler()
    schedule = sched.schedule
    clock = time.thread_time_ns
    out: dict[str, list[float]] = {"added": [], "added_tenant": [], "ratio_yield": []}
    for _ in range(runs):
        t0 = clock()
        for _ in range(n):
            await noop()
        t1 = clock()
        for _ in range(n):
            await schedule(noop)
        t2 = clock()
        for _ in range(n):
            await sched.schedule(noop, tenant="acme")
        t3 = clock()
        for _ in range(n // 4):
            await yield_once()
        t4 = clock()
        for _ in range(n // 4):
            await schedule(yield_once)
        t5 = clock()
        out["added"].append(((t2 - t1) - (t1 - t0)) / n)
        out["added_tenant"].append(((t3 - t2) - (t1 - t0)) / n)
        out["ratio_yield"].append((t5 - t4) / (t4 - t3))
    return out


def unlimited(runs: int, n: int) -> dict[str, Figure]:
    gc.disable()
    try:
        rounds = asyncio.run(_unlimited_rounds(runs, n))
    finally:
        gc.enable()
    return {
        "ns_added_noop": Figure.of(rounds["added"]),
        "ns_added_noop_attr_lookup_and_tenant": Figure.of(rounds["added_tenant"]),
        "time_ratio_yield_once": Figure.of(rounds["ratio_yield"]),
    }


async def _through_semaphore(fn: Callable[[], Awaitable[None]], n: int) -> float:
    sem = asyncio.Semaphore(64)

    async def one() -> None:
        async with sem:
            await fn()

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return time.perf_counter() - start


async def _through_yoke(
    fn: Callable[[], Awaitable[None]], n: int, tenants: int, fair: bool
) -> float:
    sched = create_fair_scheduler(64) if fair else create_scheduler(64)
    names = [f"tenant-{i}" for i in range(tenants)]
    start = time.perf_counter()
    await asyncio.gather(*(sched.schedule(fn, tenant=names[i % tenants]) for i in range(n)))
    elapsed = time.perf_counter() - start
    assert sched.running == 0 and sched.queued == 0
    return elapsed


def capped(runs: int, n: int) -> dict[str, Figure]:
    cases = {
        "fair_1_tenant_noop": (noop, 1, True),
        "fair_10000_tenants_noop": (noop, 10_000, True),
        "fair_1_tenant_yield": (yield_once, 1, True),
        "fair_10000_tenants_yield": (yield_once, 10_000, True),
        "fifo_1_tenant_yield": (yield_once, 1, False),
    }
    ratios: dict[str, list[float]] = {name: [] for name in cases}
    sem_rate: dict[str, list[float]] = {"noop": [], "yield": []}
    for _ in range(runs):
        for name, (fn, tenants, fair) in cases.items():
            gc.collect()
            base = asyncio.run(_through_semaphore(fn, n))
            gc.collect()
            ours = asyncio.run(_through_yoke(fn, n, tenants, fair))
            ratios[name].append(base / ours)  # throughput ratio = time(semaphore) / time(yoke)
            sem_rate["noop" if fn is noop else "yield"].append(n / base)
    out = {f"throughput_ratio_{name}": Figure.of(values) for name, values in ratios.items()}
    out["semaphore_tasks_per_s_noop"] = Figure.of(sem_rate["noop"])
    out["semaphore_tasks_per_s_yield"] = Figure.of(sem_rate["yield"])
    return out


def render(unl: dict[str, Figure], cap: dict[str, Figure], runs: int, n_cap: int) -> str:
    lines = [
        "## yoke.fair (in-process)",
        "",
        f"Medians of {runs} runs (min-max); each ratio against plain asyncio in the same run.",
        "",
        "| unlimited path (`concurrency=math.inf`) | figure | target |",
        "|---|---|---|",
        f"| ns added per `await s.schedule(fn)` over `await fn()`, no-op, bound method | "
        f"{unl['ns_added_noop'].fmt(' ns')} | <= 100 ns |",
        f"| same with `s.schedule(fn, tenant=...)` looked up each call | "
        f"{unl['ns_added_noop_attr_lookup_and_tenant'].fmt(' ns')} | |",
        f"| time ratio, task that yields once | "
        f"{unl['time_ratio_yield_once'].fmt('', 3)} | <= 1.05 |",
        "",
        f"| capped path: {n_cap:,} tasks through 64 slots | throughput vs "
        "`asyncio.Semaphore(64)` | target |",
        "|---|---|---|",
        f"| fair, 1 tenant, no-op | {cap['throughput_ratio_fair_1_tenant_noop'].fmt('', 2)} "
        "| >= 0.9 |",
        f"| fair, 10,000 tenants, no-op | "
        f"{cap['throughput_ratio_fair_10000_tenants_noop'].fmt('', 2)} | >= 0.8 |",
        f"| fair, 1 tenant, yields once (slots full, queue behind) | "
        f"{cap['throughput_ratio_fair_1_tenant_yield'].fmt('', 2)} | |",
        f"| fair, 10,000 tenants, yields once | "
        f"{cap['throughput_ratio_fair_10000_tenants_yield'].fmt('', 2)} | |",
        f"| FIFO `create_scheduler`, 1 tenant, yields once | "
        f"{cap['throughput_ratio_fifo_1_tenant_yield'].fmt('', 2)} | |",
        "",
        f"Baseline `asyncio.Semaphore(64)`: {cap['semaphore_tasks_per_s_noop'].fmt(' tasks/s')} "
        f"no-op, {cap['semaphore_tasks_per_s_yield'].fmt(' tasks/s')} yield-once.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer, smaller runs")
    args = parser.parse_args()
    runs = 3 if args.quick else 7
    n_unl = 50_000 if args.quick else 300_000
    n_cap = 20_000 if args.quick else 100_000
    unl = unlimited(runs, n_unl)
    cap = capped(3 if args.quick else 5, n_cap)
    out = Path("bench/results")
    out.mkdir(parents=True, exist_ok=True)
    figures = {k: vars(v) for k, v in {**unl, **cap}.items()}
    (out / "fair.json").write_text(json.dumps(figures, indent=2))
    print(render(unl, cap, runs, n_cap))


if __name__ == "__main__":
    main()
