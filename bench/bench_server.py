"""Benchmark of the HTTP server: `POST /v1/starts` through a real uvicorn on loopback, against a
bare endpoint (`GET /healthz`: same process, same uvicorn, same middleware, no scheduler) served
in the same run, so the ratio shows what admission costs over the HTTP stack itself.

    .venv/bin/python -m bench.bench_server [--quick] [--runs N] [--database-url URL]

Scenarios, each with 64 concurrent keep-alive clients: `granted` (no limits: every start is a
201 and its execution runs and ends), and `queued` (one slot, held: every start is a 202 and
waits). The load comes from a lean asyncio HTTP/1.1 client in this process, so the client costs
little beside the server (both share this machine's cores). Each figure is the median of
several runs (min-max). Results go to bench/results/server.json; a markdown section is printed.
Traffic goes only to 127.0.0.1.
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
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yoke
from bench.common import machine

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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ServeProcess:
    def __init__(self, database_url: str) -> None:
        self.port = _free_port()
        env = {**os.environ, "YOKE_EXECUTION_SHUTDOWN_TIMEOUT": "0"}
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


async def one_run(database_url: str, n: int) -> dict[str, dict[str, Any]]:
    bare = _request("GET", "/healthz")
    start = _request("POST", "/v1/starts", b'{"workflow":"noop","input":null}')
    out: dict[str, dict[str, Any]] = {}
    for scenario in ("granted", "queued"):
        server = ServeProcess(database_url.format(scenario=scenario, t=time.time_ns()))
        try:
            await server.ready()
            if scenario == "queued":
                await server.call(_request("PUT", "/v1/limits", b'{"max_running":1}'))
                await server.call(_request("POST", "/v1/starts", b'{"workflow":"hold"}'))
            await load(server.port, bare, n // 4)  # warm up both paths
            await load(server.port, start, n // 4)
            out[f"{scenario}_bare"] = await load(server.port, bare, n)
            out[scenario] = await load(server.port, start, n)
        finally:
            server.stop()
        url = database_url.format(scenario=f"local-{scenario}", t=time.time_ns())
        out[f"{scenario}_local"] = {"rps": await in_process(url, scenario, n)}
    return out


def _figure(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small N, for a smoke run")
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument(
        "--database-url",
        default=None,
        help="default: a fresh SQLite file per server in a temporary directory",
    )
    args = ap.parse_args()
    n = 640 if args.quick else 2560
    runs = args.runs or (3 if args.quick else 5)
    with tempfile.TemporaryDirectory() as tmp:
        url = args.database_url or f"sqlite:///{tmp}/{{scenario}}-{{t}}.db"
        results = [await one_run(url, n) for _ in range(runs)]
    doc: dict[str, Any] = {
        "benchmark": "server",
        "quick": args.quick,
        "runs": runs,
        "requests_per_run": n,
        "clients": CLIENTS,
        "machine": machine(),
        "python": platform.python_version(),
        "backend": "postgres" if args.database_url else "sqlite",
        "scenarios": {},
    }
    for scenario in ("granted", "queued"):
        base, mine = f"{scenario}_bare", scenario
        doc["scenarios"][scenario] = {
            "rps": _figure([r[mine]["rps"] for r in results]),
            "p50_ms": _figure([r[mine]["p50_ms"] for r in results]),
            "p99_ms": _figure([r[mine]["p99_ms"] for r in results]),
            "bare_rps": _figure([r[base]["rps"] for r in results]),
            "bare_p99_ms": _figure([r[base]["p99_ms"] for r in results]),
            "ratio": _figure([r[mine]["rps"] / r[base]["rps"] for r in results]),
            "in_process_rps": _figure([r[f"{scenario}_local"]["rps"] for r in results]),
            "ratio_to_in_process": _figure(
                [r[mine]["rps"] / r[f"{scenario}_local"]["rps"] for r in results]
            ),
            "statuses": [r[mine]["statuses"] for r in results],
        }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    print(markdown(doc))


def markdown(doc: dict[str, Any]) -> str:
    def f(m: dict[str, float], digits: int = 0) -> str:
        return f"{m['median']:,.{digits}f} ({m['min']:,.{digits}f}-{m['max']:,.{digits}f})"

    lines = [
        "## HTTP server: `POST /v1/starts` on uvicorn (`bench_server`)",
        "",
        f"{doc['clients']} concurrent keep-alive clients on loopback, {doc['requests_per_run']:,} "
        f"requests per scenario and run, {doc['runs']} runs, {doc['backend']} store. The bare "
        "endpoint is `GET /healthz` of the same server process (same uvicorn and middleware, no "
        "scheduler). In-process: the same starts by 64 tasks calling `app.executions.start` "
        "with no HTTP, the ceiling the store allows. Targets: ratio >= 0.5, p99 < 20 ms.",
        "",
        "| scenario | starts/s | p50 ms | p99 ms | bare req/s | ratio to bare "
        "| in-process starts/s | HTTP / in-process |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    names = {"granted": "granted (201, no limits)", "queued": "queued (202, behind a full slot)"}
    for name, s in doc["scenarios"].items():
        lines.append(
            f"| {names[name]} | {f(s['rps'])} | {f(s['p50_ms'], 1)} | "
            f"{f(s['p99_ms'], 1)} | {f(s['bare_rps'])} | {f(s['ratio'], 2)} | "
            f"{f(s['in_process_rps'])} | {f(s['ratio_to_in_process'], 2)} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    asyncio.run(main())
