"""Benchmark of the HTTP server: `POST /v1/starts` through a real uvicorn on loopback, against a
bare endpoint (`GET /healthz`: same process, same uvicorn, same middleware, no scheduler) served
in the same run, so the ratio shows what admission costs over the HTTP stack itself.

    .venv/bin/python -m bench.bench_server [--quick] [--runs N] [--no-pg] [--rate R]

Scenarios, on SQLite and on PostgreSQL (a fresh database for every server): `granted` (no
limits: every start is a 201 and its execution runs and ends), and `queued` (one slot, held:
every start is a 202 and waits). Throughput comes from 64 concurrent keep-alive clients, each
sending its next request when the last is answered (closed loop: the server is saturated, so
by Little's law latency is 64 / throughput). Latency is also measured unsaturated: requests
sent at a fixed rate (`--rate`, default 500/s) over the same 64 connections, each timed from
the moment it was due (open loop, so a request that waited for a busy connection counts its
wait). The load comes from a lean asyncio HTTP/1.1 client in this process (it shares this
machine's cores with the server). Each figure is the median of several runs (min-max).
Results go to bench/results/server.json; a markdown section is printed. Traffic goes only to
127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yoke
from bench.common import fresh_databases, machine

RESULTS = Path(__file__).resolve().parent / "results" / "server.json"
CLIENTS = 64
_LENGTH = re.compile(rb"content-length:\s*(\d+)", re.IGNORECASE)

# The app `yoke serve --app bench.bench_server:app` runs in the server process.
app = yoke.App()


@app.workflow()
async def noop(ctx: yoke.Context, input: Any) -> Any:
    return None


@app.workflow()
async def hold(ctx: yoke.Context, input: Any) -> Any:
    await asyncio.sleep(3600)  # holds the one slot for the whole `queued` scenario


def _request(method: str, path: str, body: bytes = b"") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    if body:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


async def _client(
    port: int, request: bytes, count: int, lat: list[float], statuses: Counter[int]
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for _ in range(count):
            t = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            m = _LENGTH.search(head)
            await reader.readexactly(int(m.group(1)) if m else 0)
            lat.append(time.perf_counter() - t)
            statuses[int(head[9:12])] += 1
    finally:
        writer.close()


async def load(port: int, request: bytes, total: int) -> dict[str, Any]:
    lat: list[float] = []
    statuses: Counter[int] = Counter()
    per = max(1, total // CLIENTS)
    t = time.perf_counter()
    await asyncio.gather(*(_client(port, request, per, lat, statuses) for _ in range(CLIENTS)))
    elapsed = time.perf_counter() - t
    lat.sort()
    return {
        "rps": len(lat) / elapsed,
        "p50_ms": 1000 * lat[len(lat) // 2],
        "p99_ms": 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))],
        "statuses": dict(statuses),
    }


async def paced(port: int, request: bytes, rate: float, seconds: float) -> dict[str, Any]:
    """Open loop: request i is due at i / rate; its latency runs from then to its answer."""
    idle: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    for _ in range(CLIENTS):
        idle.put_nowait(await asyncio.open_connection("127.0.0.1", port))
    lat: list[float] = []
    statuses: Counter[int] = Counter()

    async def one(due: float) -> None:
        reader, writer = await idle.get()
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        m = _LENGTH.search(head)
        await reader.readexactly(int(m.group(1)) if m else 0)
        lat.append(time.perf_counter() - due)
        statuses[int(head[9:12])] += 1
        idle.put_nowait((reader, writer))

    # Only the requests still in flight are kept: gathering every task of the run at its end
    # (thousands, nearly all done) held this loop for 10-30 ms while the last requests' answers
    # waited: the spike in the last 100 ms of every paced run.
    in_flight: set[asyncio.Task[None]] = set()
    failures: list[BaseException] = []

    def done(task: asyncio.Task[None]) -> None:
        in_flight.discard(task)
        error = None if task.cancelled() else task.exception()
        if error is not None:
            failures.append(error)

    total = int(rate * seconds)
    t0 = time.perf_counter()
    for i in range(total):
        due = t0 + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(one(due))
        in_flight.add(task)
        task.add_done_callback(done)
    await asyncio.gather(*in_flight)
    if failures:
        raise failures[0]
    while not idle.empty():
        idle.get_nowait()[1].close()
    lat.sort()
    return {
        "p50_ms": 1000 * lat[len(lat) // 2],
        "p99_ms": 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))],
        "statuses": dict(statuses),
    }


def _limit_files(nofile: tuple[int, int]) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, nofile)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ServeProcess:
    """`yoke serve --app bench.bench_server:app`; `env` adds to its environment (a PYTHONPATH
    there runs another tree's yoke), `nofile` is the (soft, hard) open-file limit it starts with."""

    def __init__(
        self,
        database_url: str,
        env: dict[str, str] | None = None,
        nofile: tuple[int, int] | None = None,
    ) -> None:
        self.port = _free_port()
        env = {**os.environ, "YOKE_EXECUTION_SHUTDOWN_TIMEOUT": "0", **(env or {})}
        env.pop("YOKE_TOKENS_FILE", None)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "yoke",
                "serve",
                "--app",
                "bench.bench_server:app",
                "--port",
                str(self.port),
                "--database-url",
                database_url,
                "--log-level",
                "warning",
            ],
            env=env,
            cwd=Path(__file__).resolve().parents[1],
            preexec_fn=None if nofile is None else lambda: _limit_files(nofile),
        )

    async def ready(self) -> None:
        for _ in range(300):
            try:
                r = await self.call(_request("GET", "/readyz"))
                if r[0] == 200:
                    return
            except OSError:
                pass
            await asyncio.sleep(0.05)  # waiting for a subprocess to listen
        raise SystemExit("yoke serve did not become ready")

    async def call(self, request: bytes) -> tuple[int, bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            m = _LENGTH.search(head)
            return int(head[9:12]), await reader.readexactly(int(m.group(1)) if m else 0)
        finally:
            writer.close()

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


async def in_process(database_url: str, scenario: str, n: int) -> float:
    """The ceiling: `app.executions.start` called by 64 tasks in this process, no HTTP."""
    local = yoke.App(database_url)
    local.workflow("noop")(noop)
    local.workflow("hold")(hold)
    async with local.running():
        ex = local.executions
        if scenario == "queued":
            await ex.set_limits(
                yoke.Limits(max_running=1), principal=yoke.Principal("bench", roles=["ADMIN"])
            )
            await ex.start("hold")

        async def worker(count: int) -> None:
            for _ in range(count):
                await ex.start("noop")

        t = time.perf_counter()
        await asyncio.gather(*(worker(n // CLIENTS) for _ in range(CLIENTS)))
        rate = (n // CLIENTS * CLIENTS) / (time.perf_counter() - t)
        await local.shutdown(0)
    return rate


async def one_run(urls: Callable[[], Awaitable[str]], n: int, rate: float) -> dict[str, Any]:
    bare = _request("GET", "/healthz")
    start = _request("POST", "/v1/starts", b'{"workflow":"noop","input":null}')
    out: dict[str, dict[str, Any]] = {}
    for scenario in ("granted", "queued"):
        server = ServeProcess(await urls())
        try:
            await server.ready()
            if scenario == "queued":
                await server.call(_request("PUT", "/v1/limits", b'{"max_running":1}'))
                await server.call(_request("POST", "/v1/starts", b'{"workflow":"hold"}'))
            await load(server.port, bare, n // 4)  # warm up both paths
            await load(server.port, start, n // 4)
            out[f"{scenario}_bare"] = await load(server.port, bare, n)
            out[scenario] = await load(server.port, start, n)
            out[f"{scenario}_paced"] = await paced(server.port, start, rate, seconds=n / 1000)
        finally:
            server.stop()
        out[f"{scenario}_local"] = {"rps": await in_process(await urls(), scenario, n)}
    return out


def _figure(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for scenario in ("granted", "queued"):
        base, mine, paced_ = f"{scenario}_bare", scenario, f"{scenario}_paced"
        out[scenario] = {
            "rps": _figure([r[mine]["rps"] for r in results]),
            "p50_ms": _figure([r[mine]["p50_ms"] for r in results]),
            "p99_ms": _figure([r[mine]["p99_ms"] for r in results]),
            "paced_p50_ms": _figure([r[paced_]["p50_ms"] for r in results]),
            "paced_p99_ms": _figure([r[paced_]["p99_ms"] for r in results]),
            "bare_rps": _figure([r[base]["rps"] for r in results]),
            "bare_p99_ms": _figure([r[base]["p99_ms"] for r in results]),
            "ratio": _figure([r[mine]["rps"] / r[base]["rps"] for r in results]),
            "in_process_rps": _figure([r[f"{scenario}_local"]["rps"] for r in results]),
            "ratio_to_in_process": _figure(
                [r[mine]["rps"] / r[f"{scenario}_local"]["rps"] for r in results]
            ),
            "statuses": [r[mine]["statuses"] for r in results],
            "paced_statuses": [r[paced_]["statuses"] for r in results],
        }
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small N, for a smoke run")
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--no-pg", action="store_true", help="SQLite only")
    ap.add_argument("--rate", type=float, default=500.0, help="starts/s of the paced run")
    args = ap.parse_args()
    n = 640 if args.quick else 2560
    runs = args.runs or (3 if args.quick else 5)
    backends = ("sqlite",) if args.no_pg else ("sqlite", "postgres")
    doc: dict[str, Any] = {
        "benchmark": "server",
        "quick": args.quick,
        "runs": runs,
        "requests_per_run": n,
        "clients": CLIENTS,
        "rate": args.rate,
        "machine": machine(),
        "python": platform.python_version(),
        "http": _stack(),
        "backends": {},
    }
    for backend in backends:
        async with fresh_databases(backend) as urls:
            results = [await one_run(urls, n, args.rate) for _ in range(runs)]
        doc["backends"][backend] = summarize(results)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    print(markdown(doc))


def _stack() -> str:
    """The HTTP parser and event loop uvicorn picks ("auto") in the server process."""
    import importlib.util

    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    return f"uvicorn {http} + {loop}"


def markdown(doc: dict[str, Any]) -> str:
    def f(m: dict[str, float], digits: int = 0) -> str:
        return f"{m['median']:,.{digits}f} ({m['min']:,.{digits}f}-{m['max']:,.{digits}f})"

    lines = [
        "## HTTP server: `POST /v1/starts` on uvicorn (`bench_server`)",
        "",
        f"{doc['http']}. Throughput: {doc['clients']} concurrent keep-alive clients on "
        f"loopback in a closed loop, {doc['requests_per_run']:,} requests per scenario and run, "
        f"{doc['runs']} runs, a fresh database per server. Bare: `GET /healthz` of the same "
        "server process (same uvicorn and middleware, no scheduler). In-process: the same "
        "starts by 64 tasks calling `app.executions.start`, no HTTP. Paced: "
        f"{doc['rate']:,.0f} starts/s sent at a fixed rate over the same connections, each "
        "timed from when it was due. Targets: ratio >= 0.5, p99 < 20 ms.",
        "",
        "| store | scenario | starts/s | ratio to bare | bare req/s | p50 / p99 ms saturated "
        f"| p50 / p99 ms at {doc['rate']:,.0f}/s | in-process starts/s | HTTP / in-process |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    names = {"granted": "granted (201)", "queued": "queued (202, behind a full slot)"}
    for backend, scenarios in doc["backends"].items():
        for name, s in scenarios.items():
            lines.append(
                f"| {backend} | {names[name]} | {f(s['rps'])} | {f(s['ratio'], 2)} | "
                f"{f(s['bare_rps'])} | {s['p50_ms']['median']:.1f} / "
                f"{s['p99_ms']['median']:.1f} | {s['paced_p50_ms']['median']:.1f} / "
                f"{f(s['paced_p99_ms'], 1)} | {f(s['in_process_rps'])} | "
                f"{f(s['ratio_to_in_process'], 2)} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    try:  # the loop the server runs on (uvicorn picks uvloop too), for the client and ceiling
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())
