"""Benchmark of the HA fence: granted starts per second with every grant fenced (a leader of
`yoke serve --ha`) against the same without a fence, in the same run (PostgreSQL).

    .venv/bin/python -m bench.bench_ha [--quick] [--runs N]

Two measurements, each fenced and unfenced, in alternating order, on a fresh database each:
- in process: `CLIENTS` tasks calling `app.executions.start` of a no-op workflow in a closed
  loop until every execution has finished (as `bench_admission`), with an App run plain and
  with `YOKE_HA=1` (the clock starts once it leads);
- store: `CLIENTS` tasks granting batches of `BATCH` fresh starts (logged by the grant) through
  `grant_starts`, with no fence set and with the leader's fence set, so the fence's own cost (one
  more statement in the transaction, the shared advisory lock) is not hidden by the rest.
Ratios (fenced / unfenced) are taken within each run; figures are medians (min-max). Target:
fenced >= 0.9x unfenced. Traffic goes only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yoke
from bench.common import fresh_databases, machine
from yoke.app import open_store
from yoke.config import Settings
from yoke.store import GrantRequest, NewExecution, NewStart, Slot, StartKind
from yoke.store.leaseverbs import Fence

RESULTS = Path(__file__).resolve().parent / "results" / "ha.json"
CLIENTS = 64
BATCH = 16
SLOTS = (Slot(key="global", cap=None), Slot(key="session:s", cap=None))


def _app(url: str, *, ha: bool) -> yoke.App:
    app = yoke.App(url, settings=Settings.from_env().with_(ha=ha))

    @app.workflow("noop")
    async def noop(ctx: yoke.Context, input: Any) -> Any:
        return None

    return app


async def in_process(url: str, n: int, *, fenced: bool) -> float:
    app = _app(url, ha=fenced)
    async with app.running():
        lead = app.leadership
        if lead is not None:  # the first election is not part of the measurement
            await lead.until(lambda: lead.is_leader, timeout=30)
            assert lead.is_leader
        ex = app.executions

        async def caller(count: int) -> None:
            for _ in range(count):
                s = await ex.start("noop")
                assert s.status is yoke.StartStatus.GRANTED

        per = n // CLIENTS
        t0 = time.perf_counter()
        await asyncio.gather(*(caller(per) for _ in range(CLIENTS)))
        await app.shutdown(60)
        elapsed = time.perf_counter() - t0
    return per * CLIENTS / elapsed


def _request(now: float) -> GrantRequest:
    start_id, execution_id = str(uuid.uuid4()), str(uuid.uuid4())
    start = NewStart(
        start_id=start_id,
        kind=StartKind.START,
        workflow="noop",
        session="s",
        tenant="s",
        priority=0,
        input="null",
        fingerprint="",
        principal=None,
        idempotency_key=None,
        source_execution_id=None,
        from_step=None,
        instance_id="bench",
        created_at=now,
    )
    execution = NewExecution(
        execution_id=execution_id,
        start_id=start_id,
        workflow="noop",
        session="s",
        tenant="s",
        input="null",
        parent_id=None,
        restarted_from=None,
        resumed_from=None,
        instance_id="bench",
        created_at=now,
    )
    return GrantRequest(start_id=start_id, execution=execution, slots=SLOTS, log=start)


async def store_grants(url: str, n: int, *, fenced: bool) -> float:
    backend = open_store(url, Settings.from_env().with_(pg_pool_max=CLIENTS // 4))
    await backend.open()
    try:
        store = backend.executions
        if fenced:
            lease = await backend.actors.leases.acquire_lease("admission", holder="bench", ttl=3600)
            assert lease is not None
            store.set_fence(Fence(name="admission", epoch=lease.epoch))
        now = time.time()
        batches = [[_request(now) for _ in range(BATCH)] for _ in range(n // BATCH)]
        queue = iter(batches)

        async def granter() -> None:
            for batch in queue:
                await store.grant_starts(batch, now=now)

        t0 = time.perf_counter()
        await asyncio.gather(*(granter() for _ in range(CLIENTS // 4)))
        elapsed = time.perf_counter() - t0
    finally:
        await backend.close()
    return len(batches) * BATCH / elapsed


async def one_run(urls: Callable[[], Awaitable[str]], n: int, i: int) -> dict[str, float]:
    out: dict[str, float] = {}
    order = (False, True) if i % 2 == 0 else (True, False)
    for fenced in order:
        name = "fenced" if fenced else "unfenced"
        out[f"in_process_{name}"] = await in_process(await urls(), n, fenced=fenced)
    for fenced in order:
        name = "fenced" if fenced else "unfenced"
        out[f"store_{name}"] = await store_grants(await urls(), n * 2, fenced=fenced)
    return out


def _figure(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small N, for a smoke run")
    ap.add_argument("--runs", type=int, default=None)
    args = ap.parse_args()
    n = 640 if args.quick else 3200
    runs = args.runs or (3 if args.quick else 5)
    async with fresh_databases("postgres") as urls:
        results = [await one_run(urls, n, i) for i in range(runs)]
    summary = {key: _figure([r[key] for r in results]) for key in results[0]}
    for what in ("in_process", "store"):
        summary[f"{what}_ratio"] = _figure(
            [r[f"{what}_fenced"] / r[f"{what}_unfenced"] for r in results]
        )
    doc = {
        "benchmark": "ha",
        "quick": args.quick,
        "runs": runs,
        "starts_per_run": n,
        "clients": CLIENTS,
        "machine": machine(),
        "python": platform.python_version(),
        "summary": summary,
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    print(markdown(doc))


def markdown(doc: dict[str, Any]) -> str:
    s = doc["summary"]

    def f(m: dict[str, float], digits: int = 0) -> str:
        return f"{m['median']:,.{digits}f} ({m['min']:,.{digits}f}-{m['max']:,.{digits}f})"

    return "\n".join(
        [
            "## The HA fence: fenced grants against unfenced ones (`bench_ha`)",
            "",
            f"PostgreSQL, {doc['runs']} runs, a fresh database per measurement, fenced and "
            "unfenced in alternating order; medians (min-max), ratios taken within each run. "
            f"In process: {doc['clients']} tasks calling `app.executions.start` of a no-op "
            f"workflow ({doc['starts_per_run']:,} starts) until every execution has finished, "
            "with the App plain and as the leader of an HA pair. Store: "
            f"{doc['clients'] // 4} tasks granting batches of {BATCH} fresh starts through "
            f"`grant_starts` ({doc['starts_per_run'] * 2:,} starts), without and with the "
            "leader's fence. Target: fenced >= 0.9x unfenced.",
            "",
            "| measurement | unfenced starts/s | fenced starts/s | fenced x unfenced |",
            "| --- | --- | --- | --- |",
            f"| in process | {f(s['in_process_unfenced'])} | {f(s['in_process_fenced'])} | "
            f"{f(s['in_process_ratio'], 2)} |",
            f"| store grants | {f(s['store_unfenced'])} | {f(s['store_fenced'])} | "
            f"{f(s['store_ratio'], 2)} |",
        ]
    )


if __name__ == "__main__":
    asyncio.run(main())
