"""Benchmark of admission against the store's limit: granted starts per second in process and
over HTTP, beside the same SQL statements run by the bare driver with no yoke Python on top.

    .venv/bin/python -m bench.bench_admission [--quick] [--runs N] [--no-pg] [--profile]

A granted start of a no-op workflow costs the store two batched transactions: the grant (log
the start, create its execution, take the ledger slots) and the finish (end the execution, free
the slots). The store's limit runs exactly those statements, with yoke's own query text,
through the bare driver, in batches of `CLIENTS` rows (the most that `CLIENTS` callers can put
in one batch), the grant of batch k beside the finish of batch k-1, with every parameter made
before the clock starts. Beside it, in the same run and on a fresh database each: `CLIENTS`
tasks calling `app.executions.start` in a closed loop (until every execution has finished),
and `CLIENTS` HTTP clients posting `/v1/starts` to a real `yoke serve` (uvicorn) on loopback,
then paced at half that saturated rate, each request timed from when it was due. Ratios are
taken within each run; figures are medians of the runs (min-max). Before the starts, the same
server answers `GET /healthz` (no scheduler) from the same clients: the HTTP stack's ceiling.
`--profile` also writes a cProfile of the in-process starts to
bench/results/admission_profile.txt. Traffic goes only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import platform
import pstats
import sqlite3
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg

import yoke
from bench.bench_executors import cpu_of
from bench.bench_server import ServeProcess, load, paced
from bench.bench_server import _request as http_request
from bench.common import fresh_databases, machine
from yoke.app import open_store
from yoke.store import sqlfiles

RESULTS = Path(__file__).resolve().parent / "results" / "admission.json"
PROFILE = Path(__file__).resolve().parent / "results" / "admission_profile.txt"
CLIENTS = 64
INSTANCE = "bench-limit"


# -- the store's limit: yoke's statements, bare driver -------------------------------------------
def _rows(n: int) -> list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """(start, execution, finish) parameters of n granted no-op starts, as yoke writes them."""
    now = time.time()
    out = []
    for _ in range(n):
        start_id, execution_id = str(uuid.uuid4()), str(uuid.uuid4())
        start = {
            "start_id": start_id,
            "kind": "start",
            "workflow": "noop",
            "session": "default",
            "tenant": "default",
            "priority": 0,
            "input": "null",
            "fingerprint": "",
            "principal": None,
            "idem_scope": "",
            "idempotency_key": None,
            "source_execution_id": None,
            "from_step": None,
            "instance_id": INSTANCE,
            "created_at": now,
            "execution_id": execution_id,
            "decided_at": now,
        }
        execution = {
            "execution_id": execution_id,
            "start_id": start_id,
            "workflow": "noop",
            "session": "default",
            "tenant": "default",
            "input": "null",
            "parent_id": None,
            "restarted_from": None,
            "resumed_from": None,
            "slot_keys": '["global", "session:default", "tenant:default", "workflow:noop"]',
            "instance_id": INSTANCE,
            "created_at": now,
            "leader_epoch": None,
        }
        finish = {"execution_id": execution_id, "status": "SUCCEEDED", "output": "null"}
        out.append((start, execution, finish | {"error": None}))
    return out


def _batches(n: int) -> list[list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]]:
    rows = _rows(n)
    return [rows[i : i + CLIENTS] for i in range(0, len(rows), CLIENTS)]


def _counts(batch: list[Any]) -> str:
    keys = ("global", "session:default", "tenant:default", "workflow:noop")
    return json.dumps(dict.fromkeys(keys, len(batch)))


async def _prepare(url: str) -> None:
    store = open_store(url)
    await store.open()  # the schema
    await store.executions.register_instance(INSTANCE, now=time.time())
    await store.close()


def _sqlite_connect(url: str) -> sqlite3.Connection:
    conn = sqlite3.connect(
        url.removeprefix("sqlite:///"), isolation_level=None, check_same_thread=False
    )
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


def _sqlite_grants(conn: sqlite3.Connection, q: dict[str, str], batch: list[Any]) -> None:
    if not batch:
        return
    for start, _, _ in batch:
        conn.execute(q["insert_start"], start)
    for _, execution, _ in batch:
        conn.execute(q["insert_execution"], execution)
    conn.execute(q["add_slot_counts"], {"counts": _counts(batch)}).fetchall()


def _sqlite_finishes(conn: sqlite3.Connection, q: dict[str, str], batch: list[Any]) -> None:
    if not batch:
        return
    for _, _, done in batch:
        conn.execute(q["finish_execution"], done | {"now": time.time()}).fetchall()
    conn.execute(q["release_slot_counts"], {"counts": _counts(batch)})


def _sqlite_transaction(conn: sqlite3.Connection, *writes: Callable[[], None]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("SAVEPOINT yoke_write")
    for write in writes:
        write()
    conn.execute("RELEASE yoke_write")
    conn.execute("COMMIT")


async def sqlite_limit(url: str, n: int) -> float:
    """One connection on its own thread, as the SQLite store has; a grant batch and a finish
    batch are each one BEGIN IMMEDIATE ... COMMIT with a savepoint, a statement per row."""
    await _prepare(url)
    q = sqlfiles.queries("sqlite")
    conn = _sqlite_connect(url)
    batches = _batches(n)

    def grant(batch: list[Any]) -> None:
        _sqlite_transaction(conn, lambda: _sqlite_grants(conn, q, batch))

    def finish(batch: list[Any]) -> None:
        _sqlite_transaction(conn, lambda: _sqlite_finishes(conn, q, batch))

    executor = ThreadPoolExecutor(max_workers=1)
    loop = asyncio.get_running_loop()
    try:
        t0 = time.perf_counter()
        for i, batch in enumerate(batches):
            await loop.run_in_executor(executor, grant, batch)
            if i:
                await loop.run_in_executor(executor, finish, batches[i - 1])
        await loop.run_in_executor(executor, finish, batches[-1])
        elapsed = time.perf_counter() - t0
    finally:
        executor.shutdown()
        conn.close()
    return sum(len(b) for b in batches) / elapsed


def _pg_grant_params(batch: list[Any]) -> dict[str, Any]:
    starts = [s for s, _, _ in batch]
    names = {
        "start_ids": "start_id",
        "kinds": "kind",
        "workflows": "workflow",
        "sessions": "session",
        "tenants": "tenant",
        "priorities": "priority",
        "inputs": "input",
        "fingerprints": "fingerprint",
        "principals": "principal",
        "idem_keys": "idempotency_key",
        "sources": "source_execution_id",
        "from_steps": "from_step",
        "execution_ids": "execution_id",
        "instance_ids": "instance_id",
        "created": "created_at",
    }
    params: dict[str, Any] = {k: [s[v] for s in starts] for k, v in names.items()}
    params["slot_keys"] = [e["slot_keys"] for _, e, _ in batch]
    params["now"] = time.time()
    params["fence_name"] = params["fence_epoch"] = None  # no HA: unfenced
    return params


def _pg_finish_params(batch: list[Any]) -> dict[str, Any]:
    done = [f for _, _, f in batch]
    return {
        "ids": [f["execution_id"] for f in done],
        "statuses": [f["status"] for f in done],
        "outputs": [f["output"] for f in done],
        "errors": [f["error"] for f in done],
        "now": time.time(),
    }


async def postgres_limit(url: str, n: int) -> float:
    """Two connections: the grant of batch k beside the finish of batch k-1, each yoke's one
    statement (`grant_logged_one`, `finish_executions_one`: parallel arrays bound in binary,
    autocommit, one round trip)."""
    await _prepare(url)
    q = sqlfiles.queries("postgres")
    batches = _batches(n)
    grants = await psycopg.AsyncConnection.connect(url, autocommit=True)
    finishes = await psycopg.AsyncConnection.connect(url, autocommit=True)

    granting = [_pg_grant_params(b) for b in batches]
    finishing = [_pg_finish_params(b) for b in batches]

    async def grant(i: int) -> None:
        await (await grants.execute(q["grant_logged_one"], granting[i])).fetchall()

    async def finish(i: int) -> None:
        await (await finishes.execute(q["finish_executions_one"], finishing[i])).fetchall()

    try:
        t0 = time.perf_counter()
        for i in range(len(batches)):
            await asyncio.gather(grant(i), *([finish(i - 1)] if i else []))
        await finish(len(batches) - 1)
        elapsed = time.perf_counter() - t0
    finally:
        await grants.close()
        await finishes.close()
    return sum(len(b) for b in batches) / elapsed


# -- the store's own tail: its statements alone, paced ----------------------------------------
Commit = Callable[[list[Any], list[Any]], Awaitable[None]]


async def _paced_group_commit(commit: Commit, rows: list[Any], rate: float) -> dict[str, float]:
    """Start i is due at i / rate. Each turn takes every start already due (up to CLIENTS)
    and commits its grant beside the finish of the previous turn's starts (a no-op execution
    ends at once): the best a group-committing scheduler can do with these statements. A
    start's latency runs from when it was due to when its grant was committed, the least a
    durable answer needs."""
    lat: list[float] = []
    taken = 0
    previous: list[Any] = []
    t0 = time.perf_counter()
    while taken < len(rows) or previous:
        due_now = min(len(rows), int((time.perf_counter() - t0) * rate) + 1)
        if due_now <= taken and not previous:
            await asyncio.sleep(taken / rate - (time.perf_counter() - t0))
            continue
        batch = rows[taken : min(due_now, taken + CLIENTS)]
        await commit(batch, previous)
        done = time.perf_counter() - t0
        lat.extend(done - i / rate for i in range(taken, taken + len(batch)))
        taken, previous = taken + len(batch), batch
    lat.sort()
    return {
        "p50_ms": 1000 * lat[len(lat) // 2],
        "p99_ms": 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))],
    }


async def store_paced(backend: str, url: str, rate: float, seconds: float) -> dict[str, float]:
    """The store's statements alone (bare driver, no yoke, no HTTP), paced at `rate`: the
    tail that the store and the disk set under that load on this machine."""
    await _prepare(url)
    rows = _rows(int(rate * seconds))
    q = sqlfiles.queries(backend)
    if backend == "sqlite":  # one writer connection on its thread; one transaction per turn
        conn = _sqlite_connect(url)
        executor = ThreadPoolExecutor(max_workers=1)
        loop = asyncio.get_running_loop()

        def write(grants: list[Any], finishes: list[Any]) -> None:
            _sqlite_transaction(
                conn,
                lambda: _sqlite_grants(conn, q, grants),
                lambda: _sqlite_finishes(conn, q, finishes),
            )

        async def sqlite_commit(grants: list[Any], finishes: list[Any]) -> None:
            await loop.run_in_executor(executor, write, grants, finishes)

        try:
            return await _paced_group_commit(sqlite_commit, rows, rate)
        finally:
            executor.shutdown()
            conn.close()
    # PostgreSQL: the grant and the previous finish on two connections at once, as yoke does
    grants = await psycopg.AsyncConnection.connect(url, autocommit=True)
    finishes = await psycopg.AsyncConnection.connect(url, autocommit=True)

    async def grant(batch: list[Any]) -> None:
        if batch:
            params = _pg_grant_params(batch)
            await (await grants.execute(q["grant_logged_one"], params)).fetchall()

    async def finish(batch: list[Any]) -> None:
        if batch:
            params = _pg_finish_params(batch)
            await (await finishes.execute(q["finish_executions_one"], params)).fetchall()

    async def postgres_commit(batch: list[Any], previous: list[Any]) -> None:
        await asyncio.gather(grant(batch), finish(previous))

    try:
        return await _paced_group_commit(postgres_commit, rows, rate)
    finally:
        await grants.close()
        await finishes.close()


# -- yoke in process ---------------------------------------------------------------------------
def _app(url: str) -> yoke.App:
    app = yoke.App(url)

    @app.workflow("noop")
    async def noop(ctx: yoke.Context, input: Any) -> Any:
        return None

    @app.workflow("one_step")
    async def one_step(ctx: yoke.Context, input: Any) -> Any:
        return await ctx.step("s", _nothing)

    return app


async def _nothing() -> None:
    return None


async def in_process(url: str, n: int, profile: cProfile.Profile | None = None) -> float:
    """CLIENTS tasks calling `app.executions.start` in a closed loop; the clock stops when
    every start was answered and every execution has finished (its finish committed)."""
    app = _app(url)
    async with app.running():
        ex = app.executions

        async def caller(count: int) -> None:
            for _ in range(count):
                s = await ex.start("noop")
                assert s.status is yoke.StartStatus.GRANTED

        per = n // CLIENTS
        if profile is not None:
            profile.enable()
        t0 = time.perf_counter()
        await asyncio.gather(*(caller(per) for _ in range(CLIENTS)))
        await app.shutdown(60)  # returns once every execution has finished
        elapsed = time.perf_counter() - t0
        if profile is not None:
            profile.disable()
    return per * CLIENTS / elapsed


async def cycle(url: str, n: int, workflow: str) -> float:
    """The whole cycle: CLIENTS tasks each starting `workflow` and waiting for its execution's
    end (`wait`), in a closed loop: start, grant, run, its steps, finish, answer."""
    app = _app(url)
    async with app.running():
        ex = app.executions

        async def caller(count: int) -> None:
            for _ in range(count):
                s = await ex.start(workflow)
                assert s.execution_id is not None
                done = await ex.wait(s.execution_id, timeout=60)
                assert done.status is yoke.ExecutionStatus.SUCCEEDED

        per = n // CLIENTS
        t0 = time.perf_counter()
        await asyncio.gather(*(caller(per) for _ in range(CLIENTS)))
        elapsed = time.perf_counter() - t0
    return per * CLIENTS / elapsed


# -- yoke over HTTP ------------------------------------------------------------------------------
async def over_http(url: str, n: int) -> dict[str, Any]:
    start = http_request("POST", "/v1/starts", b'{"workflow":"noop","input":null}')
    healthz = http_request("GET", "/healthz")
    server = ServeProcess(url)
    try:
        await server.ready()
        await load(server.port, start, n // 4)  # warm up
        bare = await load(server.port, healthz, n)  # the HTTP stack alone, same server
        saturated = await load(server.port, start, n)
        half = saturated["rps"] / 2
        cpu0, t0 = cpu_of(server.process.pid), time.perf_counter()
        seconds = max(2.0, n / half / 2)
        at_half = await paced(server.port, start, half, seconds=seconds)
        # How busy "half the saturated rate" kept the server: at half rate its batches are
        # smaller, so each start costs it more CPU than at saturation.
        half_busy = (cpu_of(server.process.pid) - cpu0) / (time.perf_counter() - t0)
        # The same pace of bare requests: the tail that the HTTP stack, the load generator and
        # the machine give any request at that rate, with no scheduler behind it.
        bare_half = await paced(server.port, healthz, half, seconds=seconds)
    finally:
        server.stop()
    return {
        "healthz_rps": bare["rps"],
        "rps": saturated["rps"],
        "p99_ms": saturated["p99_ms"],
        "half_rate": half,
        "half_seconds": seconds,
        "half_p50_ms": at_half["p50_ms"],
        "half_p99_ms": at_half["p99_ms"],
        "half_server_busy": half_busy,
        "bare_half_p50_ms": bare_half["p50_ms"],
        "bare_half_p99_ms": bare_half["p99_ms"],
        "statuses": saturated["statuses"],
    }


async def one_run(
    backend: str,
    urls: Callable[[], Awaitable[str]],
    n: int,
    profile: cProfile.Profile | None,
    http: bool = True,
) -> dict[str, Any]:
    limit = sqlite_limit if backend == "sqlite" else postgres_limit
    out: dict[str, Any] = {"limit": await limit(await urls(), n)}
    out["in_process"] = await in_process(await urls(), n, profile)
    out["cycle"] = await cycle(await urls(), n, "noop")
    out["cycle_step"] = await cycle(await urls(), n, "one_step")
    if not http:
        return out
    out["http"] = served = await over_http(await urls(), n)
    out["store_half"] = await store_paced(
        backend, await urls(), served["half_rate"], served["half_seconds"]
    )
    return out


def _figure(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    cycles = {
        "limit_rps": _figure([r["limit"] for r in runs]),
        "in_process_rps": _figure([r["in_process"] for r in runs]),
        "cycle_rps": _figure([r["cycle"] for r in runs]),
        "cycle_step_rps": _figure([r["cycle_step"] for r in runs]),
        "cycle_to_grants": _figure([r["cycle"] / r["in_process"] for r in runs]),
        "cycle_step_to_grants": _figure([r["cycle_step"] / r["in_process"] for r in runs]),
        "in_process_to_limit": _figure([r["in_process"] / r["limit"] for r in runs]),
    }
    if not all("http" in r for r in runs):
        return cycles
    return cycles | {
        "http_rps": _figure([r["http"]["rps"] for r in runs]),
        "http_to_in_process": _figure([r["http"]["rps"] / r["in_process"] for r in runs]),
        "healthz_rps": _figure([r["http"]["healthz_rps"] for r in runs]),
        "http_to_healthz": _figure([r["http"]["rps"] / r["http"]["healthz_rps"] for r in runs]),
        # If a start over HTTP cost its in-process work plus a bare request and nothing more,
        # HTTP x in process would be this: the bound the shared cores set on the ratio.
        "http_bound_to_in_process": _figure(
            [1 / (1 + r["in_process"] / r["http"]["healthz_rps"]) for r in runs]
        ),
        "http_to_bound": _figure(
            [
                r["http"]["rps"]
                / r["in_process"]
                * (1 + r["in_process"] / r["http"]["healthz_rps"])
                for r in runs
            ]
        ),
        "http_p99_ms": _figure([r["http"]["p99_ms"] for r in runs]),
        "half_rate": _figure([r["http"]["half_rate"] for r in runs]),
        "half_p50_ms": _figure([r["http"]["half_p50_ms"] for r in runs]),
        "half_p99_ms": _figure([r["http"]["half_p99_ms"] for r in runs]),
        "half_server_busy": _figure([r["http"]["half_server_busy"] for r in runs]),
        "bare_half_p50_ms": _figure([r["http"]["bare_half_p50_ms"] for r in runs]),
        "bare_half_p99_ms": _figure([r["http"]["bare_half_p99_ms"] for r in runs]),
        "store_half_p50_ms": _figure([r["store_half"]["p50_ms"] for r in runs]),
        "store_half_p99_ms": _figure([r["store_half"]["p99_ms"] for r in runs]),
        "statuses": [r["http"]["statuses"] for r in runs],
    }


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small N, for a smoke run")
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--no-pg", action="store_true", help="SQLite only")
    ap.add_argument("--profile", action="store_true", help="cProfile the in-process starts")
    ap.add_argument("--no-http", action="store_true", help="in process only (no yoke serve)")
    args = ap.parse_args()
    n = 640 if args.quick else 3200
    runs = args.runs or (3 if args.quick else 5)
    doc: dict[str, Any] = {
        "benchmark": "admission",
        "quick": args.quick,
        "runs": runs,
        "starts_per_run": n,
        "clients": CLIENTS,
        "machine": machine(),
        "python": platform.python_version(),
        "backends": {},
    }
    profiles: dict[str, cProfile.Profile] = {}
    loads = [os.getloadavg()[0]]  # the machine is shared: how busy it was is part of a figure
    for backend in ("sqlite",) if args.no_pg else ("sqlite", "postgres"):
        profile = cProfile.Profile() if args.profile else None
        async with fresh_databases(backend) as urls:
            results = [
                await one_run(backend, urls, n, profile, not args.no_http) for _ in range(runs)
            ]
        doc["backends"][backend] = summarize(results)
        loads.append(os.getloadavg()[0])
        if profile is not None:
            profiles[backend] = profile
    doc["load_average"] = loads
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    if profiles:
        text = io.StringIO()
        for backend, profile in profiles.items():
            text.write(f"=== {backend}: in-process granted starts, {runs} runs of {n}\n")
            stats = pstats.Stats(profile, stream=text)
            stats.sort_stats("tottime").print_stats(40)
            stats.sort_stats("cumulative").print_stats(60)
        PROFILE.write_text(text.getvalue())
    print(markdown(doc))


def markdown(doc: dict[str, Any]) -> str:
    def f(m: dict[str, float], digits: int = 0) -> str:
        return f"{m['median']:,.{digits}f} ({m['min']:,.{digits}f}-{m['max']:,.{digits}f})"

    lines = [
        "## Admission against the store's limit (`bench_admission`)",
        "",
        f"Granted starts of a no-op workflow, {doc['starts_per_run']:,} per measurement, "
        f"{doc['clients']} concurrent callers, {doc['runs']} runs, a fresh database each; medians "
        "(min-max), ratios taken within each run. Store's limit: yoke's own grant and finish "
        f"statements through the bare driver, in batches of {doc['clients']}, every parameter "
        "made beforehand (no yoke Python). In process: `app.executions.start` by "
        f"{doc['clients']} tasks, until every execution has finished. HTTP: `POST /v1/starts` "
        f"by {doc['clients']} keep-alive clients to `yoke serve` on loopback; then paced at half "
        "that rate, each request timed from when it was due. Bare `GET /healthz`: the same "
        "server and clients with no scheduler behind (the HTTP stack's own ceiling on these "
        "cores, shared by the load generator, uvicorn and the store); the bound on HTTP x in "
        "process is what that ratio would be if a start over HTTP cost its in-process work "
        "plus one bare request and nothing more: 1 / (1 + in process / healthz), per run. "
        "Bare `GET /healthz` paced at the same half rate gives the tail any request meets "
        "there (the HTTP stack, the load generator and the machine, no scheduler). Server CPU "
        "busy: the server process's CPU seconds per second during the paced half-rate run "
        "(1.00 = one core; its batches are smaller there than at saturation, so each start "
        "costs it more). The store's statements alone at that rate: the same grant and "
        "finish statements through the bare driver, no yoke and no HTTP, paced at the same "
        "half rate and group-committed (each turn commits the grants of every start already "
        "due beside the previous turn's finishes), each timed from when it was due to its "
        "grant's commit: the tail the store and the disk alone give at that load. "
        "Targets: in process >= 0.6x the limit; HTTP >= 0.6x in process; "
        "p99 < 20 ms at half the saturated rate.",
        "",
        "| store | store's limit starts/s | in process starts/s | x limit | HTTP starts/s "
        "| HTTP x in process | bare GET /healthz /s | HTTP x healthz | bound on HTTP x in "
        "process | HTTP p99 ms saturated | half rate /s | server CPU busy at half rate "
        "| p50 / p99 ms at half rate | bare GET /healthz at that rate, p50 / p99 ms "
        "| the store's statements alone at that rate, p50 / p99 ms |",
        "|" + " --- |" * 15,
    ]
    for backend, s in doc["backends"].items():
        if "http_rps" not in s:
            continue
        lines.append(
            f"| {backend} | {f(s['limit_rps'])} | {f(s['in_process_rps'])} | "
            f"{f(s['in_process_to_limit'], 2)} | {f(s['http_rps'])} | "
            f"{f(s['http_to_in_process'], 2)} | {f(s['healthz_rps'])} | "
            f"{f(s['http_to_healthz'], 2)} | {f(s['http_bound_to_in_process'], 2)} | "
            f"{s['http_p99_ms']['median']:.1f} | "
            f"{s['half_rate']['median']:,.0f} | {f(s['half_server_busy'], 2)} | "
            f"{s['half_p50_ms']['median']:.1f} / "
            f"{f(s['half_p99_ms'], 1)} | {s['bare_half_p50_ms']['median']:.1f} / "
            f"{f(s['bare_half_p99_ms'], 1)} | {s['store_half_p50_ms']['median']:.1f} / "
            f"{f(s['store_half_p99_ms'], 1)} |"
        )
    lines += [""] + [
        f"{backend}: HTTP x in process over its bound, per run: {f(s['http_to_bound'], 2)} "
        "(target >= 0.9)."
        for backend, s in doc["backends"].items()
        if "http_to_bound" in s
    ]
    lines += [
        "",
        "The whole cycle, in the same runs: each of the "
        f"{doc['clients']} tasks starts a workflow and waits for its execution's end "
        "(`app.executions.wait`) before it starts the next: start, grant, run, finish, answer. "
        "Grants alone: the in-process starts above (each task starts the next as soon as its "
        "start is granted; the finishes go on behind). One step: the workflow records one "
        "step (`ctx.step`) of a no-op function. Targets: the whole cycle >= 0.6x the grants "
        "alone, one step >= 0.5x.",
        "",
        "| store | grants alone starts/s | whole cycle /s | x grants alone "
        "| one step, whole cycle /s | x grants alone |",
        "|" + " --- |" * 6,
    ]
    for backend, s in doc["backends"].items():
        lines.append(
            f"| {backend} | {f(s['in_process_rps'])} | {f(s['cycle_rps'])} | "
            f"{f(s['cycle_to_grants'], 2)} | {f(s['cycle_step_rps'])} | "
            f"{f(s['cycle_step_to_grants'], 2)} |"
        )
    loads = doc.get("load_average")
    if loads:
        lines += [
            "",
            "1-minute load average at the start and after each store: "
            + ", ".join(f"{x:.1f}" for x in loads)
            + " (2 cores, shared with other work).",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    try:  # the loop the server runs on (uvicorn picks uvloop too)
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())
