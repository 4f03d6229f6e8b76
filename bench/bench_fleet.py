"""A fleet of worker processes on one PostgreSQL: drain scaling, a joiner's time to its share,
and throughput while instances move.

1. Drain events/s with 1, 2 and 4 worker processes: N no-op events over 120 instances appended
   first, the instances dealt out evenly to the fleet's ids (so nothing needs to move), then
   fresh workers drain them; first claim -> last durable
   completion. CPU per event: the workers' own CPU time (user + system, from each process),
   and the whole machine's busy CPU over the same span (/proc/stat: includes PostgreSQL, and
   whatever else runs on this shared machine).
2. Time to share: three workers own 300 instances (100 each); a fourth starts; from
   its `ready` to every live worker within the default tolerance (0.1 of its share), with the
   default rebalancing settings (a step every 2 s, at most 50 moves under way).
3. Events/s while instances move vs steady, same three workers (concurrency 16, `process()`
   awaiting 20 ms, so capacity does not depend on the window): steady over a window, then for
   a window the bench marks moves as the balancer does (each instance to the next worker, up
   to 50 under way, so every worker gives and takes alike), then steady again. Completed
   events are counted from the queue at each window's ends.

Every figure: median (min-max) of several runs, a fresh database per run.
Run: `.venv/bin/python -m bench.bench_fleet [--quick]`; markdown on stdout, raw figures in
bench/results/fleet.json. PostgreSQL: `YOKE_BENCH_PG` (default postgres@127.0.0.1:5432).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from bench.bench_actors import database, open_actor_store
from bench.common import Figure, machine
from yoke.actors import ActorCtx, ActorRuntime, ActorSettings, Event
from yoke.actors.placement import within
from yoke.store.actor_records import InstanceRef

ROOT = Path(__file__).resolve().parents[1]
PAUSE = 0.02  # process() awaits this long in the rebalancing run (an I/O-bound call)
# The rebalancing run: bound by its calls, not the CPU; the bench marks the moves itself, so the
# workers' own balancer is off (`creator` placement; their givers finish moves all the same).
SLOW_CALLS = {"YOKE_WORKER_CONCURRENCY": "16", "YOKE_PLACEMENT": "creator"}
TENANTS = ("acme", "globex", "initech")


def define(rt: ActorRuntime, pause: float, on_done: Any = None) -> None:
    @rt.actor(subscribe=["fleet"], key="k")
    async def work(ctx: ActorCtx, event: Event) -> None:
        if pause:
            await asyncio.sleep(pause)
        if on_done is not None:
            on_done()


def busy_jiffies() -> tuple[int, int]:
    """(busy, total) CPU jiffies of the whole machine so far."""
    with open("/proc/stat") as f:
        parts = [int(x) for x in f.readline().split()[1:]]
    idle = parts[3] + parts[4]
    return sum(parts) - idle, sum(parts)


async def append(url: str, n: int, instances: int, owners: list[str], *, pause: float) -> None:
    """n events over `instances`, 1,000 per call; instance k is owned by owners[k % len]:
    exactly even counts and backlogs, so the balancer has nothing to move."""
    backend = open_actor_store(url)
    await backend.open()
    try:
        rt = ActorRuntime(settings=ActorSettings(worker_id="bench-client"))
        define(rt, pause)

        def rule(ref: InstanceRef) -> str:
            return owners[int(ref.instance_id) % len(owners)]

        for base in range(0, n, 1000):
            for t in TENANTS:
                items = [
                    {"k": i % instances}
                    for i in range(base, min(n, base + 1000))
                    if TENANTS[i % instances % len(TENANTS)] == t
                ]
                events = rt.registry.new_events("fleet", items, tenant=t)
                await backend.actors.append_events(events, owner=rule, now=time.time())
    finally:
        await backend.close()


async def spawn(url: str, wid: str, expect: int, pause: float, **env: str) -> Any:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.bench_fleet",
        "--worker",
        url,
        wid,
        str(expect),
        str(pause),
        cwd=ROOT,
        env={**os.environ, "YOKE_WORKER_CONCURRENCY": "64", **env},
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = await proc.stdout.readline()
    if not line.startswith(b"ready"):
        raise RuntimeError(f"worker {wid} did not start: {line!r}")
    return proc


async def result(proc: Any) -> dict[str, Any]:
    out, _ = await proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"worker failed with {proc.returncode}")
    parsed: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return parsed


async def drain_run(n: int, workers: int) -> dict[str, float]:
    async with database("postgres") as url:
        ids = [f"w{i}" for i in range(workers)]
        instances = 120
        await append(url, n, instances, ids, pause=0.0)
        cpu0 = busy_jiffies()
        # Each worker runs until told to stop: the balancer may move backlog between them, so
        # none knows its count; the drain ends when the queue is empty (polled every 50 ms).
        procs = [await spawn(url, wid, 0, 0.0) for wid in ids]
        backend = open_actor_store(url)
        await backend.open()
        try:
            for _ in range(12_000):  # at most 10 minutes
                (c,) = await backend.actors.actor_counts(tenant=None)
                if c.pending == 0 and c.in_flight == 0:
                    break
                await asyncio.sleep(0.05)
            ended = time.time()
        finally:
            await backend.close()
        for p in procs:
            p.send_signal(signal.SIGTERM)
        results = [await result(p) for p in procs]
        cpu1 = busy_jiffies()
        span = ended - min(r["t0"] for r in results)
        hz = os.sysconf("SC_CLK_TCK")
        return {
            "events_per_s": n / span,
            "worker_cpu_us_per_event": sum(r["cpu"] for r in results) / n * 1e6,
            # The machine's busy CPU from the first spawn to the last exit (start-up included).
            "machine_cpu_us_per_event": (cpu1[0] - cpu0[0]) / hz / n * 1e6,
        }


async def shares(store: Any, live: list[str]) -> dict[str, int]:
    counts = {c.worker_id: c.owned for c in await store.fleet_counts()}
    return {w: counts.get(w, 0) for w in live}


async def until_within(store: Any, live: list[str], period: float, limit: float = 120.0) -> None:
    """Poll the counts until every live worker is within the default tolerance."""
    deadline = time.monotonic() + limit
    while not within(await shares(store, live), 0.1):
        if time.monotonic() > deadline:
            raise RuntimeError(f"no balance over {live} in {limit:.0f} s")
        await asyncio.sleep(period)


async def join_run() -> float:
    """Seconds from a fourth worker's `ready` to every worker within tolerance."""
    async with database("postgres") as url:
        ids = ["w0", "w1", "w2"]
        await append(url, 300, 300, ids, pause=0.0)
        procs = [await spawn(url, wid, 0, 0.0) for wid in ids]
        backend = open_actor_store(url)
        await backend.open()
        try:
            procs.append(await spawn(url, "w3", 0, 0.0))
            t0 = time.monotonic()
            live = [*ids, "w3"]
            await until_within(backend.actors, live, 0.05)
            took = time.monotonic() - t0
        finally:
            await backend.close()
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                await p.wait()
        return took


async def rebalance_run(n: int, window: float) -> dict[str, float]:
    """Events/s of three workers while a third of their instances keep moving, and steady."""
    async with database("postgres") as url:
        ids = ["w0", "w1", "w2"]
        await append(url, n, 300, ids, pause=PAUSE)
        backend = open_actor_store(url)
        await backend.open()
        procs: list[Any] = []
        try:
            store = backend.actors

            async def done() -> int:
                (c,) = await store.actor_counts(tenant=None)
                return n - c.pending - c.in_flight

            async def steady() -> float:
                t0, d0 = time.monotonic(), await done()
                await asyncio.sleep(window)  # a measuring window, not a synchronisation
                return (await done() - d0) / (time.monotonic() - t0)

            procs = [await spawn(url, wid, 0, PAUSE, **SLOW_CALLS) for wid in ids]
            await asyncio.sleep(1.0)  # warm up (a period, not a synchronisation)
            before = await steady()
            # The bench marks moves as the balancer does, each instance to the next worker
            # (so every worker gives and takes alike), up to 50 under way, for one window.
            t0, d0, moved = time.monotonic(), await done(), 0
            after: InstanceRef | None = None
            while time.monotonic() - t0 < window:
                under_way = sum(c.moving_out for c in await store.fleet.fleet_counts())
                room = max(0, 50 - under_way)
                page = (
                    await store.fleet.owned_page(worker_id=None, after=after, limit=room)
                    if room
                    else []
                )
                after = page[-1][0] if page else (None if room else after)
                marks = [(ref, w, ids[(ids.index(w) + 1) % 3]) for ref, w in page]
                moved += await store.fleet.mark_moves(marks, now=time.time())
                await asyncio.sleep(0.05)  # a period, not a synchronisation
            during = (await done() - d0) / (time.monotonic() - t0)
            for _ in range(600):  # the last moves finish (30 s at most)
                if not sum(c.moving_out for c in await store.fleet.fleet_counts()):
                    break
                await asyncio.sleep(0.05)
            later = await steady()
            if await done() >= n:
                raise RuntimeError("the backlog ran out before the last window ended")
        finally:
            await backend.close()
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                await p.wait()
        return {
            "moving_per_s": during,
            "steady_per_s": (before + later) / 2,
            "moves_per_s": moved / window,
        }


async def worker_main(url: str, wid: str, expect: int, pause: float) -> None:
    rt = ActorRuntime(settings=ActorSettings.from_env(worker_id=wid))
    done = asyncio.Event()
    seen = 0

    def one() -> None:
        nonlocal seen
        seen += 1
        if seen == expect:
            done.set()

    define(rt, pause, one)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    backend = open_actor_store(url)
    await backend.open()
    try:
        async with rt.running(backend.actors):
            cpu0 = time.process_time()
            print("ready", flush=True)
            t0 = time.time()
            if expect:
                await done.wait()
            else:
                await stop.wait()
            drain = rt.drain
            assert drain is not None
            await drain.flush()
            t1, cpu = time.time(), time.process_time() - cpu0
    finally:
        await backend.close()
    print(json.dumps({"t0": t0, "t1": t1, "cpu": cpu}), flush=True)


async def main(quick: bool) -> None:
    runs = 3
    n = 10_000 if quick else 30_000
    backlog, window = (20_000, 2.0) if quick else (40_000, 3.0)
    figures: dict[str, Any] = {"n": n, "runs": runs, "backlog": backlog}
    drains: dict[int, list[dict[str, float]]] = {1: [], 2: [], 4: []}
    joins: list[float] = []
    moves: list[dict[str, float]] = []
    for _ in range(runs):  # interleaved, so that every setup sees the same load
        for workers in drains:
            drains[workers].append(await drain_run(n, workers))
        joins.append(await join_run())
        moves.append(await rebalance_run(backlog, window))
    figures["drain"] = {str(k): v for k, v in drains.items()}
    figures["join_s"] = joins
    figures["rebalance"] = moves

    def f(vals: list[float], unit: str = "", digits: int = 0) -> str:
        return Figure.of(vals).fmt(unit, digits)

    one = [r["events_per_s"] for r in drains[1]]
    print("## A fleet of workers: scaling, joining, rebalancing\n")
    print(
        f"PostgreSQL on the same machine; {runs} runs, median (min-max); {machine()}. "
        "Worker concurrency 64; claims and completions in batches of up to 1,000.\n"
    )
    print(
        f"Drain of {n:,} no-op events over 120 instances by 1, 2 and 4 worker processes (first "
        "claim -> last durable completion); CPU per event: the workers' own, and the whole "
        "machine's busy time over the run (PostgreSQL included):\n"
    )
    print(
        "| workers | drain events/s | x 1 worker, per run | worker CPU/event | machine CPU/event |"
    )
    print("| --- | --- | --- | --- | --- |")
    for workers, rs in drains.items():
        rate = [r["events_per_s"] for r in rs]
        ratio = [a / b for a, b in zip(rate, one, strict=True)]
        print(
            f"| {workers} | {f(rate)} | {f(ratio, digits=2)} "
            f"| {f([r['worker_cpu_us_per_event'] for r in rs], ' us')} "
            f"| {f([r['machine_cpu_us_per_event'] for r in rs], ' us')} |"
        )
    moving = [m["moving_per_s"] for m in moves]
    steady = [m["steady_per_s"] for m in moves]
    print(
        f"\nA fourth worker joining three that own 300 instances reaches its share (every "
        f"worker within 0.1 of its fair share) in {f(joins, ' s', 1)} with the default "
        "settings (a balancing step every 2 s, at most 50 moves under way).\n"
    )
    print(
        f"Hand-overs under load: three workers (concurrency 16 each) drain {backlog:,} events "
        "over 300 instances, `process()` awaiting 20 ms (I/O-bound calls, so capacity is the "
        f"same in every window); for {window:.0f} s the bench marks moves as the balancer "
        "does, each instance to the next worker, up to 50 under way "
        f"({f([m['moves_per_s'] for m in moves], ' moves/s')}): {f(moving, ' events/s')}; "
        f"steady (the {window:.0f} s before and after, nothing moving): {f(steady, ' events/s')}; "
        f"during / steady, per run: "
        f"{f([a / b for a, b in zip(moving, steady, strict=True)], digits=2)} (target >= 0.8)."
    )
    out = ROOT / "bench" / "results" / "fleet.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--worker", nargs=4, metavar=("URL", "ID", "N", "PAUSE"))
    args = parser.parse_args()
    if args.worker:
        url, wid, expect, pause = args.worker
        asyncio.run(worker_main(url, wid, int(expect), float(pause)))
    else:
        asyncio.run(main(args.quick))
