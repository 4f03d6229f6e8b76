"""Executor processes: cold boots, wake latency, drain through executors vs inline, boot storms.

1. Boots: one tenant at a time is woken by an append on a running worker (PostgreSQL); its
   executor boots (the executor's own `boot_ms`), and its first `process()` starts. Per boot:
   boot_ms, each phase of `yoke_executor_boot_phase_seconds`, and the wake latency (the append
   returned -> `process()` started, on the host's clock). Three kinds, in alternate rounds of
   the same run: cold without namespaces (`warm_spares=0`: spawn -> READY, weak isolation
   accepted), cold with them (the namespace tier, bubblewrap: the cost of the tier is the
   ratio of the two), and bound with them (`warm_spares=1`: a warm spare is bound to the
   tenant, bind -> READY; each wake waits until the spare booted after the last bind is warm,
   so it measures wakes spaced further apart than a spare's boot).
2. Drain: N no-op events over 100 instances of one tenant, appended beforehand; then a fresh
   worker process drains them, `inline` and `process` in the same round, each on a fresh
   PostgreSQL database. Drain = the worker's first claim can happen (its start; for
   `process`, its tenant's executor READY) -> the last durable completion.
3. Boot storm: 200 tenants woken at once (one append each, one statement) with the default
   boot concurrency (the CPU count): time until all 200 executors are READY, and until all
   200 events are processed; with one warm spare (the default) and with none, alternately.

Every figure: median (min-max) of several rounds. Run: `.venv/bin/python -m bench.bench_executors
[--quick]`; markdown on stdout, raw figures in bench/results/executors.json. PostgreSQL:
`YOKE_BENCH_PG` (default postgres@127.0.0.1:5432).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.common import Figure, fresh_databases, machine
from bench.executor_app import app
from yoke.actors import ActorRuntime, ActorSettings
from yoke.actors.executor.settings import ExecutorSettings
from yoke.actors.protocol import ActorStore

if TYPE_CHECKING:
    from yoke.app import Backend

ROOT = Path(__file__).resolve().parents[1]
PG = os.environ.get("YOKE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
INSTANCES = 100
SPEC = "bench.executor_app:app"  # the executors import this app, as a user writes one
PHASES = ("spawn", "interpreter", "sandbox", "runtime", "app", "handshake")


def runtime(worker_id: str, mode: str, **executor: Any) -> ActorRuntime:
    return ActorRuntime(
        settings=ActorSettings(worker_id=worker_id, concurrency=64),
        executor_settings=ExecutorSettings(mode=mode, **executor),
        registry=app.actors.registry,
        app_spec=SPEC,
    )


def open_store(url: str) -> Backend:
    """The app's store for `url` (not yet opened); its actor verbs are its `actors`."""
    from yoke.app import open_store as _open

    return _open(url)


async def state(store: ActorStore, tenant: str, instance: str) -> dict[str, Any]:
    from yoke.store.actor_records import InstanceRef

    row = await store.get_state(InstanceRef(tenant=tenant, actor="stamp", instance_id=instance))
    return {} if row is None else dict(json.loads(row.state))


async def until(check: Any, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError("the benchmark's condition was not met in time")
        await asyncio.sleep(0.002)  # polling the store for a figure, not synchronising


# -- 1. cold boots --------------------------------------------------------------------------------
async def boot_run(
    url: str, boots: int, spares: int = 0, namespaces: str = "on"
) -> list[dict[str, float]]:
    backend = open_store(url)
    await backend.open()
    store = backend.actors
    rt = runtime(
        "boot-worker",
        "process",
        warm_spares=spares,
        namespaces=namespaces,
        allow_weak_isolation=1,  # as root without namespaces: the baseline of their cost
    )
    out: list[dict[str, float]] = []
    try:
        async with rt.running(store):
            pool = rt.pool
            assert pool is not None
            for i in range(boots):
                tenant = f"cold-{i}"

                async def warm() -> bool:
                    return any(ex.bindable for ex in pool.spares())

                if spares:
                    await until(warm)
                sent = time.time()
                await rt.append("wake", {"k": "x"}, tenant=tenant)
                appended = time.time()

                async def started(t: str = tenant) -> bool:
                    return "started" in await state(store, t, "x")

                await until(started)
                begun = (await state(store, tenant, "x"))["started"]
                ex = pool.executor(tenant)
                assert ex is not None and ex.boot_ms is not None
                assert (ex.spare_ms is not None) == bool(spares)  # bound iff spares were kept
                figures = {p: ex.phases.get(p, 0.0) * 1000 for p in PHASES}
                figures |= {
                    "queue": ex.phases["queue"] * 1000,
                    "boot_ms": ex.boot_ms,
                    "wake_ms": (begun - appended) * 1000,
                    "append_ms": (appended - sent) * 1000,
                    "spare_ms": ex.spare_ms or 0.0,
                }
                out.append(figures)
    finally:
        await backend.close()
    return out


def floor_run(times: int) -> dict[str, list[float]]:
    """The floor under a boot: wall ms of `python -I -c pass` and of `python -I -c "import
    asyncio"` (what an executor cannot go below: the interpreter, and the loop it runs on),
    spawned as an executor is, alternately."""
    import subprocess

    out: dict[str, list[float]] = {"pass": [], "asyncio": []}
    for _ in range(times):
        for key, code in (("pass", "pass"), ("asyncio", "import asyncio")):
            began = time.perf_counter()
            subprocess.run([sys.executable, "-I", "-c", code], check=True)
            out[key].append((time.perf_counter() - began) * 1000)
    return out


# -- 2. drain -------------------------------------------------------------------------------------
async def append_all(url: str, n: int) -> None:
    backend = open_store(url)
    await backend.open()
    try:
        rt = runtime("bench-client", "inline")
        for base in range(0, n, 1000):
            items = [{"k": i % INSTANCES} for i in range(base, min(n, base + 1000))]
            events = rt.registry.new_events("bench", items, tenant="t")
            await backend.actors.append_events(events, owner="w0", now=time.time())
    finally:
        await backend.close()


async def drain_run(url: str, n: int, mode: str) -> tuple[float, dict[str, float]]:
    await append_all(url, n)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.bench_executors", "--worker", url, str(n), mode,
        cwd=ROOT, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"the {mode} worker failed ({proc.returncode})")
    r = json.loads(out.decode().strip().splitlines()[-1])
    cpu_us = {k: float(v) / n * 1e6 for k, v in r["cpu"].items()}  # CPU us per event
    return n / (float(r["t1"]) - float(r["t0"])), cpu_us


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu(pid: int) -> float:
    """CPU seconds of `pid` and every process below it so far: an executor is the top of its
    tree (bubblewrap, or the bootstrap that reaps it), and its runtime is a child of it."""
    total = cpu_of(pid)
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError, ValueError):
            total += sum(tree_cpu(int(c)) for c in (task / "children").read_text().split())
    return total


def backends_of(url: str) -> list[int]:
    """The PostgreSQL backend pids serving the database of `url` (the worker's pool)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        rows = c.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()"
        ).fetchall()
    return [int(r[0]) for r in rows]


async def worker_main(url: str, n: int, mode: str) -> None:
    rt = runtime("w0", mode)
    backend = open_store(url)
    await backend.open()
    ready_at: list[float] = []
    # CPU of each process from the drain's start to its end: this worker, its executor (from
    # its READY), and the PostgreSQL backends of this database (a backend opened later counts
    # from 0, which includes its connection cost).
    pg_before = {pid: cpu_of(pid) for pid in backends_of(url)}
    executors: dict[int, float] = {}
    try:
        async with rt.running(backend.actors):
            started = time.time()
            worker_before = time.process_time()
            drain = rt.drain
            assert drain is not None
            if rt.pool is not None:
                pool, then = rt.pool, rt.pool.on_ready

                def stamped(tenant: str) -> None:
                    nonlocal worker_before
                    ready_at.append(time.time())
                    worker_before = time.process_time()
                    ex = pool.executor(tenant)
                    if ex is not None and ex.pid is not None:
                        executors[ex.pid] = tree_cpu(ex.pid)
                    then(tenant)

                pool.on_ready = stamped

            async def done() -> bool:
                return drain.stats().processed >= n

            await until(done, seconds=600)
            await drain.flush()
            t1 = time.time()
            cpu = {
                "worker": time.process_time() - worker_before,
                "executor": sum(tree_cpu(pid) - c for pid, c in executors.items()),
                "postgres": sum(cpu_of(pid) - pg_before.get(pid, 0.0) for pid in backends_of(url)),
            }
    finally:
        await backend.close()
    t0 = max([started, *ready_at])
    print(json.dumps({"t0": t0, "t1": t1, "mode": mode, "cpu": cpu}), flush=True)


# -- 3. boot storm --------------------------------------------------------------------------------
async def storm_run(url: str, tenants: int, spares: int) -> dict[str, float]:
    backend = open_store(url)
    await backend.open()
    store = backend.actors
    rt = runtime("storm-worker", "process", warm_spares=spares)
    try:
        async with rt.running(store):
            pool = rt.pool
            assert pool is not None

            async def warm() -> bool:
                return sum(1 for ex in pool.spares() if ex.bindable) >= spares

            await until(warm)
            events = [
                e
                for i in range(tenants)
                for e in rt.registry.new_events("wake", [{"k": "x"}], tenant=f"storm-{i:03d}")
            ]
            began = time.monotonic()
            await store.append_events(events, owner="storm-worker", now=time.time())
            lifecycle = rt.lifecycle
            assert lifecycle is not None
            lifecycle.wake()

            async def all_ready() -> bool:
                return sum(1 for v in pool.views() if v.boot_ms is not None) >= tenants

            await until(all_ready, seconds=900)
            ready = time.monotonic() - began
            drain = rt.drain
            assert drain is not None

            async def all_done() -> bool:
                return drain.stats().processed >= tenants

            await until(all_done, seconds=300)
            done = time.monotonic() - began
            boots = [v.boot_ms or 0.0 for v in pool.views()]
    finally:
        await backend.close()
    return {
        "all_ready_s": ready,
        "all_processed_s": done,
        "boot_p50_ms": statistics.median(boots),
        "concurrency": float(ExecutorSettings().boot_concurrency),
    }


def print_drain(
    n: int,
    rounds: int,
    drains: dict[str, list[float]],
    cpus: dict[str, list[dict[str, float]]],
    *load: float,
) -> None:
    ratio = [p / i for p, i in zip(drains["process"], drains["inline"], strict=True)]
    print(
        f"Drain of {n:,} no-op events (one tenant, {INSTANCES} instances, worker concurrency "
        f"64, batched dispatch frames), a fresh worker process per run, {rounds} rounds "
        "(inline and process interleaved)"
        + (f"; 1-minute load average {load[0]:.1f} before, {load[1]:.1f} after" if load else "")
        + ":\n"
    )
    print("| mode | events/s | x inline, per round | target |")
    print("| --- | --- | --- | --- |")
    print(f"| inline | {fig(drains['inline']).fmt()} | 1 | |")
    print(f"| process | {fig(drains['process']).fmt()} | {fig(ratio).fmt(digits=2)} | >= 0.9x |")
    print(
        "\nCPU per event during the drain, microseconds (user + system, from /proc/<pid>/stat; "
        "the executor's whole tree from its READY; PostgreSQL: the backends of the run's "
        "database):\n"
    )
    print("| mode | worker | executor | PostgreSQL | all |")
    print("| --- | --- | --- | --- | --- |")
    for mode in ("inline", "process"):
        rows = cpus[mode]
        parts = ("worker", "executor", "postgres")
        cells = [fig([r[k] for r in rows]).fmt(digits=1) for k in parts]
        total = fig([sum(r.values()) for r in rows]).fmt(digits=1)
        print(f"| {mode} | {' | '.join(cells)} | {total} |")
    alls = {m: statistics.median([sum(r.values()) for r in cpus[m]]) for m in cpus}
    print(
        f"\nThrough executors the drain ran at {fig(ratio).fmt(digits=2)}x the events/s of "
        f"`inline` (median of the rounds' ratios, min-max), at {alls['process']:.0f} us of CPU "
        f"per event in all against {alls['inline']:.0f} us inline "
        f"({alls['process'] / alls['inline']:.2f}x). Completions are written in batches "
        "that wait for more while rows are held (up to 256 rows, 20 ms: `completions.py`), so "
        "results coming back one frame of 64 at a time share a statement."
    )


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def fig(values: list[float]) -> Figure:
    return Figure.of(values)


async def main(
    quick: bool, drain_only: bool = False, boots_only: bool = False, storms_too: bool = True
) -> None:
    logging.basicConfig(level=logging.WARNING)
    rounds = 3
    drain_rounds = 3 if quick else 5
    boots = 15 if quick else 40
    n = 5_000 if quick else 20_000
    tenants = 50 if quick else 200
    figures: dict[str, Any] = {"rounds": rounds, "boots": boots, "n": n, "tenants": tenants}
    load_before = os.getloadavg()[0]
    boot_rounds: list[list[dict[str, float]]] = []  # cold, without namespaces
    ns_rounds: list[list[dict[str, float]]] = []  # cold, in namespaces
    bound_rounds: list[list[dict[str, float]]] = []
    drains: dict[str, list[float]] = {"inline": [], "process": []}
    cpus: dict[str, list[dict[str, float]]] = {"inline": [], "process": []}
    storms: list[dict[str, float]] = []
    cold_storms: list[dict[str, float]] = []
    floors: list[dict[str, list[float]]] = []
    async with fresh_databases("postgres", PG) as new_url:
        for _ in range(0 if drain_only else rounds):  # the kinds alternately: the same load
            boot_rounds.append(await boot_run(await new_url(), boots, namespaces="off"))
            ns_rounds.append(await boot_run(await new_url(), boots, namespaces="on"))
            bound_rounds.append(await boot_run(await new_url(), boots, spares=1))
            floors.append(floor_run(10))
        for _ in range(0 if boots_only else drain_rounds):  # interleaved: the same load
            for mode in ("inline", "process"):
                rate, cpu = await drain_run(await new_url(), n, mode)
                drains[mode].append(rate)
                cpus[mode].append(cpu)
        for _ in range(rounds if storms_too and not drain_only else 0):
            storms.append(await storm_run(await new_url(), tenants, spares=1))
            cold_storms.append(await storm_run(await new_url(), tenants, spares=0))
    load_after = os.getloadavg()[0]
    figures |= {"boots_raw": boot_rounds, "bound_boots_raw": bound_rounds}
    figures |= {"namespace_boots_raw": ns_rounds}
    figures |= {"drain_per_s": drains, "storms": storms, "storms_without_spares": cold_storms}
    figures |= {"drain_cpu_us_per_event": cpus, "loadavg_1m": [load_before, load_after]}
    figures |= {"floor_ms": floors}
    if drain_only:
        print_drain(n, drain_rounds, drains, cpus, load_before, load_after)
        return

    Rounds = list[list[dict[str, float]]]

    def per_round(key: str, q: float, of: Rounds = boot_rounds) -> list[float]:
        return [pct([b[key] for b in r], q) for r in of]

    def bound(key: str, q: float) -> list[float]:
        return per_round(key, q, bound_rounds)

    def ratio(key: str, q: float, of: Rounds = bound_rounds, to: Rounds = boot_rounds) -> str:
        got = [b / c for b, c in zip(per_round(key, q, of), per_round(key, q, to), strict=True)]
        return fig(got).fmt(digits=2)

    print("## Executor processes: boots, wake latency, drain, boot storms\n")
    print(
        f"PostgreSQL; `python -I -m yoke.executor` per tenant, as root: without namespaces "
        f"(`process+rlimit-as`, weak isolation accepted: the uid tier is off without them here, "
        f"the interpreter lives under /root) or in them (bubblewrap, "
        f"`process+rlimit-as+uid+namespaces`); {rounds} rounds, median "
        f"(min-max) of the rounds' figures; {machine()}. The machine is shared: its 1-minute "
        f"load average was {load_before:.1f} before the run and {load_after:.1f} after it.\n"
    )
    print(
        "The namespace tier's cost, cold boots without and with it in alternate rounds (the "
        "ratio per pair of rounds):\n"
    )
    print("| figure | without p50 | with p50 | without p99 | with p99 | with / without p50 "
          "| target |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for key, name in (("boot_ms", "boot to READY"), ("wake_ms", "wake: append -> `process()`")):
        print(
            f"| {name} | {fig(per_round(key, 0.5)).fmt(' ms', 1)} "
            f"| {fig(per_round(key, 0.5, ns_rounds)).fmt(' ms', 1)} "
            f"| {fig(per_round(key, 0.99)).fmt(' ms', 1)} "
            f"| {fig(per_round(key, 0.99, ns_rounds)).fmt(' ms', 1)} "
            f"| {ratio(key, 0.5, ns_rounds)} | {'<= 1.3' if key == 'boot_ms' else ''} |"
        )
    print(
        "\nPhases with namespaces (ms; without, in the table below): "
        + ", ".join(f"{p} {fig(per_round(p, 0.5, ns_rounds)).fmt('', 1)}" for p in PHASES)
        + ".\n"
    )
    print(
        f"Boots, {boots} tenants woken one after another per round; cold rounds (no warm spare, "
        "no namespaces: spawn -> READY) and bound rounds (`YOKE_EXECUTOR_WARM_SPARES=1`, the "
        "default, in namespaces: a warm spare bound to the tenant, bind -> READY; each wake once "
        "the spare booted after the last bind is warm) alternate; the ratio is bound / cold, "
        "per pair of rounds:\n"
    )
    print("| figure | cold p50 | cold p99 | bound p50 | bound p99 | bound / cold p50 | target |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for key, name, target in (
        ("boot_ms", "boot to READY", "p50 <= 150 ms, p99 <= 400 ms"),
        ("wake_ms", "wake: append -> `process()` starts", "p50 <= 250 ms"),
    ):
        print(
            f"| {name} | {fig(per_round(key, 0.5)).fmt(' ms', 1)} "
            f"| {fig(per_round(key, 0.99)).fmt(' ms', 1)} | {fig(bound(key, 0.5)).fmt(' ms', 1)} "
            f"| {fig(bound(key, 0.99)).fmt(' ms', 1)} | {ratio(key, 0.5)} | {target} |"
        )
    print(
        f"\nA spare's own boot (spawn -> its hello, off the wake's path): p50 "
        f"{fig(bound('spare_ms', 0.5)).fmt(' ms', 1)}, "
        f"p99 {fig(bound('spare_ms', 0.99)).fmt(' ms', 1)}."
    )
    floor = {k: fig([statistics.median(f[k]) for f in floors]).fmt(" ms", 1) for k in floors[0]}
    print(
        f"\nThe floor, spawned the same way in the same rounds (wall time of the whole process): "
        f'`python -I -c pass` {floor["pass"]}, `python -I -c "import asyncio"` '
        f"{floor['asyncio']}."
    )
    print("\nMedian of each boot phase (`yoke_executor_boot_phase_seconds{phase}`), ms:\n")
    print("| boot | " + " | ".join(("queue", *PHASES)) + " |")
    print("|" + " --- |" * (len(PHASES) + 2))
    cold_cells = [fig(per_round(p, 0.5)).fmt("", 1) for p in ("queue", *PHASES)]
    print("| cold | " + " | ".join(cold_cells) + " |")
    kept = ("queue", "app", "handshake")  # a bound boot has no others: the spare had them
    bound_cells = [fig(bound(p, 0.5)).fmt("", 1) if p in kept else "-" for p in ("queue", *PHASES)]
    print("| bound | " + " | ".join(bound_cells) + " |")
    print()
    if drains["inline"]:
        print_drain(n, drain_rounds, drains, cpus)
    if storms:
        print_storms(tenants, storms, cold_storms)
    out = ROOT / "bench" / "results" / "executors.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")


def print_storms(
    tenants: int, storms: list[dict[str, float]], cold_storms: list[dict[str, float]]
) -> None:
    conc = int(storms[0]["concurrency"])
    print(
        f"\nBoot storm: {tenants} tenants woken at once (one append statement), boot "
        f"concurrency {conc} (the default: CPU count), rounds with one warm spare (the default) "
        "and with none alternating:\n"
    )
    print("| spares | all READY | all processed | boot p50 in the storm |")
    print("| --- | --- | --- | --- |")
    for label, runs in (("1 (default)", storms), ("0", cold_storms)):
        print(
            f"| {label} | {fig([s['all_ready_s'] for s in runs]).fmt(' s', 1)} "
            f"| {fig([s['all_processed_s'] for s in runs]).fmt(' s', 1)} "
            f"| {fig([s['boot_p50_ms'] for s in runs]).fmt(' ms', 0)} |"
        )
    print(
        f"\nEach boot waits for a CPU: {tenants} x p50 / {conc} is the floor; one spare saves "
        "one boot of the burst, then boots behind it like any tenant's (its own fair lane).\n"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--drain-only", action="store_true", help="only the drain figures")
    parser.add_argument("--boots-only", action="store_true", help="boots and storms, no drain")
    parser.add_argument("--no-storms", action="store_true", help="no boot storms")
    parser.add_argument("--worker", nargs=3, metavar=("URL", "N", "MODE"))
    args = parser.parse_args()
    if args.worker:
        url, count, mode = args.worker
        asyncio.run(worker_main(url, int(count), mode))
    else:
        asyncio.run(main(args.quick, args.drain_only, args.boots_only, not args.no_storms))
