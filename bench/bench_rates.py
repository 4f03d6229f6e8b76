"""Benchmark of a tenant's start rate across two servers (PostgreSQL): how close to the setting
the admitted rate stays, and what each check costs, for three ways of sharing one rate.

    .venv/bin/python -m bench.bench_rates [--quick] [--runs N]

Two server processes offer starts of one tenant, open loop, at `OFFERED` times the setting in
all, either split evenly (balanced) or all at one server (skewed), for `SECONDS`; each checks
every arrival with the strategy under test and counts what it admitted:
- `row`: one statement per start on the tenant's bucket row, GCRA on the database's clock
  (`TenantVerbs.take_tokens`; a refusal reads the row once more, for its Retry-After);
- `share`: each server a local token bucket of half the rate and half the burst (no store);
- `lease` (what yoke does, `executions.tenant_book.Rates`): each server takes 50 ms worth of
  tokens at a time from the same row and spends them locally, and remembers a refusal until
  its tokens will be there.
Admitted is given over the ideal (burst + rate x seconds); cost as store statements per request
(admitted or not) and the check's median latency. Medians (min-max) of `--runs` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import Figure, fresh_databases, machine
from yoke.app import upgrade

RESULTS = Path(__file__).resolve().parent / "results" / "rates.json"
RATE = 100.0  # starts a second
BURST = 10
OFFERED = 3.0  # offered load over the rate
SECONDS = 10.0
STRATEGIES = ("row", "share", "lease")
LOADS = ("balanced", "skewed")


class LocalBucket:
    """GCRA in process (the `share` strategy, and the spending side of `lease`)."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst, self.tat = rate, burst, 0.0

    def take(self, now: float) -> bool:
        tat = max(self.tat, now)
        if tat + (1 - self.burst) / self.rate > now:
            return False
        self.tat = tat + 1 / self.rate
        return True


async def serve(strategy: str, url: str, offered: float, seconds: float) -> dict[str, Any]:
    """One server: arrivals at `offered` a second for `seconds`, each checked by `strategy`."""
    from yoke.app import open_store
    from yoke.clock import SystemClock
    from yoke.errors import RateLimited
    from yoke.executions.tenant_book import Rates

    store = open_store(url)
    await store.open()
    actors: Any = store.actors
    statements = 0

    class Counted:  # the store's buckets, counting the statements they run
        async def take_tokens(self, tenant: str, kind: str, **kw: Any) -> Any:
            nonlocal statements
            got = await actors.take_tokens(tenant, kind, **kw)
            statements += 1 if got.granted else 2  # a refusal reads its Retry-After
            return got

    buckets = Counted()
    rates = Rates(buckets, SystemClock())
    local = LocalBucket(RATE / 2, BURST / 2)
    admitted = 0
    latencies: list[float] = []

    async def check() -> bool:
        if strategy == "share":
            return local.take(time.monotonic())
        if strategy == "row":
            got = await buckets.take_tokens("acme", "starts", n=1, rate=RATE, burst=BURST)
            return bool(got.granted)
        try:
            await rates.take("acme", "starts", (RATE, BURST))
        except RateLimited:
            return False
        return True

    async def arrival() -> None:
        nonlocal admitted
        t = time.perf_counter()
        ok = await check()
        latencies.append(time.perf_counter() - t)
        admitted += ok

    print("READY", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    tasks: set[asyncio.Task[None]] = set()
    t0 = time.monotonic()
    n = 0
    if offered > 0:
        while (due := t0 + n / offered) < t0 + seconds:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            task = asyncio.ensure_future(arrival())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            n += 1
    await asyncio.gather(*tasks)
    await store.close()
    return {
        "offered": n,
        "admitted": admitted,
        "statements": statements,
        "check_p50_us": statistics.median(latencies) * 1e6 if latencies else 0.0,
    }


async def one_run(url: str, strategy: str, load: str, seconds: float) -> dict[str, float]:
    total = RATE * OFFERED
    shares = (total / 2, total / 2) if load == "balanced" else (total, 0.0)
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.bench_rates", "--serve", strategy, url,
            str(share), str(seconds),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )
        for share in shares
    ]  # fmt: skip
    for p in procs:
        assert p.stdout is not None
        assert (await p.stdout.readline()).strip() == b"READY"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(b"go\n")
        await p.stdin.drain()
    answers = []
    for p in procs:
        out, _ = await p.communicate()
        answers.append(json.loads(out.decode().strip().splitlines()[-1]))
    admitted = sum(a["admitted"] for a in answers)
    offered = sum(a["offered"] for a in answers)
    statements = sum(a["statements"] for a in answers)
    ideal = BURST + RATE * seconds
    checks = [a["check_p50_us"] for a in answers if a["offered"]]
    return {
        "admitted_over_ideal": admitted / ideal,
        "statements_per_request": statements / offered if offered else 0.0,
        "check_p50_us": statistics.median(checks),
    }


async def main(quick: bool, runs: int) -> None:
    seconds = 3.0 if quick else SECONDS
    figures: dict[str, dict[str, list[dict[str, float]]]] = {}
    async with fresh_databases("postgres") as fresh:
        for _ in range(runs):
            for strategy in STRATEGIES:
                for load in LOADS:
                    url = await fresh()
                    await upgrade(url)
                    got = await one_run(url, strategy, load, seconds)
                    figures.setdefault(strategy, {}).setdefault(load, []).append(got)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"machine": machine(), "figures": figures}, indent=2))
    print("## Tenant rates across two servers (`bench_rates`)\n")
    print(
        f"One tenant's `executions.rate` of {RATE:g}/s (burst {BURST}), offered at "
        f"{OFFERED:g}x the rate for {seconds:g} s by two server processes on one PostgreSQL, "
        "evenly (balanced) or all at one of them (skewed). Admitted over the ideal "
        "(burst + rate x seconds): 1.00 is exact. Medians (min-max) of "
        f"{runs} run(s).\n"
    )
    print("| strategy | load | admitted / ideal | store statements per request | check p50 |")
    print("|---|---|---|---|---|")
    for strategy in STRATEGIES:
        for load in LOADS:
            rows = figures[strategy][load]
            ratio = Figure.of([r["admitted_over_ideal"] for r in rows])
            cost = Figure.of([r["statements_per_request"] for r in rows])
            p50 = Figure.of([r["check_p50_us"] for r in rows])
            print(
                f"| {strategy} | {load} | {ratio.fmt(digits=2)} | {cost.fmt(digits=2)} | "
                f"{p50.fmt(' µs')} |"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--serve", nargs=4, metavar=("STRATEGY", "URL", "OFFERED", "SECONDS"))
    args = parser.parse_args()
    if args.serve:
        strategy, url, offered, secs = args.serve
        result = asyncio.run(serve(strategy, url, float(offered), float(secs)))
        print(json.dumps(result), flush=True)
    else:
        asyncio.run(main(args.quick, args.runs or (1 if args.quick else 3)))
