"""Automatic recovery (`YOKE_RECOVERY=resume`): an execution of a process that died is resumed by
a live one, from its last recorded step, through admission; exactly once however many
recoverers race; at most `YOKE_RECOVERY_MAX` times in a row; the dead process's queued starts
are taken over. The store's side (`recover_dead` with a `Resume` rule) and real processes
killed with SIGKILL, on both stores."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.store.grants import grant_request
from yoke.app import open_store
from yoke.executions import Context, ExecutionStatus, StepStatus
from yoke.store import (
    ExecutionStatus as Status,
)
from yoke.store import (
    NewExecution,
    NewStart,
    Resume,
    Slot,
    StartKind,
    StartStatus,
    Store,
)

from .helpers import count_rows, make_app, wait_until

ROOT = Path(__file__).resolve().parents[2]
SLOTS = [Slot(key="global", cap=None), Slot(key="session:s", cap=None)]


def _start(
    instance: str, *, kind: StartKind = StartKind.START, source: str | None = None
) -> NewStart:
    return NewStart(
        start_id=str(uuid.uuid4()),
        kind=kind,
        workflow="wf",
        session="s",
        tenant="s",
        priority=3,
        input='{"x":1}',
        fingerprint="",
        principal=None,
        idempotency_key=None,
        source_execution_id=source,
        from_step=None,
        instance_id=instance,
        created_at=1,
    )


async def _running_on(store: Store, instance: str) -> str:
    [res] = await store.grant_starts([grant_request(_start(instance), SLOTS, log=True)], now=1)
    assert res.execution is not None
    return res.execution.execution_id


async def test_recover_dead_resumes_each_execution_and_takes_over_the_queue(store: Store) -> None:
    await store.register_instance("dead", now=0)
    top = await _running_on(store, "dead")
    child = await store.create_child(
        NewExecution(
            execution_id=str(uuid.uuid4()),
            start_id=None,
            workflow="c",
            session="s",
            tenant="s",
            input="null",
            parent_id=top,
            restarted_from=None,
            resumed_from=None,
            instance_id="dead",
            created_at=2,
        )
    )
    queued, _ = await store.log_start(_start("dead"))
    ids = iter(["resume-1"])
    found = await store.recover_dead(
        stale_before=50, now=100, exclude="me", resume=Resume(max_recoveries=3, new_id=ids.__next__)
    )
    assert found.instances == ("dead",) and found.recovered == (top,)
    assert set(found.executions) == {top, child.execution_id} and found.starts == ()
    taken, resumed = found.adopted
    assert (taken.start_id, taken.instance_id, taken.status) == (
        queued.start_id,
        "me",
        StartStatus.QUEUED,
    )
    assert (resumed.start_id, resumed.kind, resumed.source_execution_id, resumed.recovery) == (
        "resume-1",
        StartKind.RESUME,
        top,
        1,
    )
    assert (resumed.instance_id, resumed.priority, resumed.input) == ("me", 3, '{"x":1}')
    assert await store.get_start("resume-1") == resumed
    ended = await store.get_execution(top)
    assert ended is not None and ended.status is Status.ABORTED and ended.error is not None
    assert "recovered by start resume-1" in json.loads(ended.error)["message"]
    stopped = await store.get_execution(child.execution_id)
    assert stopped is not None and stopped.status is Status.ABORTED
    assert await store.ledger() == {}


async def test_a_chain_of_recoveries_stops_at_the_most_with_the_reason(store: Store) -> None:
    rule = Resume(max_recoveries=2, new_id=lambda: str(uuid.uuid4()))
    await store.register_instance("w0", now=0)
    execution = await _running_on(store, "w0")
    for n in range(1, 4):
        found = await store.recover_dead(
            stale_before=10 * n, now=10 * n + 5, exclude=f"w{n}", resume=rule
        )
        ended = await store.get_execution(execution)
        assert ended is not None and ended.error is not None
        message = json.loads(ended.error)["message"]
        if n == 3:  # two automatic recoveries in a row already: no third
            assert found.recovered == () and found.adopted == ()
            assert "not recovered: 2 automatic recoveries in a row" in message
            assert "YOKE_RECOVERY_MAX=2" in message
            break
        [resume] = found.adopted
        assert resume.recovery == n and resume.source_execution_id == execution
        # The resume is granted on its recoverer, which dies in turn.
        await store.register_instance(f"w{n}", now=10 * n + 5)
        [res] = await store.grant_starts([grant_request(_as_new(resume), SLOTS)], now=10 * n + 6)
        assert res.execution is not None
        execution = res.execution.execution_id


def _as_new(row: Any) -> NewStart:
    return NewStart(
        start_id=row.start_id,
        kind=row.kind,
        workflow=row.workflow,
        session=row.session,
        tenant=row.tenant,
        priority=row.priority,
        input=row.input,
        fingerprint=row.fingerprint,
        principal=row.principal,
        idempotency_key=row.idempotency_key,
        source_execution_id=row.source_execution_id,
        from_step=row.from_step,
        instance_id=row.instance_id,
        created_at=row.created_at,
    )


async def test_recoverers_racing_recover_each_execution_exactly_once(database_url: str) -> None:
    backends = [open_store(database_url) for _ in range(4)]
    for b in backends:
        await b.open()
    try:
        first = backends[0].executions
        for i in range(3):
            await first.register_instance(f"dead{i}", now=0)
            for _ in range(5):
                await _running_on(first, f"dead{i}")
        rule = Resume(max_recoveries=3, new_id=lambda: str(uuid.uuid4()))
        found = await asyncio.gather(
            *(
                b.executions.recover_dead(stale_before=50, now=100, exclude=f"live{k}", resume=rule)
                for k, b in enumerate(backends)
            )
        )
        recovered = [e for f in found for e in f.recovered]
        assert len(recovered) == len(set(recovered)) == 15
        assert sorted(i for f in found for i in f.instances) == ["dead0", "dead1", "dead2"]
        assert count_rows(database_url, "yoke_starts", "kind = 'resume'") == 15
        for f, k in zip(found, range(4), strict=True):
            assert all(s.instance_id == f"live{k}" for s in f.adopted)
        assert await first.ledger() == {}
    finally:
        for b in backends:
            await b.close()


# -- real processes ---------------------------------------------------------------------------
async def spawn(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.executions.worker_durable",
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )


async def said(proc: asyncio.subprocess.Process, word: str, timeout: float = 30) -> str:
    assert proc.stdout is not None
    while True:
        raw = await asyncio.wait_for(proc.stdout.readline(), timeout)
        if not raw:
            raise AssertionError(f"the worker exited before saying {word}")
        parts = raw.decode().split()
        if parts and parts[0] == word:
            return parts[1]


@pytest.mark.slow
async def test_a_process_killed_between_retries_is_recovered_once_and_counts_on(
    database_url: str, tmp_path: Path
) -> None:
    calls = tmp_path / "calls"
    flaky = {"path": str(calls), "succeed_at": 3, "backoff": 1.5, "max_attempts": 4}
    worker = await spawn(database_url, "3", "flaky", json.dumps(flaky))
    try:
        execution_id = await said(worker, "STARTED")
        reader = open_store(database_url)
        await reader.open()
        try:

            async def between_retries() -> bool:
                steps = await reader.executions.steps_of(execution_id)
                return bool(steps) and steps[0].status is StepStatus.RETRYING

            await wait_until(between_retries, timeout=20)
        finally:
            await reader.close()
    finally:
        worker.send_signal(signal.SIGKILL)
        await worker.wait()
    assert calls.read_text().split() == [str(worker.pid)]  # one attempt, then the kill
    from .durable_app import define

    app = define(make_app(database_url, heartbeat_interval=0.1, instance_stale_after=1.0))
    async with app.running():
        ex = app.executions

        async def recovered() -> bool:
            page = await ex.list(workflow="flaky")
            return len(page.items) == 2

        await wait_until(recovered, timeout=20)
        newest, old = (await ex.list(workflow="flaky")).items
        assert old.execution_id == execution_id and newest.resumed_from == execution_id
        done = await ex.wait(newest.execution_id, 20)
        assert app.store is not None
        [step] = await app.store.steps_of(newest.execution_id)
        start = await ex.get(newest.start_id or "")
    assert done.status is ExecutionStatus.SUCCEEDED and done.output == 3
    assert (step.status, step.attempts, step.first_attempt) == (StepStatus.SUCCEEDED, 3, 1)
    assert old.status is ExecutionStatus.ABORTED and old.error is not None
    assert f"recovered by start {start.start_id}" in old.error.message
    assert start.kind.value == "resume" and start.recovery == 1
    lines = calls.read_text().split()
    assert len(lines) == 3 and lines[0] == str(worker.pid)  # counted on: attempts 2 and 3 here
    assert count_rows(database_url, "yoke_starts", "kind = 'resume'") == 1


@pytest.mark.slow
async def test_a_workflow_that_kills_its_server_is_recovered_at_most_recovery_max_times(
    database_url: str,
) -> None:
    first = await spawn(database_url, "1", "suicide", "null")
    await said(first, "STARTED")
    assert await asyncio.wait_for(first.wait(), 30) == -signal.SIGKILL
    # A live server recovers it (its first automatic recovery), runs it, and dies of it.
    second = await spawn(database_url, "1")
    await said(second, "READY")
    assert await asyncio.wait_for(second.wait(), 30) == -signal.SIGKILL

    app = make_app(database_url, heartbeat_interval=0.1, instance_stale_after=1.0, recovery_max=1)
    ran: list[str] = []

    @app.workflow()
    async def suicide(ctx: Context, input: Any) -> Any:  # here it must never run again
        ran.append(ctx.execution_id)

    async with app.running():

        async def both_ended() -> bool:
            page = await app.executions.list(workflow="suicide")
            return len(page.items) == 2 and all(e.status.finished for e in page.items)

        await wait_until(both_ended, timeout=20)
        await asyncio.sleep(0.5)  # a few heartbeats more: nothing else is recovered
        newest, oldest = (await app.executions.list(workflow="suicide")).items
    assert ran == []
    assert newest.resumed_from == oldest.execution_id
    assert oldest.status is ExecutionStatus.ABORTED and newest.status is ExecutionStatus.ABORTED
    assert newest.error is not None
    assert "not recovered: 1 automatic recoveries in a row already" in newest.error.message
    assert count_rows(database_url, "yoke_starts", "kind = 'resume'") == 1
