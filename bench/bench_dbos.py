"""yoke's durable starts beside DBOS Transact's queues (3.4.0) on the same PostgreSQL.

Every measurement runs in a fresh process on a fresh database (one per system, created and
dropped by the bench), and the systems take turns in each round (yoke, DBOS, yoke, DBOS...), so
both see the same load on this shared machine; ratios are taken round by round.

1. Durable starts under a cap of 16: a no-op workflow started N times by 64 concurrent callers
   (yoke: `app.executions.start` with `Limits(max_running=16)`; DBOS: `Queue.enqueue_async` on a
   queue with `global_concurrency=16`), from the first call to the last completion durable in
   the system's own table; workflows/s and the process's CPU time per workflow (every thread:
   callers, scheduler, DBOS's pollers). Then starts paced at a rate both sustain, each timed
   from when it was due to when its workflow's body began: the start latency, p50 and p99.
2. The same without a cap: yoke with no limits; DBOS's durable start with no queue
   (`DBOS.start_workflow_async`, its fastest path).
3. Exact under the cap across processes: four processes on one database, each starting its
   share of workflows that sleep 20 ms, the cap of 16 shared by all (yoke's ledger; DBOS's
   `global_concurrency`). The bodies' intervals from all four give the most that ever ran at
   once (it must be 16: never more, and reached), and every workflow must run exactly once.
4. Fairness under a flood: 4 slots, each workflow sleeps 20 ms (T); one tenant starts 600,
   then five light tenants start 20 each. A light tenant's wait runs from its start call to
   its body's beginning; the flood's share counts the bodies begun while light work waited
   (from the first light call to the last light body; ideal 1/6). yoke orders tenants by their
   share of running (ties: least recently served); DBOS partitions the queue by tenant, with
   the cap over the whole queue (`global_concurrency=4, partition_concurrency=4`) and as its
   fair-queue recipe (`partition_concurrency=1, worker_concurrency=4`: a tenant runs at most one
   workflow at a time, so a flood alone uses one slot of four).

DBOS polls its queues (no wake-up on enqueue): every 5 ms here, the best for it of the
intervals tried (1 to 50 ms; its default of 1 s lets 16 slots start at most 16 workflows a
second). Both run on asyncio with
their default pools. Every figure: median (min-max) of the rounds.
Run: `.venv/bin/python -m bench.bench_dbos [--quick]`; markdown on stdout, raw figures in
bench/results/dbos.json. PostgreSQL: `YOKE_BENCH_PG` (default postgres@127.0.0.1:5432).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from bench.common import Figure, machine

PG = os.environ.get("YOKE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
ROOT = Path(__file__).resolve().parents[1]
DBOS_VERSION = "3.4.0"
CALLERS = 64
CAP = 16
FLEET = 4
FLEET_WORK = 0.020
PACED_RATE = 50.0  # starts/s: below what either system sustains under the cap
# DBOS's queue poll, s: the best for it of 1, 5, 10, 20 and 50 ms in quick runs here (cap-16
# workflows/s: 275; 306, 313, 315; 253, 260, 282; 222; 168). `--dbos-poll` tries another.
DBOS_POLL = 0.005
FLOOD = 600
FLOOD_CAP = 4
LIGHT = [f"light{i}" for i in range(5)]
PER_LIGHT = 20
T = 0.020  # a flood test workflow's work
SYSTEMS = {
    # scenario -> the systems measured in it, each as (row label, system, DBOS queue mode)
    "cap": (("yoke", "yoke", ""), ("DBOS", "dbos", "queue")),
    "free": (("yoke", "yoke", ""), ("DBOS", "dbos", "direct")),
    "fleet": (("yoke", "yoke", ""), ("DBOS", "dbos", "queue")),
    "flood": (
        ("yoke", "yoke", ""),
        ("DBOS partitioned", "dbos", "partitioned"),
        ("DBOS fair queue", "dbos", "fair"),
    ),
}


# -- what every workflow body records --------------------------------------------------------
class Record:
    """The bodies run in this process: (index, due, began, ended, tenant) each, on the machine's
    monotonic clock (one clock for every process, so four processes' intervals compare).
    `reached` is set on the bench's loop once `expect`'s count of bodies of the tenants it
    counts have ended. DBOS runs the workflows its queues dequeue on an event loop of its own,
    in another thread: so the count takes a lock, and the event is set through the bench's
    loop (set from another thread, it would not wake a loop waiting on it)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, float, float, float, str]] = []
        self.reached = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._wanted = 0
        self._seen = 0
        self._counts: Callable[[str], bool] = lambda tenant: True

    def expect(self, count: int, counts: Callable[[str], bool] = lambda tenant: True) -> None:
        """Called on the bench's loop, before the bodies it counts begin."""
        with self._lock:
            self._loop = asyncio.get_running_loop()
            self.rows.clear()
            self.reached.clear()
            self._wanted, self._seen, self._counts = count, 0, counts

    def add(self, i: int, due: float, began: float, tenant: str) -> None:
        with self._lock:
            self.rows.append((i, due, began, time.monotonic(), tenant))
            if not self._counts(tenant):
                return
            self._seen += 1
            if self._seen == self._wanted and self._loop is not None:
                self._loop.call_soon_threadsafe(self.reached.set)


RECORD = Record()


async def body(i: int, due: float, tenant: str, work: float) -> None:
    began = time.monotonic()
    if work:
        await asyncio.sleep(work)
    RECORD.add(i, due, began, tenant)


Finished = Callable[[], Awaitable[None]]  # returns once a started workflow has ended


# -- the two systems, behind one shape -------------------------------------------------------
class Yoke:
    done_sql = "SELECT count(*) FROM yoke_executions WHERE status = 'SUCCEEDED'"

    def __init__(self, url: str, cap: int | None, work: float, mode: str, poll: float) -> None:
        import yoke

        self.yoke = yoke
        self.app = yoke.App(url, limits=yoke.Limits(max_running=cap) if cap else None)

        @self.app.workflow("w")
        async def w(ctx: yoke.Context, input: Any) -> None:
            await body(input["i"], input["t"], ctx.tenant, work)

        self._running: Any = None

    async def __aenter__(self) -> Yoke:
        self._running = self.app.running()
        await self._running.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._running.__aexit__(*exc)

    async def start(self, i: int, due: float, tenant: str = "default") -> Finished:
        s = await self.app.executions.start("w", {"i": i, "t": due}, session=tenant, tenant=tenant)
        if s.status not in (self.yoke.StartStatus.GRANTED, self.yoke.StartStatus.QUEUED):
            raise RuntimeError(f"start {i} answered {s.status}")

        async def finished() -> None:
            granted = await self.app.executions.wait_granted(s.start_id, timeout=120)
            assert granted.execution_id is not None
            await self.app.executions.wait(granted.execution_id, timeout=120)

        return finished


class Dbos:
    done_sql = "SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS' AND name = 'w'"

    def __init__(self, url: str, cap: int | None, work: float, mode: str, poll: float) -> None:
        from dbos import DBOS  # type: ignore[import-not-found, unused-ignore]

        self.DBOS = DBOS
        self.mode, self.cap, self.poll = mode, cap, poll

        @DBOS.workflow(name="w")  # type: ignore[untyped-decorator, unused-ignore]
        async def w(i: int, due: float, tenant: str) -> None:
            await body(i, due, tenant, work)

        self.w = w
        self.queue: Any = None
        DBOS(
            config={
                "name": "bench",
                "system_database_url": url,
                "log_level": "WARNING",
                "executor_id": f"bench-{os.getpid()}",
                "application_version": "bench",
            }
        )

    async def __aenter__(self) -> Dbos:
        self.DBOS.launch()
        register = self.DBOS.register_queue_async
        if self.mode == "queue":
            self.queue = await register(
                "q", global_concurrency=self.cap, polling_interval_sec=self.poll
            )
        elif self.mode == "partitioned":
            self.queue = await register(
                "q",
                global_concurrency=self.cap,
                partition_concurrency=self.cap,
                polling_interval_sec=self.poll,
            )
        elif self.mode == "fair":
            self.queue = await register(
                "q",
                worker_concurrency=self.cap,
                partition_concurrency=1,
                polling_interval_sec=self.poll,
            )
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.DBOS.destroy(workflow_completion_timeout_sec=0)

    async def start(self, i: int, due: float, tenant: str = "default") -> Finished:
        if self.queue is None:
            handle = await self.DBOS.start_workflow_async(self.w, i, due, tenant)
        elif self.mode in ("partitioned", "fair"):
            from dbos import SetEnqueueOptions

            with SetEnqueueOptions(queue_partition_key=tenant):
                handle = await self.queue.enqueue_async(self.w, i, due, tenant)
        else:
            handle = await self.queue.enqueue_async(self.w, i, due, tenant)

        async def finished() -> None:
            await handle.get_result()

        return finished


def open_system(spec: dict[str, Any], cap: int | None, work: float) -> Yoke | Dbos:
    system = Yoke if spec["system"] == "yoke" else Dbos
    return system(spec["url"], cap, work, spec["mode"], spec["poll"])


async def durable(url: str, sql: str, count: int) -> None:
    """Returns once `count` workflows are recorded done in the system's own table (polled: the
    only view of another system's commits from outside)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as probe:
        while True:
            row = await (await probe.execute(sql.encode())).fetchone()
            if row is not None and int(row[0]) >= count:
                return
            await asyncio.sleep(0.002)


async def warm_up(sys_: Yoke | Dbos, count: int) -> None:
    """A few workflows run to their end before the clock starts: pools open, DBOS's queue
    thread started (it looks for new queues once a second)."""
    waits = [await sys_.start(-1 - k, time.monotonic()) for k in range(count)]
    for finished in waits:
        await finished()


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def most_at_once(rows: list[tuple[int, float, float, float, str]]) -> int:
    """The most bodies running at one moment (an end before a begin at the same instant)."""
    edges = sorted([(r[2], 1) for r in rows] + [(r[3], -1) for r in rows])
    top = now = 0
    for _, step in edges:
        now += step
        top = max(top, now)
    return top


# -- the scenarios, each in a fresh child process --------------------------------------------
async def child_throughput(spec: dict[str, Any]) -> dict[str, Any]:
    """N starts by CALLERS callers until all are durably done, then starts paced at
    PACED_RATE: workflows/s, CPU per workflow, the start latency."""
    n, paced = spec["n"], spec["paced"]
    sys_ = open_system(spec, spec["cap"], 0.0)
    async with sys_:
        await warm_up(sys_, 4)
        RECORD.expect(n)

        async def caller(c: int) -> None:
            for i in range(c, n, CALLERS):
                await sys_.start(i, time.monotonic())

        cpu0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(caller(c) for c in range(CALLERS)))
        await RECORD.reached.wait()
        await durable(spec["url"], sys_.done_sql, 4 + n)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        RECORD.expect(paced)
        t0 = time.monotonic() + 0.05
        tasks = []
        for i in range(paced):
            due = t0 + i / PACED_RATE
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            tasks.append(asyncio.create_task(sys_.start(i, due)))
        await asyncio.gather(*tasks)
        await RECORD.reached.wait()
        latency = [(began - due) * 1000 for _, due, began, _, _ in RECORD.rows]
    return {
        "per_s": n / elapsed,
        "cpu_ms": cpu / n * 1000,
        "p50_ms": percentile(latency, 50),
        "p99_ms": percentile(latency, 99),
    }


async def child_fleet(spec: dict[str, Any]) -> dict[str, Any]:
    """One of FLEET processes: warm up, say "ready", wait for "go", start its share, and
    return its bodies' intervals once every process's workflows are durably done."""
    share, index = spec["share"], spec["index"]
    sys_ = open_system(spec, CAP, FLEET_WORK)
    async with sys_:
        await warm_up(sys_, 1)
        RECORD.expect(0)
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        t0 = time.monotonic()

        async def caller(c: int) -> None:
            for k in range(c, share, CALLERS):
                await sys_.start(index * share + k, time.monotonic())

        await asyncio.gather(*(caller(c) for c in range(CALLERS)))
        await durable(spec["url"], sys_.done_sql, FLEET * (1 + share))
        t1 = time.monotonic()
    return {"t0": t0, "t1": t1, "rows": RECORD.rows}


async def child_flood(spec: dict[str, Any]) -> dict[str, Any]:
    """FLOOD starts of one tenant, then PER_LIGHT of each light tenant; returns once every
    light body has begun."""
    sys_ = open_system(spec, FLOOD_CAP, T)
    async with sys_:
        await warm_up(sys_, 2)
        RECORD.expect(len(LIGHT) * PER_LIGHT, lambda tenant: tenant != "flood")

        async def flood_caller(c: int) -> None:
            for i in range(c, FLOOD, 16):
                await sys_.start(i, time.monotonic(), "flood")

        await asyncio.gather(*(flood_caller(c) for c in range(16)))
        light_calls = [
            (t, FLOOD + n * PER_LIGHT + k) for n, t in enumerate(LIGHT) for k in range(PER_LIGHT)
        ]
        first_light = time.monotonic()
        await asyncio.gather(*(sys_.start(i, time.monotonic(), t) for t, i in light_calls))
        await RECORD.reached.wait()
        rows = list(RECORD.rows)
    light = [r for r in rows if r[4] != "flood"]
    waits = [(r[2] - r[1]) / T for r in light]
    last_light = max(r[2] for r in light)
    span = [r for r in rows if first_light <= r[2] <= last_light]
    return {
        "p50_T": percentile(waits, 50),
        "p99_T": percentile(waits, 99),
        "flood_share": sum(1 for r in span if r[4] == "flood") / len(span),
    }


CHILDREN = {
    "cap": child_throughput,
    "free": child_throughput,
    "fleet": child_fleet,
    "flood": child_flood,
}


# -- the parent: databases, processes, rounds --------------------------------------------------
@asynccontextmanager
async def database() -> AsyncIterator[str]:
    name = f"yoke_bench_{uuid.uuid4().hex[:10]}"
    async with await psycopg.AsyncConnection.connect(PG, autocommit=True) as c:
        await c.execute(f'CREATE DATABASE "{name}"'.encode())
    try:
        yield urlunsplit(urlsplit(PG)._replace(path=f"/{name}"))
    finally:
        async with await psycopg.AsyncConnection.connect(PG, autocommit=True) as c:
            await c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


async def spawn(spec: dict[str, Any]) -> Any:
    env = None
    if spec.get("src"):  # another tree's yoke (`--base-src`): first on the path
        env = {**os.environ, "PYTHONPATH": spec["src"]}
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.bench_dbos",
        "--child",
        json.dumps(spec),
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        # DBOS's shutdown cancels the workflows still queued and says so: shown on failure only.
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )


async def outcome(proc: Any) -> dict[str, Any]:
    out, err = await proc.communicate()
    if proc.returncode:
        sys.stderr.write(err.decode())
        raise RuntimeError(f"a bench process failed with exit code {proc.returncode}")
    parsed: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return parsed


async def run_single(spec: dict[str, Any]) -> dict[str, Any]:
    async with database() as url:
        return await outcome(await spawn(spec | {"url": url}))


async def run_fleet(spec: dict[str, Any], n: int) -> dict[str, Any]:
    share = n // FLEET
    async with database() as url:
        # One process first: it makes the schema, which the others would race to make.
        first = await spawn(spec | {"url": url, "share": share, "index": 0})
        procs = [first]
        assert first.stdout is not None
        await first.stdout.readline()
        for k in range(1, FLEET):
            procs.append(await spawn(spec | {"url": url, "share": share, "index": k}))
        for p in procs[1:]:
            await p.stdout.readline()
        for p in procs:
            p.stdin.write(b"go\n")
            await p.stdin.drain()
        parts = [await outcome(p) for p in procs]
    rows = [tuple(r) for part in parts for r in part["rows"] if r[0] >= 0]
    indexes = [int(r[0]) for r in rows]
    span = max(p["t1"] for p in parts) - min(p["t0"] for p in parts)
    return {
        "most_running": most_at_once(rows),
        "ran": len(set(indexes)),
        "ran_twice": len(indexes) - len(set(indexes)),
        "started": share * FLEET,
        "per_s": share * FLEET / span,
    }


def ratio(values: list[float], base: list[float]) -> Figure:
    return Figure.of([v / b for v, b in zip(values, base, strict=True)])


async def main(
    quick: bool,
    rounds: int,
    poll: float,
    only: str | None,
    base: str | None = None,
    no_dbos: bool = False,
) -> None:
    n = 400 if quick else 2000
    paced = 100 if quick else 250
    fleet_n = 320 if quick else 1600
    scenarios = only.split(",") if only else list(SYSTEMS)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {s: {} for s in scenarios}
    loads = [os.getloadavg()[0]]
    for r in range(rounds):
        for scenario in scenarios:
            systems = SYSTEMS[scenario]
            if no_dbos:  # yoke against its base alone: more rounds in the same time
                systems = tuple(s for s in systems if s[1] != "dbos")
            if base and scenario in ("cap", "free"):  # the base tree's yoke takes its turn too
                systems = (*systems, ("yoke, base", "yoke", ""))
            for label, system, mode in systems:
                print(f"round {r + 1}: {scenario} {label}", file=sys.stderr, flush=True)
                spec = {"scenario": scenario, "system": system, "mode": mode, "poll": poll}
                if label == "yoke, base":
                    spec["src"] = base
                if scenario == "fleet":
                    got = await run_fleet(spec, fleet_n)
                else:
                    cap = CAP if scenario == "cap" else None
                    got = await run_single(spec | {"cap": cap, "n": n, "paced": paced})
                runs[scenario].setdefault(label, []).append(got)
        loads.append(os.getloadavg()[0])
    doc = {
        "benchmark": "dbos",
        "quick": quick,
        "rounds": rounds,
        "n": n,
        "paced": paced,
        "fleet_n": fleet_n,
        "dbos": DBOS_VERSION,
        "dbos_poll_s": poll,
        "base": base,
        "machine": machine(),
        "load_average": loads,
        "runs": runs,
    }
    # Without DBOS the figures are not the comparison's (the plots read dbos.json).
    out = ROOT / "bench" / "results" / ("dbos_no_dbos.json" if no_dbos else "dbos.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(markdown(doc))


def markdown(doc: dict[str, Any]) -> str:
    runs = doc["runs"]

    def col(scenario: str, label: str, key: str) -> list[float]:
        return [float(r[key]) for r in runs[scenario][label]]

    def fig(scenario: str, label: str, key: str, digits: int = 0) -> str:
        return Figure.of(col(scenario, label, key)).fmt(digits=digits)

    lines = [
        "## yoke against DBOS queues: durable starts under a cap, fairness under a flood",
        "",
        f"DBOS Transact {doc['dbos']} and yoke on the same PostgreSQL, each in a fresh process on "
        f"its own fresh database, taking turns in each of {doc['rounds']} rounds (yoke, DBOS, "
        "yoke, DBOS...); median (min-max) of the rounds, ratios taken round by round. DBOS polls "
        f"its queues every {doc['dbos_poll_s'] * 1000:g} ms, the best for it of the intervals "
        "tried here (1 to 50 ms; its default, 1 s, would let 16 slots start at most 16 "
        "workflows a second); both on asyncio with their default connection pools. "
        f"{doc['machine']}.",
    ]
    if "cap" in runs or "free" in runs:
        lines += [
            "",
            f"Durable starts of a no-op workflow: {doc['n']:,} started by {CALLERS} concurrent "
            "callers, from the first call to the last completion durable in the system's own "
            "table; CPU: the process's own (every thread), per workflow. Start latency: "
            f"{doc['paced']} starts paced at {PACED_RATE:.0f}/s, from when each was due to its "
            "body's beginning. Under a cap of 16: yoke `Limits(max_running=16)`, DBOS a queue "
            "with `global_concurrency=16`; without a cap: yoke with no limits, DBOS "
            "`DBOS.start_workflow_async` (no queue).",
            "",
            "| cap | system | workflows/s | x DBOS, per round | CPU ms per workflow "
            "| DBOS / yoke CPU, per round | start latency p50 ms | p99 ms |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for scenario, cap in (("cap", "16"), ("free", "none")):
            if scenario not in runs:
                continue
            dbos = "DBOS" in runs[scenario]
            base_rate = col(scenario, "DBOS", "per_s") if dbos else []
            yoke_cpu = col(scenario, "yoke", "cpu_ms")
            labels = [label for label in ("yoke", "yoke, base", "DBOS") if label in runs[scenario]]
            for label in labels:
                per = col(scenario, label, "per_s")
                lines.append(
                    f"| {cap} | {label} | {fig(scenario, label, 'per_s')} "
                    f"| {ratio(per, base_rate).fmt(digits=2) if dbos else '-'} "
                    f"| {fig(scenario, label, 'cpu_ms', 2)} "
                    f"| {ratio(col(scenario, label, 'cpu_ms'), yoke_cpu).fmt(digits=2)} "
                    f"| {fig(scenario, label, 'p50_ms', 1)} | {fig(scenario, label, 'p99_ms', 1)} |"
                )
    if "fleet" in runs:
        lines += [
            "",
            f"Exact under the cap across {FLEET} processes: {doc['fleet_n']:,} workflows (each "
            f"sleeps {FLEET_WORK * 1000:.0f} ms), a quarter started by each of {FLEET} processes "
            f"on one database, cap {CAP} shared by all; the most bodies running at one moment "
            "(from all four processes' intervals on the machine's monotonic clock), the "
            "workflows that ran, and those that ran twice, in each round:",
            "",
            "| system | most running at once (cap 16) | ran / started | ran twice "
            "| workflows/s, 4 processes |",
            "| --- | --- | --- | --- | --- |",
        ]
        for label in [x for x in ("yoke", "DBOS") if x in runs["fleet"]]:
            fleet = runs["fleet"][label]
            top = ", ".join(str(r["most_running"]) for r in fleet)
            ran = ", ".join(f"{r['ran']}/{r['started']}" for r in fleet)
            twice = ", ".join(str(r["ran_twice"]) for r in fleet)
            lines.append(f"| {label} | {top} | {ran} | {twice} | {fig('fleet', label, 'per_s')} |")
    if "flood" in runs:
        lines += [
            "",
            f"Fairness under a flood: {FLOOD_CAP} slots, each workflow sleeps {T * 1000:.0f} ms "
            f"(T); one tenant starts {FLOOD}, then {len(LIGHT)} light tenants start {PER_LIGHT} "
            "each. A light wait: from its start call to its body's beginning, in T. Flood "
            "share: of the bodies begun while light work waited (first light call to last light "
            "body), the flood's (ideal 1/6 = 0.17). yoke: each tenant's share of running (ties: "
            "served least recently); DBOS partitioned: a partition per tenant, "
            "`global_concurrency=4, partition_concurrency=4`; DBOS fair queue: "
            "`partition_concurrency=1, worker_concurrency=4` (a tenant runs one workflow at a "
            "time, so a flood alone uses one slot of four).",
            "",
            "| system | light wait p50 (T) | p99 (T) | x yoke p50, per round "
            "| x yoke p99, per round | flood share |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        yoke50, yoke99 = col("flood", "yoke", "p50_T"), col("flood", "yoke", "p99_T")
        for label in [x for x, _, _ in SYSTEMS["flood"] if x in runs["flood"]]:
            lines.append(
                f"| {label} | {fig('flood', label, 'p50_T', 1)} "
                f"| {fig('flood', label, 'p99_T', 1)} "
                f"| {ratio(col('flood', label, 'p50_T'), yoke50).fmt(digits=1)} "
                f"| {ratio(col('flood', label, 'p99_T'), yoke99).fmt(digits=1)} "
                f"| {fig('flood', label, 'flood_share', 2)} |"
            )
    if doc.get("base"):
        lines += ["", f"yoke, base: the same bench run on the yoke of `{doc['base']}`."]
        for scenario, cap in (("cap", "16"), ("free", "none")):
            if scenario in runs and "yoke, base" in runs[scenario]:
                against = ratio(
                    col(scenario, "yoke", "per_s"), col(scenario, "yoke, base", "per_s")
                )
                lines.append(f"Cap {cap}: yoke x base, per round: {against.fmt(digits=2)}.")
    loads = ", ".join(f"{x:.1f}" for x in doc["load_average"])
    lines += ["", f"1-minute load average before and after each round: {loads} (2 shared cores)."]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--dbos-poll", type=float, default=DBOS_POLL, help="DBOS queue poll, s")
    parser.add_argument("--only", help="scenarios, comma-separated (default: all)")
    parser.add_argument("--base-src", help="also run the yoke of this src/ directory, in turn")
    parser.add_argument(
        "--no-dbos", action="store_true", help="yoke (and --base-src) only: a change's own rounds"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        spec = json.loads(args.child)
        # A child whose peers died must not wait for them forever.
        result = asyncio.run(asyncio.wait_for(CHILDREN[spec["scenario"]](spec), 600))
        print(json.dumps(result), flush=True)
    else:
        rounds = args.rounds or (2 if args.quick else 5)
        asyncio.run(
            main(args.quick, rounds, args.dbos_poll, args.only, args.base_src, args.no_dbos)
        )
