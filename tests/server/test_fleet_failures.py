"""Failures across a fleet of real `yoke serve` processes sharing one PostgreSQL: a server
killed with SIGKILL while a step waits between two attempts is recovered by another, once, and
its attempts are counted on; two servers racing to recover a dead one recover each execution
exactly once; a cancel sent to another server than the one running the execution stops it
within a second, its child with it, and frees its slot for the start queued behind it."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import _truncate
from tests.executions.helpers import count_rows
from tests.server.e2e import Running, yoke_serves

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

APP = "tests.executions.durable_app:app"
FAST = {
    "YOKE_HEARTBEAT_INTERVAL": "0.2",
    "YOKE_INSTANCE_STALE_AFTER": "1.5",
    "YOKE_SLOT_POLL_INTERVAL": "0.2",
    "YOKE_REQUEST_POLL_SECS": "0.5",
    "YOKE_EXECUTION_SHUTDOWN_TIMEOUT": "0.2",  # what still runs at the end is aborted at once
}


@contextmanager
def servers(url: str, tmp: Path, n: int) -> Iterator[tuple[Running, ...]]:
    with yoke_serves(url, tmp, n, env=FAST, app=APP) as started:
        yield started


def until(what: str, check: Callable[[], Any], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: not in {timeout} s"
        time.sleep(0.05)  # polling another process's state, as a client would


def kill(server: Running) -> None:
    server.process.send_signal(signal.SIGKILL)
    server.process.wait(10)


def test_a_server_killed_between_retries_is_recovered_once_by_another(
    pg_url: str, tmp_path: Path
) -> None:
    _truncate(pg_url)
    calls = tmp_path / "calls"
    with servers(pg_url, tmp_path, 2) as (a, b):
        flaky = {"path": str(calls), "succeed_at": 3, "backoff": 1.5, "max_attempts": 4}
        start = httpx.post(f"{a.url}/v1/starts", json={"workflow": "flaky", "input": flaky})
        eid = start.json()["execution_id"]

        def retrying() -> bool:
            steps = httpx.get(f"{a.url}/v1/executions/{eid}/steps").json()["steps"]
            return bool(steps) and steps[0]["status"] == "RETRYING"

        until("the first attempt failed", retrying)
        kill(a)
        first = calls.read_text().split()
        assert first == [str(a.process.pid)]

        def resumed() -> dict[str, Any] | None:
            items = httpx.get(f"{b.url}/v1/executions", params={"workflow": "flaky"}).json()
            done = [e for e in items["items"] if e["resumed_from"] == eid]
            return done[0] if done and done[0]["status"] != "RUNNING" else None

        new = until("recovered and done", resumed)
        old = httpx.get(f"{b.url}/v1/executions/{eid}").json()
        steps = httpx.get(f"{b.url}/v1/executions/{new['execution_id']}/steps").json()["steps"]
    assert new["status"] == "SUCCEEDED" and new["output"] == 3
    assert old["status"] == "ABORTED" and "recovered by start" in old["error"]["message"]
    [step] = steps
    assert (step["status"], step["attempts"]) == ("SUCCEEDED", 3)
    lines = calls.read_text().split()
    assert lines == [str(a.process.pid), str(b.process.pid), str(b.process.pid)]
    assert count_rows(pg_url, "yoke_starts", "kind = 'resume' AND recovery = 1") == 1


def test_two_servers_racing_recover_each_execution_of_a_dead_one_exactly_once(
    pg_url: str, tmp_path: Path
) -> None:
    _truncate(pg_url)
    with servers(pg_url, tmp_path, 3) as (a, b, c):
        ids = [
            httpx.post(f"{a.url}/v1/starts", json={"workflow": "parent"}).json()["execution_id"]
            for _ in range(6)
        ]
        until(
            "all running",
            lambda: count_rows(pg_url, "yoke_executions", "parent_id IS NOT NULL") == 6,
        )
        kill(a)

        def recovered() -> bool:
            return count_rows(pg_url, "yoke_executions", "resumed_from IS NOT NULL") >= 6

        until("all recovered", recovered)
        time.sleep(1.0)  # several heartbeats of both servers more: nothing is recovered twice
        resumes = httpx.get(f"{b.url}/v1/executions", params={"status": "RUNNING"}).json()
        assert count_rows(pg_url, "yoke_starts", "kind = 'resume'") == 6
        sources = sorted(e["resumed_from"] for e in resumes["items"] if e["workflow"] == "parent")
        assert sources == sorted(ids)
        # Each resumed parent runs once, on one server; its child workflow runs again with it.
        assert (
            count_rows(pg_url, "yoke_executions", "status = 'RUNNING' AND parent_id IS NULL") == 6
        )
        running_on = {
            r
            for (r,) in _rows(
                pg_url, "SELECT DISTINCT instance_id FROM yoke_executions WHERE status = 'RUNNING'"
            )
        }
        assert running_on <= {_instance(b), _instance(c)}


def test_cancel_sent_to_another_server_stops_it_within_a_second(
    pg_url: str, tmp_path: Path
) -> None:
    _truncate(pg_url)
    with servers(pg_url, tmp_path, 2) as (a, b):
        assert httpx.put(f"{b.url}/v1/limits", json={"max_running": 1}).status_code == 200
        until(
            "a follows the limits",
            lambda: httpx.get(f"{a.url}/v1/limits").json()["max_running"] == 1,
        )
        eid = httpx.post(f"{a.url}/v1/starts", json={"workflow": "parent"}).json()["execution_id"]
        until(
            "the child runs",
            lambda: count_rows(pg_url, "yoke_executions", "parent_id IS NOT NULL") == 1,
        )
        queued = httpx.post(f"{b.url}/v1/starts", json={"workflow": "echo", "input": 5}).json()
        assert queued["status"] == "QUEUED"
        t0 = time.monotonic()
        r = httpx.post(f"{b.url}/v1/executions/{eid}/cancel", timeout=30)
        took = time.monotonic() - t0
        assert r.status_code == 200, r.text
        cancelled = r.json()
        [child] = httpx.get(f"{b.url}/v1/executions", params={"workflow": "child"}).json()["items"]

        def granted() -> dict[str, Any] | None:
            got: dict[str, Any] = httpx.get(f"{b.url}/v1/starts/{queued['start_id']}").json()
            return got if got["status"] == "GRANTED" else None

        until("the queued start took the freed slot", granted)
    assert took < 1.0, took
    assert cancelled["status"] == "CANCELLED" and cancelled["error"]["type"] == "Cancelled"
    assert child["status"] == "CANCELLED"


def _rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url) as conn:
        return list(conn.execute(sql.encode()).fetchall())


def _instance(server: Running) -> str:
    return str(httpx.get(f"{server.url}/readyz").json()["instance_id"])
