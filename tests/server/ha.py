"""Run real `yoke serve --ha` subprocesses on one PostgreSQL database (an HA pair) for tests.

Unlike `e2e.yoke_serve`, a server here is up once `/healthz` answers: a standby never becomes
ready (its `/readyz` is 503 by design).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg

from tests.server.e2e import ROOT, Running, free_port

TTL = 2.0
HA_ENV = {
    "YOKE_HA_LEASE_TTL_SECS": str(TTL),
    "YOKE_HA_POLL_SECS": "0.5",
    "YOKE_HEARTBEAT_INTERVAL": "0.3",
    "YOKE_INSTANCE_STALE_AFTER": "2",
    "YOKE_EXECUTION_SHUTDOWN_TIMEOUT": "4",
}


def start_ha(database_url: str, tmp: Path, env: dict[str, str] | None = None) -> Running:
    port = free_port()
    log = tmp / f"ha-{port}.log"
    full_env = {**os.environ, **HA_ENV, **(env or {})}
    args = [sys.executable, "-m", "yoke", "serve", "--ha", "--app", "tests.server.e2e_app:app"]
    args += ["--port", str(port), "--database-url", database_url, "--log-level", "warning"]
    with log.open("wb") as out:
        process = subprocess.Popen(args, cwd=ROOT, env=full_env, stdout=out, stderr=out)
    running = Running(url=f"http://127.0.0.1:{port}", process=process, log=log)
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            raise AssertionError("yoke serve --ha exited:\n" + log.read_text()[-3000:])
        try:
            if httpx.get(running.url + "/v1/ha", timeout=1).status_code == 200:
                return running
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError("yoke serve --ha did not answer:\n" + log.read_text())
        time.sleep(0.05)  # waiting for a subprocess to listen: nothing to await


@contextmanager
def servers(database_url: str, tmp: Path) -> Iterator[Callable[..., Running]]:
    """`start(env=...)` starts one more server; every one is stopped (SIGCONT first: a test
    may leave one stopped) at the end."""
    started: list[Running] = []

    def start(env: dict[str, str] | None = None) -> Running:
        running = start_ha(database_url, tmp, env)
        started.append(running)
        return running

    try:
        yield start
    finally:
        for r in started:
            _stop(r)


def _stop(r: Running) -> None:
    if r.process.poll() is None:
        r.process.send_signal(signal.SIGCONT)
        r.terminate()


def ha(r: Running) -> dict[str, Any]:
    answer = httpx.get(r.url + "/v1/ha", timeout=5)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def wait_role(r: Running, role: str, *, within: float = 30.0) -> float:
    """Seconds until `r` reports `role` (fails after `within`)."""
    t0 = time.monotonic()
    while True:
        try:
            if ha(r)["role"] == role:
                return time.monotonic() - t0
        except httpx.HTTPError:
            pass
        if time.monotonic() - t0 > within:
            raise AssertionError(f"{r.url} is not {role} after {within} s:\n{r.log.read_text()}")
        time.sleep(0.02)  # polling another process: nothing to await


def post_start(r: Running, workflow: str, input: Any = None, **extra: Any) -> httpx.Response:
    headers = extra.pop("headers", {})
    params = extra.pop("params", None)
    body = {"workflow": workflow, "input": input, **extra}
    return httpx.post(r.url + "/v1/starts", json=body, headers=headers, params=params, timeout=10)


def rows(url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return list(conn.execute(sql.encode(), params).fetchall())
