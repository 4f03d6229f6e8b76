"""Benchmark of yoke.executions: granted starts per second with no limits, and start-to-grant
latency when a slot frees with 1,000 sessions queued, on SQLite and PostgreSQL, beside a
baseline of a plain `INSERT ... RETURNING` of the same start row in the same run, through the
bare driver, one commit each (what a naive durable queue pays per job).

    .venv/bin/python -m bench.bench_executions [--quick] [--runs N] [--pg URL]

Every figure is the median of several runs (min-max shown). Results go to
bench/results/executions.json and a markdown section is printed. PostgreSQL runs on a fresh
database created on the server of `--pg` (default: postgres@127.0.0.1:5432) and dropped after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from psycopg_pool import AsyncConnectionPool

from bench.common import fresh_databases
from yoke.app import App, open_store
from yoke.config import Settings
from yoke.executions import Context, Limits, StartStatus

RESULTS = Path(__file__).resolve().parent / "results" / "executions.json"
CONCURRENCY = 16


def settings(url: str) -> Settings:
    return Settings(
        database_url=url,
        slot_poll_interval=1.0,
        heartbeat_interval=5.0,
        pg_pool_max=CONCURRENCY + 4,
    )


async def granted_per_second(url: str, n: int) -> float:
    """n starts from CONCURRENCY tasks, no limits: grants per second (executions run too)."""
    app = App(settings=settings(url))

    @app.workflow("noop")
    async def noop(ctx: Context, input: Any) -> Any:
        return None

    async with app.running():

        async def worker(count: int) -> None:
            for i in range(count):
                s = await app.executions.start(noop, {"i": i})
                assert s.status is StartStatus.GRANTED

        t0 = time.perf_counter()
        await asyncio.gather(*[worker(n // CONCURRENCY) for _ in range(CONCURRENCY)])
        elapsed = time.perf_counter() - t0
    return (n // CONCURRENCY * CONCURRENCY) / elapsed


_INSERT = (
    "INSERT INTO yoke_starts (start_id, kind, workflow, session, tenant, priority, input, "
    "fingerprint, status, instance_id, created_at) VALUES ({}) RETURNING seq"
)


async def baseline_inserts_per_second(url: str, n: int) -> float:
    """The floor of a naive durable queue: the same start row written with a plain
    INSERT ... RETURNING through the bare driver, one transaction (one commit) each, by
    CONCURRENCY tasks: SQLite through one connection on its own thread, PostgreSQL through a
    pool of CONCURRENCY autocommit connections."""
    store = open_store(url, settings(url))
    await store.open()  # the schema
    await store.close()

    def params(i: int) -> tuple[Any, ...]:
        row = (
            str(uuid.uuid4()),
            "START",
            "noop",
            "default",
            "default",
            0,
            json.dumps({"i": i}),
            "",
        )
        return (*row, "QUEUED", "bench", time.time())

    if url.startswith("sqlite:"):
        conn = sqlite3.connect(
            url.removeprefix("sqlite:///"), isolation_level=None, check_same_thread=False
        )
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        sql = _INSERT.format(", ".join("?" * 11))
        executor = ThreadPoolExecutor(max_workers=1)
        loop = asyncio.get_running_loop()

        async def insert(i: int) -> None:
            await loop.run_in_executor(executor, lambda: conn.execute(sql, params(i)).fetchall())

        try:
            return await _rate(insert, n)
        finally:
            executor.shutdown()
            conn.close()
    sql = _INSERT.format(", ".join(["%s"] * 11))
    async with AsyncConnectionPool(
        url, min_size=CONCURRENCY, max_size=CONCURRENCY, kwargs={"autocommit": True}, open=False
    ) as pool:

        async def insert_pg(i: int) -> None:
            async with pool.connection() as c:
                await (await c.execute(sql, params(i))).fetchone()

        return await _rate(insert_pg, n)


async def _rate(insert: Callable[[int], Awaitable[None]], n: int) -> float:
    async def worker(count: int) -> None:
        for i in range(count):
            await insert(i)

    t0 = time.perf_counter()
    await asyncio.gather(*[worker(n // CONCURRENCY) for _ in range(CONCURRENCY)])
    return (n // CONCURRENCY * CONCURRENCY) / (time.perf_counter() - t0)


async def handoff_latency(url: str, sessions: int) -> dict[str, float]:
    """max_running=1 and `sessions` starts queued, one per session; each execution is a no-op.
    Latency = from the moment one execution's body returns (its slot then frees) to the moment
    the next execution's body begins: finish + wake + pick + grant transaction + task start."""
    marks: list[tuple[float, float]] = []
    app = App(settings=settings(url), limits=Limits(max_running=1))
    gate = asyncio.Event()

    @app.workflow("step")
    async def step(ctx: Context, input: Any) -> Any:
        begin = time.perf_counter()
        if input.get("first"):
            await gate.wait()
        marks.append((begin, time.perf_counter()))
        return None

    async with app.running():
        first = await app.executions.start(step, {"first": True}, session="first")
        queued = [
            await app.executions.start(step, {"i": i}, session=f"s{i}") for i in range(sessions)
        ]
        assert all(s.status is StartStatus.QUEUED for s in queued)
        gate.set()
        last = queued[-1]
        got = await app.executions.wait_granted(last.start_id, timeout=600)
        assert got.execution_id is not None and first.execution_id is not None
        await app.executions.wait(got.execution_id, timeout=600)
    gaps = sorted((marks[i + 1][0] - marks[i][1]) * 1000 for i in range(len(marks) - 1))
    return {"p50_ms": _pct(gaps, 50), "p99_ms": _pct(gaps, 99), "handoffs": len(gaps)}


def _pct(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, round(p / 100 * (len(sorted_values) - 1))))
    return sorted_values[k]


def _median(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


async def run_backend(
    name: str, fresh_url: Callable[[], Awaitable[str]], *, n: int, sessions: int, runs: int
) -> dict[str, Any]:
    grants, inserts, p50, p99 = [], [], [], []
    for _ in range(runs):
        inserts.append(await baseline_inserts_per_second(await fresh_url(), n))
        grants.append(await granted_per_second(await fresh_url(), n))
        lat = await handoff_latency(await fresh_url(), sessions)
        p50.append(lat["p50_ms"])
        p99.append(lat["p99_ms"])
    return {
        "backend": name,
        "granted_starts_per_s": _median(grants),
        "baseline_insert_returning_per_s": _median(inserts),
        "handoff_p50_ms": _median(p50),
        "handoff_p99_ms": _median(p99),
        "n": n,
        "sessions_queued": sessions,
        "runs": runs,
        "concurrency": CONCURRENCY,
    }


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small N, for a smoke run")
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument(
        "--pg",
        default=os.environ.get(
            "YOKE_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
    )
    ap.add_argument("--no-pg", action="store_true")
    args = ap.parse_args()
    server: str = args.pg
    n = 320 if args.quick else 3200
    sessions = 200 if args.quick else 1000
    runs = args.runs or 3

    results: list[dict[str, Any]] = []
    for backend in ("sqlite",) if args.no_pg else ("sqlite", "postgres"):
        async with fresh_databases(backend, server) as urls:
            results.append(await run_backend(backend, urls, n=n, sessions=sessions, runs=runs))

    doc = {
        "benchmark": "executions",
        "quick": args.quick,
        "python": platform.python_version(),
        "machine": f"{platform.machine()} x{os.cpu_count()}",
        "results": results,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    print(markdown(doc))


def markdown(doc: dict[str, Any]) -> str:
    def f(m: dict[str, float], fmt: str) -> str:
        return f"{m['median']:{fmt}} ({m['min']:{fmt}}-{m['max']:{fmt}})"

    lines = [
        "## Executions: admission throughput and hand-off latency",
        "",
        f"Python {doc['python']}, {doc['machine']}; medians of {doc['results'][0]['runs']} runs "
        f"(min-max); {CONCURRENCY} concurrent callers.",
        "",
        "| backend | granted starts/s (no limits) | baseline INSERT ... RETURNING/s | "
        "hand-off p50 ms | hand-off p99 ms | sessions queued |",
        "|---|---|---|---|---|---|",
    ]
    for r in doc["results"]:
        lines.append(
            f"| {r['backend']} | {f(r['granted_starts_per_s'], ',.0f')} | "
            f"{f(r['baseline_insert_returning_per_s'], ',.0f')} | "
            f"{f(r['handoff_p50_ms'], '.2f')} | {f(r['handoff_p99_ms'], '.2f')} | "
            f"{r['sessions_queued']} |"
        )
    lines += [
        "",
        "A granted start = log the start, take the ledger slots and create the "
        "execution (one transaction, since the start fits at once), and its no-op execution's "
        "finish: two transactions, each in a batch that concurrent starts share (one commit "
        "per batch). The baseline is one commit per row. "
        "Hand-off = from one execution's body returning to the next one's body beginning "
        "(finish, wake, kernel pick, grant transaction, task start).",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    asyncio.run(main())
