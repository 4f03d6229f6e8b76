"""Shared helpers for yoke's benchmarks: medians of repeated runs and the machine line.

Every figure in docs/BENCHMARKS.md is a median of several runs with its min-max, and every
speed is also given as a ratio to a baseline measured in the same run, because this machine is
shared and noisy (2 cores).
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

PG_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


@dataclass(frozen=True)
class Figure:
    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Figure:
        return cls(statistics.median(values), min(values), max(values))

    def fmt(self, unit: str = "", digits: int = 0) -> str:
        spec = f",.{digits}f"
        return f"{self.median:{spec}}{unit} ({self.low:{spec}}-{self.high:{spec}})"


def machine() -> str:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"{platform.python_implementation()} {platform.python_version()}, {cpu}, "
        f"{os.cpu_count()} cores, {platform.system()} {platform.release()}"
    )


@contextlib.asynccontextmanager
async def fresh_databases(
    backend: str, server: str = PG_SERVER
) -> AsyncIterator[Callable[[], Awaitable[str]]]:
    """A factory of URLs of empty databases of `backend` ("sqlite" or "postgres"), so no run
    sees the rows or the limits of another; all are removed on exit."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            counter = iter(range(10**9))

            async def sqlite_url() -> str:
                return f"sqlite:///{tmp}/bench-{next(counter)}.db"

            yield sqlite_url
        return
    import psycopg  # only the PostgreSQL benchmarks need it

    created: list[str] = []

    async def pg_url() -> str:
        name = f"yoke_bench_{uuid.uuid4().hex[:10]}"
        async with await psycopg.AsyncConnection.connect(server, autocommit=True) as c:
            await c.execute(f'CREATE DATABASE "{name}"'.encode())
        created.append(name)
        return urlunsplit(urlsplit(server)._replace(path=f"/{name}"))

    try:
        yield pg_url
    finally:
        async with await psycopg.AsyncConnection.connect(server, autocommit=True) as c:
            for name in created:
                await c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())
