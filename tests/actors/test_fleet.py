"""Several worker processes on one PostgreSQL: instances are spread over the live workers at
creation, a joining worker gets its share through fenced hand-overs, a worker stopped with
SIGTERM hands its instances over before it exits, a SIGKILLed one's are taken over; over
2,400 events nothing is lost, no group runs more calls at once than its cap, no
instance runs on two workers at once, and FIFO per group holds across every move.

Each call writes its start and end to one O_APPEND file (`fleet_proc.py`), which orders every
start and end of every process; a SIGKILLed worker's open calls end where the test wrote its
`K` line, right after the process was reaped.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.actors.conftest import open_actor_store, truncate_actor_tables
from tests.actors.fleet_proc import CAP, define
from tests.actors.test_processes import Worker, until
from yoke.actors import ActorRuntime, ActorSettings
from yoke.actors.protocol import ActorStore
from yoke.store.actor_records import InstanceRef

ROOT = Path(__file__).resolve().parents[2]
HEARTBEAT = 0.5
FLEET_ENV = {
    "YOKE_WORKER_HEARTBEAT_SECS": str(HEARTBEAT),
    "YOKE_WORKER_STALE_SECS": "3.0",
    "YOKE_NOTIFY_POLL_BACKUP_SECS": "0.5",
    "YOKE_SCHEDULE_WAKE_POLL_SECS": "0.5",
    "YOKE_WORKER_SHUTDOWN_TIMEOUT": "5",
    "YOKE_WORKER_CONCURRENCY": "8",
    "YOKE_REBALANCE_INTERVAL_SECS": "0.3",
    "YOKE_REBALANCE_MAX_MOVES": "100",
    "YOKE_MOVE_GRACE_SECS": "10",
    "YOKE_PLACEMENT": "balanced",
    "YOKE_TEST_PAUSE": "0.01",  # each process() call's length (fleet_proc.py)
}
INSTANCES = 300
ROUNDS = 8  # events per instance: round r is seq r, in group g<r % 2>
TENANTS = ("acme", "globex", "initech")


def instance_of(n: int) -> tuple[str, str]:
    return TENANTS[n % len(TENANTS)], f"i{n}"


@asynccontextmanager
async def fleet() -> AsyncIterator[dict[str, Worker]]:
    procs: dict[str, Worker] = {}
    try:
        yield procs
    finally:
        for w in procs.values():
            if w.proc.returncode is None:
                w.proc.send_signal(signal.SIGTERM)
        for w in procs.values():
            async with asyncio.timeout(30):
                await w.proc.wait()


async def start(procs: dict[str, Worker], url: str, log: Path, wid: str) -> Worker:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.actors.fleet_proc",
        url,
        wid,
        str(log),
        cwd=ROOT,
        env={**os.environ, **FLEET_ENV},
        stdout=asyncio.subprocess.PIPE,
    )
    procs[wid] = w = Worker(proc)
    await w.expect("ready")
    return w


async def shares(store: ActorStore) -> dict[str, float]:
    counts = {c.worker_id: c.owned for c in await store.fleet.fleet_counts()}
    total = sum(counts.values())
    return {w: n / total for w, n in counts.items() if n}


def fair(got: dict[str, float], workers: list[str]) -> bool:
    return set(got) == set(workers) and all(abs(s - 1 / len(workers)) <= 0.10 for s in got.values())


async def append_round(rt: ActorRuntime, r: int) -> None:
    for t in TENANTS:
        items = [
            {"k": instance_of(n)[1], "g": f"g{r % 2}", "seq": r}
            for n in range(INSTANCES)
            if instance_of(n)[0] == t
        ]
        await rt.append_many("work", items, tenant=t)


def check_log(lines: list[str], killed: set[str]) -> tuple[int, set[tuple[str, str, int]]]:
    """Replays the calls in file order: the group cap, one worker per instance at a time, FIFO
    per group by first starts. Returns the starts and the events re-run after a first run on a
    killed worker."""
    running: dict[tuple[str, str], list[tuple[str, int]]] = defaultdict(list)
    pids_of: dict[str, Counter[str]] = defaultdict(Counter)
    first: dict[tuple[str, str], list[int]] = defaultdict(list)
    runs: dict[tuple[str, str, int], list[str]] = defaultdict(list)
    starts = 0
    for line in lines:
        kind, pid, *rest = line.split()
        if kind == "K":
            for key, calls in running.items():
                gone = [c for c in calls if c[0] == pid]
                for c in gone:
                    calls.remove(c)
                    pids_of[key[0]][pid] -= 1
            continue
        inst, group, seq_text = rest
        seq = int(seq_text)
        key = (inst, group)
        if kind == "S":
            starts += 1
            running[key].append((pid, seq))
            pids_of[inst][pid] += 1
            assert len(running[key]) <= CAP, (key, running[key])
            on = {p for p, n in pids_of[inst].items() if n > 0}
            assert len(on) == 1, f"{inst} runs on {on} at once"
            if seq not in first[key]:
                assert not first[key] or seq > first[key][-1], (key, first[key], seq)
                first[key].append(seq)
            runs[(inst, group, seq)].append(pid)
        else:
            running[key].remove((pid, seq))
            pids_of[inst][pid] -= 1
    again = {k for k, pids in runs.items() if len(pids) > 1}
    for k in again:  # a second run only after a first one on a killed worker
        assert set(runs[k][:-1]) <= killed, (k, runs[k])
    return starts, again


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.timeout(180)  # four worker processes: 25-35 s alone, past 90 s on a loaded machine
async def test_a_fleet_spreads_rebalances_and_hands_over_without_losing_or_doubling(
    pg_url: str, tmp_path: Path
) -> None:
    truncate_actor_tables(pg_url)
    log = tmp_path / "calls.log"
    backend = open_actor_store(pg_url)
    await backend.open()
    store = backend.actors
    # The test appends as `yoke serve --no-worker` does: a runtime attached, not running.
    rt = ActorRuntime(settings=ActorSettings.from_env(FLEET_ENV, worker_id="appender"))
    define(rt)
    rt.attach(store)
    try:
        async with fleet() as procs:
            for wid in ("w1", "w2", "w3"):
                await start(procs, pg_url, log, wid)
            await append_round(rt, 0)
            # Placed at creation over the live workers: shared out before any heartbeat.
            got = await shares(store)
            assert fair(got, ["w1", "w2", "w3"]), got
            assert "appender" not in got
            await append_round(rt, 1)
            await append_round(rt, 2)

            await start(procs, pg_url, log, "w4")
            joined = time.monotonic()
            await append_round(rt, 3)

            async def four_fair() -> bool:
                return fair(await shares(store), ["w1", "w2", "w3", "w4"])

            await until(four_fair, 60)
            print(f"w4 reached its share in {time.monotonic() - joined:.2f}s")
            await append_round(rt, 4)
            await append_round(rt, 5)

            w1 = procs["w1"]
            w1.proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(30):
                assert await w1.proc.wait() == 0
            got = await shares(store)  # handed over before it exited
            assert "w1" not in got and set(got) <= {"w2", "w3", "w4"}, got
            await append_round(rt, 6)

            w2 = procs["w2"]
            killed = str(w2.proc.pid)
            w2.proc.send_signal(signal.SIGKILL)
            await w2.proc.wait()
            with log.open("a") as f:
                f.write(f"K {killed}\n")
            await append_round(rt, 7)

            refs = [
                InstanceRef(tenant=t, actor="work", instance_id=i)
                for t, i in map(instance_of, range(INSTANCES))
            ]

            async def all_done() -> bool:
                (c,) = await store.actor_counts(tenant=None)
                return c.pending == 0 and c.in_flight == 0

            await until(all_done, 90)
            (c,) = await store.actor_counts(tenant=None)
            assert c.instances == INSTANCES and c.dead == 0, c

            async def two_fair() -> bool:
                return fair(await shares(store), ["w3", "w4"])

            await until(two_fair, 30)
            states = await store.get_states(refs)
    finally:
        await backend.close()
    for ref, st in states.items():
        seen = json.loads(st.state)
        for g in ("g0", "g1"):
            want = [r for r in range(ROUNDS) if f"g{r % 2}" == g]
            assert sorted(set(seen.get(g, []))) == want, (ref, seen)  # nothing lost
    starts, again = check_log(log.read_text().splitlines(), {killed})
    assert starts >= INSTANCES * ROUNDS
    print(f"{starts} starts, {len(again)} events run again after the SIGKILL")
