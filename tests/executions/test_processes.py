"""Across processes: a SIGKILLed worker's rows are recovered (ABORTED) and resume correctly;
4 processes x 50 tasks racing for one free slot on PostgreSQL get exactly one grant."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import _truncate
from yoke.executions import Context, ExecutionStatus, Limits, StartStatus

from .helpers import Gates, count_rows, make_app, wait_until

ROOT = Path(__file__).resolve().parents[2]


async def spawn(
    module: str, *args: str, env: dict[str, str] | None = None
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        f"tests.executions.{module}",
        *args,
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


async def lines(
    proc: asyncio.subprocess.Process, *prefixes: str, timeout: float = 30
) -> dict[str, list[str]]:
    """Read the worker's output until it has printed a line for every prefix."""
    assert proc.stdout is not None
    seen: dict[str, list[str]] = {}
    while set(prefixes) - set(seen):
        raw = await asyncio.wait_for(proc.stdout.readline(), timeout)
        if not raw:
            raise AssertionError(f"worker exited before printing {prefixes}")
        words = raw.decode().split()
        if words and words[0] in prefixes:
            seen[words[0]] = words[1:]
    return seen


async def line(proc: asyncio.subprocess.Process, prefix: str, timeout: float = 30) -> list[str]:
    return (await lines(proc, prefix, timeout=timeout))[prefix]


@pytest.mark.slow
async def test_a_killed_worker_leaves_aborted_rows_that_resume(database_url: str) -> None:
    proc = await spawn("worker_crash", database_url)
    try:
        said = await lines(proc, "RUNNING", "QUEUED")
        (execution_id,) = said["RUNNING"]
        queued_id, _ = said["QUEUED"]
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    assert count_rows(database_url, "yoke_executions", "status = 'RUNNING'") == 1

    ones: list[Any] = []
    # YOKE_RECOVERY=abort: the rows stay ABORTED, to resume by hand (tests/executions/
    # test_recovery.py has the automatic recovery).
    app = make_app(database_url, heartbeat_interval=0.1, instance_stale_after=1.0, recovery="abort")

    @app.workflow("crashy")
    async def crashy(ctx: Context, input: Any) -> Any:
        def first() -> Any:
            ones.append(1)
            return {"pid": -1}

        one = await ctx.step("one", first)
        two = await ctx.step("two", lambda: "second")
        return [one, two]

    async with app.running():
        ex = app.executions

        async def recovered() -> bool:
            return (await ex.get_execution(execution_id)).status is ExecutionStatus.ABORTED

        await wait_until(recovered, timeout=15)
        lost = await ex.get(queued_id)
        assert lost.status is StartStatus.ABORTED and "died" in (lost.reason or "")
        assert app.store is not None and await app.store.ledger() == {}
        resumed = await ex.resume(execution_id)
        assert resumed.status is StartStatus.GRANTED and resumed.execution_id is not None
        done = await ex.wait(resumed.execution_id, 10)
        assert done.status is ExecutionStatus.SUCCEEDED
        assert done.output == [{"pid": proc.pid}, "second"]
        assert ones == []  # step one was not run again


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("app", {"GRANTED": 1, "QUEUED": 199}),
        ("store", {"GRANTED": 1, "FULL": 199}),
    ],
)
async def test_four_processes_racing_for_one_slot_get_one_grant(
    pg_url: str, mode: str, expected: dict[str, int]
) -> None:
    _truncate(pg_url)
    procs = [await spawn("worker_race", mode, pg_url, "50") for _ in range(4)]
    try:
        for p in procs:
            await line(p, "READY")
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(b"go\n")
        counts: dict[str, int] = {}
        for p in procs:
            (raw,) = await line(p, "DONE", timeout=60)
            for status, n in json.loads(raw).items():
                counts[status] = counts.get(status, 0) + n
        assert counts == expected
        assert count_rows(pg_url, "yoke_executions") == 1
        assert count_rows(pg_url, "yoke_starts", "status = 'GRANTED'") == 1
        assert count_rows(pg_url, "yoke_ledger", "key = 'global' AND running = 1") == 1
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(b"exit\n")
        for p in procs:
            assert await asyncio.wait_for(p.wait(), 30) == 0
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()


@pytest.mark.postgres
@pytest.mark.slow
async def test_three_processes_with_overlapping_batches_share_a_cap_exactly(pg_url: str) -> None:
    """Three processes, each with two grant batches in the store at once, 40 short starts each
    under a global cap of 3: every start runs once and succeeds, the ledger never shows more
    than 3 running (sampled throughout), and it is back to 0 at the end."""
    _truncate(pg_url)
    procs = [await spawn("worker_race", "overlap", pg_url, "40") for _ in range(3)]
    samples: list[int] = []
    stop = asyncio.Event()

    async def sample() -> None:
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            while not stop.is_set():
                cur = await conn.execute("SELECT running FROM yoke_ledger WHERE key = 'global'")
                row = await cur.fetchone()
                samples.append(int(row[0]) if row else 0)
                await asyncio.sleep(0.001)

    sampler = asyncio.ensure_future(sample())
    try:
        for p in procs:
            await line(p, "READY")
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(b"go\n")
        counts: dict[str, int] = {}
        for p in procs:
            seen = await lines(p, "MOST", "DONE", timeout=120)
            assert 1 <= int(seen["MOST"][0]) <= 3
            for status, n in json.loads(seen["DONE"][0]).items():
                counts[status] = counts.get(status, 0) + n
        assert counts == {"SUCCEEDED": 120}
        stop.set()
        await sampler
        assert len(samples) > 10 and max(samples) <= 3, max(samples)
        assert count_rows(pg_url, "yoke_executions") == 120
        assert count_rows(pg_url, "yoke_ledger", "running <> 0") == 0
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(b"exit\n")
        for p in procs:
            assert await asyncio.wait_for(p.wait(), 30) == 0
    finally:
        stop.set()
        await asyncio.gather(sampler, return_exceptions=True)
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()


@pytest.mark.postgres
@pytest.mark.slow
async def test_four_processes_share_a_tenants_cap_exactly(pg_url: str, tmp_path: Path) -> None:
    """Four processes, each with two grant batches in the store at once, start 40 short
    executions of one tenant each, every one in a session of its own, under the tenant's
    executions.max_running of 3: no more than 3 ever run at once across the processes (counted
    by the executions themselves, and in the ledger sampled throughout), the cap is used, and
    every ledger row, touched by each grant and emptied by each finish many times over (its
    deletion racing the next grant's insert), is gone at the end."""
    _truncate(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tenant_settings (tenant, exec_max_running, updated_by, updated_at) "
            "VALUES ('acme', 3, 'test', 0)"
        )
    counter = tmp_path / "running.json"
    env = {"YOKE_TEST_COUNTER": str(counter)}
    procs = [await spawn("worker_race", "tenant", pg_url, "40", env=env) for _ in range(4)]
    samples: list[int] = []
    stop = asyncio.Event()

    async def sample() -> None:
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            while not stop.is_set():
                cur = await conn.execute(
                    "SELECT running FROM yoke_ledger WHERE key = 'tenant:acme'"
                )
                row = await cur.fetchone()
                samples.append(int(row[0]) if row else 0)
                await asyncio.sleep(0.001)

    sampler = asyncio.ensure_future(sample())
    try:
        for p in procs:
            await line(p, "READY")
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(b"go\n")
        counts: dict[str, int] = {}
        for p in procs:
            (raw,) = await line(p, "DONE", timeout=120)
            for status, n in json.loads(raw).items():
                counts[status] = counts.get(status, 0) + n
        assert counts == {"SUCCEEDED": 160}
        stop.set()
        await sampler
        seen = json.loads(counter.read_text())
        assert seen["calls"] == 160
        assert seen["most"] <= 3, seen  # four processes with room to spare: 3 at most
        assert seen["most"] == 3, seen  # the cap was used, not a serial run
        assert len(samples) > 10 and max(samples) <= 3, max(samples)
        assert count_rows(pg_url, "yoke_ledger") == 0  # no row left, not even at zero
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(b"exit\n")
        for p in procs:
            assert await asyncio.wait_for(p.wait(), 30) == 0
    finally:
        stop.set()
        await asyncio.gather(sampler, return_exceptions=True)
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()


async def _two_instances_share_one_slot(database_url: str, poll: float) -> None:
    gates = Gates()
    a = make_app(database_url, gates, limits=Limits(max_running=1), slot_poll_interval=poll)
    b = make_app(database_url, gates, limits=Limits(max_running=1), slot_poll_interval=poll)
    async with a.running(), b.running():
        held = await a.executions.start("hold", {"gate": "a"})
        assert held.status is StartStatus.GRANTED
        waiting = await b.executions.start("hold", {"gate": "b"})
        assert waiting.status is StartStatus.QUEUED  # the ledger is full: A holds the slot
        gates.open("a")
        granted = await b.executions.wait_granted(waiting.start_id, timeout=10)
        assert granted.status is StartStatus.GRANTED
        gates.open("b")


async def test_a_slot_freed_by_another_instance_wakes_a_queued_start(database_url: str) -> None:
    await _two_instances_share_one_slot(database_url, poll=0.05)


@pytest.mark.postgres
async def test_postgres_wakes_the_other_instance_by_notify(pg_url: str) -> None:
    _truncate(pg_url)
    # With a 30 s backup poll, only the NOTIFY of A's finish can wake B within 10 s.
    await _two_instances_share_one_slot(pg_url, poll=30.0)
