"""Actors end to end: append + fan-out, claim, `process()`, complete; and timer lateness.

1. Appends/s: 1,000 events per call (one transaction each), as `App.append_many` does them,
   each fanning out to one of 100 instances of a no-op actor, on PostgreSQL and SQLite; by one
   producer (each call awaited before the next), and by two producers in one process (two
   tasks, so one prepares its batch while the other's is in the database), with the ratio of
   each run to PgQueuer's batched enqueue (one producer) measured beside it.
2. Drain/s: N no-op events appended beforehand; then fresh worker processes drain them. Drain =
   first claim -> last durable completion (worker start-up and its boot claim excluded). One
   worker on PostgreSQL and on SQLite; two workers on PostgreSQL (each owns half of the 100
   instances).
3. Pipeline/s: the same N events appended 1,000 per `append_many` by the worker's own process
   while its drain runs (append and drain share the process, its event loop and the store), from
   the first append to the last durable completion. One worker on PostgreSQL and on SQLite.
4. Timer lateness: T timers due over a few seconds, fired by one worker into a stream, p50 and
   p99 of two figures per timer: due -> committed (the worker's `fire_timers` call returned, so
   the fired event was durable and visible; stamped by a wrapper the bench puts around that
   call in the worker, which adds no work before the commit) and due -> `process()` (the
   subscribed no-op actor received the fired event). Both include the database round trip;
   the stored `appended_at` does not (it is the time the loop decided to fire) and is kept in
   the raw figures only.
5. Peers on the same PostgreSQL, each in its own fresh database, interleaved with yoke's runs:
   PgQueuer (batch_size=100, its best here) and Procrastinate (worker concurrency=50, its best
   measured here), N no-op jobs enqueued 1,000 per call, drained by one fresh worker process.

Every figure: median (min-max) of several runs, a fresh database per run.
Run: `.venv/bin/python -m bench.bench_actors [--quick]`; markdown on stdout, raw figures in
bench/results/actors.json. PostgreSQL: `YOKE_BENCH_PG` (default postgres@127.0.0.1:5432).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from bench.common import Figure, machine
from yoke.actors import ActorCtx, ActorRuntime, ActorSettings, Event
from yoke.app import Backend, open_store

PG = os.environ.get("YOKE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
INSTANCES = 100
ROOT = Path(__file__).resolve().parents[1]


def open_actor_store(url: str) -> Backend:
    """The app's store for `url` (its actor verbs are its `actors`), not yet opened."""
    return open_store(url)


def runtime(
    worker_id: str,
    expect: int = 0,
    received: list[tuple[float, float]] | None = None,
    **settings: Any,
) -> tuple[ActorRuntime, asyncio.Event]:
    """A runtime with the no-op actor; the event is set after `expect` process() calls. With
    `received`, each call adds (its wall time, the event's "due" field) there."""
    rt = ActorRuntime(settings=ActorSettings(worker_id=worker_id, **settings))
    done = asyncio.Event()
    seen = 0

    @rt.actor(subscribe=["bench"], key="k")
    async def noop(ctx: ActorCtx, event: Event) -> None:
        nonlocal seen
        if received is not None:
            received.append((time.time(), event.data["due"]))
        seen += 1
        if seen == expect:
            done.set()

    return rt, done


@asynccontextmanager
async def database(kind: str) -> AsyncIterator[str]:
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as d:
            yield f"sqlite:///{d}/bench.db"
        return
    name = f"yoke_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    try:
        yield urlunsplit(urlsplit(PG)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(PG, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


async def append_all(url: str, n: int, owners: list[str | None], *, producers: int = 1) -> float:
    """Append n events, 1,000 per call, and return events/s. Each call does what
    `App.append_many` does (`registry.new_events`, then one `append_events` transaction) for
    the owner of its instances: instance k belongs to owners[k % len(owners)] (None: no owner
    yet), so with two workers each 1,000 events are two calls of 500. With several
    `producers`, that many tasks share the batches (round robin), each awaiting its own calls."""
    store = open_actor_store(url)
    await store.open()
    try:
        rt, _ = runtime("bench-client")
        bases = list(range(0, n, 1000))

        async def produce(mine: list[int]) -> None:
            for base in mine:
                batch = range(base, min(n, base + 1000))
                for w, owner in enumerate(owners):
                    items = [
                        {"k": i % INSTANCES} for i in batch if i % INSTANCES % len(owners) == w
                    ]
                    events = rt.registry.new_events("bench", items, tenant="t")
                    await store.actors.append_events(events, owner=owner, now=time.time())

        start = time.perf_counter()
        await asyncio.gather(*(produce(bases[p::producers]) for p in range(producers)))
        return n / (time.perf_counter() - start)
    finally:
        await store.close()


async def concurrent_append_run(kind: str, n: int, producers: int) -> float:
    async with database(kind) as url:
        return await append_all(url, n, ["w0"], producers=producers)


async def spawn(url: str, worker_id: str, expect: int, mode: str = "drain") -> Any:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.bench_actors",
        "--worker",
        url,
        worker_id,
        str(expect),
        mode,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )


async def result(proc: Any) -> dict[str, Any]:
    out, _ = await proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"worker failed with {proc.returncode}")
    parsed: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return parsed


async def drain_run(kind: str, n: int, workers: int) -> tuple[float, float]:
    async with database(kind) as url:
        ids = [f"w{i}" for i in range(workers)]
        appends = await append_all(url, n, list(ids))
        procs = [await spawn(url, wid, n // workers) for wid in ids]
        results = [await result(p) for p in procs]
        span = max(r["t1"] for r in results) - min(r["t0"] for r in results)
        return appends, n / span


async def pipeline_run(kind: str, n: int) -> float:
    """One worker process appends n events (1,000 per call) while it drains them: events/s
    from its first append to its last durable completion."""
    async with database(kind) as url:
        r = await result(await spawn(url, "pipeline-worker", n, "pipeline"))
        return n / (float(r["t1"]) - float(r["t0"]))


def percentiles(late: list[float]) -> dict[str, float]:
    late = sorted(late)
    return {
        "p50_ms": late[len(late) // 2],
        "p99_ms": late[int(len(late) * 0.99)],
        "max_ms": late[-1],
        "fired": len(late),
    }


async def timer_run(kind: str, n: int, spread: float) -> dict[str, dict[str, float]]:
    """Lateness of n timers due over `spread` seconds: due -> committed, due -> process(), and
    (raw figures only) due -> the stored `appended_at`."""
    async with database(kind) as url:
        proc = await spawn(url, "timer-worker", n, "timers")
        assert proc.stdout is not None
        await proc.stdout.readline()  # "ready"
        store = open_actor_store(url)
        await store.open()
        try:
            rt, _ = runtime("bench-client")
            rt.attach(store.actors)
            start = time.time() + 1.0
            dues = [start + spread * i / n for i in range(n)]
            ids = await rt.schedule_many(
                "bench", [({"k": i % INSTANCES, "due": due}, due) for i, due in enumerate(dues)]
            )
            due_of = dict(zip(ids, dues, strict=True))
            r = await result(proc)
            committed = [
                (at - due_of[timer_id]) * 1000 for at, fired in r["fired"] for timer_id in fired
            ]
            processed = [(at - due) * 1000 for at, due in r["received"]]
            late: list[float] = []
            if url.startswith("sqlite"):
                import sqlite3

                db = sqlite3.connect(url.removeprefix("sqlite:///"))
                rows = db.execute("SELECT data, appended_at FROM stream_events").fetchall()
                db.close()
            else:
                with psycopg.connect(url) as conn:
                    rows = conn.execute("SELECT data, appended_at FROM stream_events").fetchall()
            for data, at in rows:
                late.append((float(at) - json.loads(data)["due"]) * 1000)
        finally:
            await store.close()
    if len(committed) != n or len(processed) != n:
        raise RuntimeError(f"{len(committed)} timers fired, {len(processed)} processed, of {n}")
    return {
        "committed": percentiles(committed),
        "processed": percentiles(processed),
        "decided": percentiles(late),
    }


async def pgqueuer_run(n: int) -> tuple[float, float] | None:
    """PgQueuer (its best configuration here: batch_size=100, no cap) on the same server:
    enqueue n no-op jobs 1,000 per call, then one fresh worker process drains them."""
    try:
        import asyncpg  # type: ignore[import-untyped, import-not-found, unused-ignore]
        from pgqueuer.db import AsyncpgDriver  # type: ignore[import-not-found, unused-ignore]
        from pgqueuer.queries import Queries  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    async with database("postgres") as url:
        conn = await asyncpg.connect(url)
        try:
            q = Queries(AsyncpgDriver(conn))
            await q.install()
            start = time.perf_counter()
            for base in range(0, n, 1000):
                k = min(1000, n - base)
                await q.enqueue(["noop"] * k, [None] * k, [0] * k)
            enqueue = n / (time.perf_counter() - start)
        finally:
            await conn.close()
        r = await result(await spawn(url, "pgqueuer", n, "pgqueuer"))
        return enqueue, n / (r["t1"] - r["t0"])


async def pgqueuer_worker(url: str, expect: int) -> None:
    import asyncpg
    from pgqueuer import PgQueuer  # type: ignore[import-not-found, unused-ignore]
    from pgqueuer.db import AsyncpgDriver

    conn = await asyncpg.connect(url)
    probe = await asyncpg.connect(url)
    pgq = PgQueuer(AsyncpgDriver(conn))
    seen = {"n": 0, "t0": 0.0}
    done = asyncio.Event()

    @pgq.entrypoint("noop")
    async def noop(job: Any) -> None:
        if not seen["n"]:
            seen["t0"] = time.time()
        seen["n"] += 1
        if seen["n"] == expect:
            done.set()

    task = asyncio.create_task(pgq.run(batch_size=100))
    await done.wait()
    # Durable: PgQueuer deletes a job's row when its buffered completion is written.
    # The peer's flush is not observable from outside: poll its table (from outside, the only way).
    while await probe.fetchval("SELECT count(*) FROM pgqueuer") > 0:  # noqa: ASYNC110
        await asyncio.sleep(0.002)
    t1 = time.time()
    pgq.shutdown.set()
    await task
    await probe.close()
    print(json.dumps({"t0": seen["t0"], "t1": t1}), flush=True)


PROCRASTINATE_CONCURRENCY = 50  # its best drain (50: 545/s, 10: 487/s, 1: 420/s)
PROCRASTINATE_POOL = 20  # min(concurrency + 2, 20), as its best drain used


def procrastinate_app(url: str) -> Any:
    """A Procrastinate app with one no-op task `noop` on `url` (not yet opened)."""
    import procrastinate  # type: ignore[import-not-found, unused-ignore]

    # It warns that an app made in `__main__` may not find its tasks by import path; this
    # bench names its one task, so that warning is noise on the worker's stderr.
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(
            conninfo=url, min_size=1, max_size=PROCRASTINATE_POOL
        )
    )

    @app.task(name="noop")  # type: ignore[untyped-decorator, unused-ignore]
    async def noop() -> None:
        return None

    return app


async def procrastinate_run(n: int) -> tuple[float, float] | None:
    """Procrastinate (worker concurrency=50, pool <= 20, LISTEN/NOTIFY on, jobs kept: its
    defaults otherwise) on the same server: enqueue n no-op jobs 1,000 per `batch_defer_async`,
    then one fresh worker process drains them."""
    try:
        import procrastinate  # noqa: F401
    except ImportError:
        return None
    async with database("postgres") as url:
        app = procrastinate_app(url)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            task = app.tasks["noop"]
            start = time.perf_counter()
            for base in range(0, n, 1000):
                await task.batch_defer_async(*({} for _ in range(min(1000, n - base))))
            enqueue = n / (time.perf_counter() - start)
        r = await result(await spawn(url, "procrastinate", n, "procrastinate"))
        return enqueue, n / (r["t1"] - r["t0"])


async def procrastinate_worker(url: str, expect: int) -> None:
    app = procrastinate_app(url)
    async with app.open_async():
        # wait=False: the worker returns once no job is left.
        await app.run_worker_async(
            concurrency=PROCRASTINATE_CONCURRENCY, wait=False, install_signal_handlers=False
        )
        # Drain = first claim -> last durable completion, as its own tables record them
        # (procrastinate_events rows written by its triggers, stamped by the server's clock).
        row = await app.connector.execute_query_one_async(
            "SELECT extract(epoch FROM min(at) FILTER (WHERE type = 'started')) AS t0, "
            "extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded')) AS t1, "
            "count(*) FILTER (WHERE type = 'succeeded') AS done FROM procrastinate_events"
        )
    if int(row["done"]) != expect:
        raise RuntimeError(f"procrastinate finished {row['done']} jobs of {expect}")
    print(json.dumps({"t0": float(row["t0"]), "t1": float(row["t1"])}), flush=True)


async def worker_main(url: str, worker_id: str, expect: int, mode: str) -> None:
    received: list[tuple[float, float]] = []
    rt, done = runtime(worker_id, expect, received if mode == "timers" else None, concurrency=64)
    store = open_actor_store(url)
    await store.open()
    fired: list[tuple[float, list[int]]] = []  # (when a fire_timers call returned, its timers)
    if mode == "timers":
        fire = store.actors.fire_timers

        async def timed_fire(*args: Any, **kwargs: Any) -> list[int]:
            got: list[int] = await fire(*args, **kwargs)
            fired.append((time.time(), got))  # committed: the stamp comes after the commit
            return got

        store.actors.fire_timers = timed_fire  # type: ignore[method-assign]
    try:
        async with rt.running(store.actors):
            print("ready", flush=True)
            t0 = time.time()
            if mode == "pipeline":
                for base in range(0, expect, 1000):
                    items = [{"k": i % INSTANCES} for i in range(base, min(expect, base + 1000))]
                    await rt.append_many("bench", items, tenant="t")
            await done.wait()
            drain = rt.drain
            assert drain is not None
            await drain.flush()
            t1 = time.time()
    finally:
        await store.close()
    out: dict[str, Any] = {"t0": t0, "t1": t1, "mode": mode}
    if mode == "timers":
        out |= {"fired": fired, "received": received}
    print(json.dumps(out), flush=True)


def fig(values: list[float]) -> Figure:
    return Figure.of(values)


SETUPS = (
    ("PostgreSQL, 1 worker", "postgres", 1),
    ("SQLite, 1 worker", "sqlite", 1),
    ("PostgreSQL, 2 workers", "postgres", 2),
)
PIPELINES = (("PostgreSQL, 1 worker", "postgres"), ("SQLite, 1 worker", "sqlite"))


def per_run(values: list[float], base: list[float]) -> str:
    """Median (min-max) of value / base, run by run (both measured in the same round)."""
    if not values or not base:
        return "-"
    return fig([v / b for v, b in zip(values, base, strict=False)]).fmt(digits=2)


async def main(quick: bool) -> None:
    runs = 3
    n = 5_000 if quick else 20_000
    timers, spread = (2_000, 2.0) if quick else (10_000, 5.0)
    figures: dict[str, Any] = {"n": n, "runs": runs, "instances": INSTANCES}
    drains: dict[str, list[float]] = {label: [] for label, _, _ in SETUPS}
    appends: dict[str, list[float]] = {label: [] for label, _, _ in SETUPS}
    pipelines: dict[str, list[float]] = {label: [] for label, _ in PIPELINES}
    appends2: dict[str, list[float]] = {label: [] for label, _ in PIPELINES}
    peers: dict[str, list[tuple[float, float]]] = {"pgqueuer": [], "procrastinate": []}
    # Interleaved (yoke, peers, yoke, peers...) so that all see the same load on this shared
    # machine; the ratio of each run to the peer's run beside it is the robust figure.
    for _ in range(runs):
        for label, kind, workers in SETUPS:
            rate_a, rate_d = await drain_run(kind, n, workers)
            appends[label].append(rate_a)
            drains[label].append(rate_d)
        for label, kind in PIPELINES:
            pipelines[label].append(await pipeline_run(kind, n))
            appends2[label].append(await concurrent_append_run(kind, n, producers=2))
        for name, run in (("pgqueuer", pgqueuer_run), ("procrastinate", procrastinate_run)):
            got = await run(n)
            if got is not None:
                peers[name].append(got)
    for label, _, _ in SETUPS:
        figures[label] = {"drain_per_s": drains[label], "appends_per_s": appends[label]}
    for label, _ in PIPELINES:
        figures[label]["pipeline_per_s"] = pipelines[label]
        figures[label]["appends_2_producers_per_s"] = appends2[label]
    pgq = [d for _, d in peers["pgqueuer"]]
    pro = [d for _, d in peers["procrastinate"]]
    figures["pgqueuer_batch100"] = {
        "drain_per_s": pgq,
        "enqueue_per_s": [e for e, _ in peers["pgqueuer"]],
    }
    figures["procrastinate_c50"] = {
        "drain_per_s": pro,
        "enqueue_per_s": [e for e, _ in peers["procrastinate"]],
    }
    lateness = [await timer_run("postgres", timers, spread) for _ in range(runs)]
    figures["timers_postgres"] = lateness

    print("## yoke against PgQueuer and Procrastinate: drain and appends; timers\n")
    print(
        f"{n:,} no-op events over {INSTANCES} instances (queue concurrency 1, FIFO), "
        "worker concurrency 64, claims and completions in batches of up to 1,000; "
        f"{runs} runs, median (min-max); {machine()}.\n"
    )
    print(
        "| setup | drain events/s | x PgQueuer drain, per run | x Procrastinate drain, per run "
        "| appends (peers: enqueues) per s, batches of 1,000 |"
    )
    print("| --- | --- | --- | --- | --- |")
    for label, _, workers in SETUPS:
        shown = fig(appends[label]).fmt() if workers == 1 else "-"
        print(
            f"| {label} | {fig(drains[label]).fmt()} | {per_run(drains[label], pgq)} "
            f"| {per_run(drains[label], pro)} | {shown} |"
        )
    for name, row, drained in (
        ("PgQueuer 1.6.0, batch_size=100, same server", "pgqueuer", pgq),
        (
            "Procrastinate 3.10.0, worker concurrency=50 (pool <= 20), same server",
            "procrastinate",
            pro,
        ),
    ):
        if not drained:
            print(f"| {name} | not installed (`pip install -e '.[bench]'`) | - | - | - |")
            continue
        enq = fig([e for e, _ in peers[row]]).fmt()
        print(
            f"| {name} | {fig(drained).fmt()} | {per_run(drained, pgq)} "
            f"| {per_run(drained, pro)} | {enq} |"
        )
    pgq_enqueue = [e for e, _ in peers["pgqueuer"]]
    print(
        "\nAppends, batches of 1,000 events (PgQueuer: its batched enqueue of 1,000 jobs per "
        "call, one producer, same server, same round):\n"
    )
    print(
        "| store | appends/s, 1 producer | x PgQueuer enqueue, per run "
        "| appends/s, 2 producers | x PgQueuer enqueue, per run |"
    )
    print("| --- | --- | --- | --- | --- |")
    for label, _ in PIPELINES:
        store = label.split(",")[0]
        print(
            f"| {store} | {fig(appends[label]).fmt()} | {per_run(appends[label], pgq_enqueue)} "
            f"| {fig(appends2[label]).fmt()} | {per_run(appends2[label], pgq_enqueue)} |"
        )
    print(
        "\nDrain: the events are all appended first, then a fresh worker drains them (first "
        "claim -> last durable completion). Pipeline: the same events appended 1,000 per "
        "`append_many` by the worker's own process while it drains them, first append -> last "
        "durable completion.\n"
    )
    print("| setup | append + drain events/s | x drain of appended events, per run |")
    print("| --- | --- | --- |")
    for label, _ in PIPELINES:
        print(
            f"| {label} | {fig(pipelines[label]).fmt()} "
            f"| {per_run(pipelines[label], drains[label])} |"
        )

    def late(which: str, q: str) -> str:
        return fig([x[which][q] for x in lateness]).fmt(" ms", 1)

    print(
        f"\nTimer lateness on PostgreSQL, {timers:,} timers due over {spread:.0f} s, one "
        "worker that also drains the events they fire; from the due time to the fired event "
        "committed (the firing call returned, stamped by the bench around that call in the "
        f"worker): p50 {late('committed', 'p50_ms')}, p99 {late('committed', 'p99_ms')}; "
        "to its `process()` call in a subscribed actor: "
        f"p50 {late('processed', 'p50_ms')}, p99 {late('processed', 'p99_ms')}.\n"
    )
    print(
        "Targets: drain >= PgQueuer's best configuration on the same server "
        "(~11,700 jobs/s on a quiet machine; Procrastinate ~500), appends >= "
        "50,000/s batched, timer p99 <= 20 ms (due -> committed)."
    )
    out = ROOT / "bench" / "results" / "actors.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2, default=str) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--worker", nargs=4, metavar=("URL", "ID", "N", "MODE"))
    args = parser.parse_args()
    if args.worker and args.worker[3] == "pgqueuer":
        asyncio.run(pgqueuer_worker(args.worker[0], int(args.worker[2])))
    elif args.worker and args.worker[3] == "procrastinate":
        asyncio.run(procrastinate_worker(args.worker[0], int(args.worker[2])))
    elif args.worker:
        url, wid, expect, mode = args.worker
        asyncio.run(worker_main(url, wid, int(expect), mode))
    else:
        asyncio.run(main(args.quick))
