"""Run a real `yoke serve` subprocess on 127.0.0.1 (a free port) for the end-to-end tests."""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _limit_files(nofile: tuple[int, int]) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, nofile)


@dataclass
class Running:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def terminate(self, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(
                "yoke serve did not stop on SIGTERM:\n" + self.log.read_text()[-3000:]
            ) from None


@contextmanager
def yoke_serve(
    database_url: str,
    tmp: Path,
    *,
    env: dict[str, str] | None = None,
    app: str = "tests.server.e2e_app:app",
    nofile: tuple[int, int] | None = None,
) -> Iterator[Running]:
    """`nofile`: the (soft, hard) RLIMIT_NOFILE the server starts with."""
    with yoke_serves(database_url, tmp, 1, env=env, app=app, nofile=nofile) as (running,):
        yield running


@contextmanager
def yoke_serves(
    database_url: str,
    tmp: Path,
    n: int,
    *,
    env: dict[str, str] | None = None,
    app: str = "tests.server.e2e_app:app",
    nofile: tuple[int, int] | None = None,
) -> Iterator[tuple[Running, ...]]:
    """`n` servers of one database, launched together (each boot overlaps the others');
    `nofile`: the (soft, hard) RLIMIT_NOFILE each starts with."""
    full_env = {**os.environ, "YOKE_EXECUTION_SHUTDOWN_TIMEOUT": "2", **(env or {})}
    started: list[Running] = []
    try:
        for _ in range(n):
            port = free_port()
            log = tmp / f"serve-{port}.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "yoke",
                        "serve",
                        "--app",
                        app,
                        "--port",
                        str(port),
                        "--database-url",
                        database_url,
                        "--log-level",
                        "warning",
                    ],
                    cwd=ROOT,
                    env=full_env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    preexec_fn=None if nofile is None else lambda: _limit_files(nofile),
                )
            started.append(Running(url=f"http://127.0.0.1:{port}", process=process, log=log))
        for running in started:
            _until_ready(running)
        yield tuple(started)
    finally:
        for running in started:
            if running.process.poll() is None:
                running.process.send_signal(signal.SIGTERM)
        for running in started:
            running.terminate()


def _until_ready(running: Running) -> None:
    process, log = running.process, running.log
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            raise AssertionError("yoke serve exited:\n" + log.read_text()[-3000:])
        try:
            if httpx.get(running.url + "/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError("yoke serve did not become ready:\n" + log.read_text())
        time.sleep(0.05)  # waiting for a subprocess to listen: nothing to await
