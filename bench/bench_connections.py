"""Benchmark of the connection rules (head deadline, per-client cap, capacity under the open-file
limit): what they cost a request, and what they keep for another client under a slow-loris
flood, against yoke before them, in the same run.

    .venv/bin/python -m bench.bench_connections [--quick] [--runs N] [--baseline REV]

The baseline is the `src/` of git revision REV (default: the commit before the rules), unpacked
into a temporary directory and put first on its server's PYTHONPATH: the same app, virtual
environment, uvicorn and load generator. Each run starts a server of each tree in turn (which
goes first alternates), each over a fresh SQLite database, and measures:

- keep-alive: 64 clients in a closed loop, `GET /healthz` (the HTTP stack, where a cost per
  request shows most) and `POST /v1/starts` (a no-op workflow);
- a new connection per request: 64 clients, each request on a connection of its own
  (`GET /healthz`): what admitting and forgetting a connection costs;
- the flood: the server started at an open-file limit of 1,024 (soft and hard, so only the
  reserve can hold), 1,200 connections from six addresses trickling a head a byte a second and
  reopened when closed; from another address, 100 requests each on a new connection
  (`GET /readyz` and `POST /v1/starts` in turn, 5 s timeout each): how many were answered 2xx,
  and in how long.

Figures are medians of the runs (min-max); ratios are this tree over the baseline, per run.
Results go to bench/results/connections.json; a markdown section is printed. Traffic goes only to
127.0.0.0/8.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import platform
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.server.slowloris import SlowLoris

from bench.bench_server import _LENGTH, CLIENTS, RESULTS, ServeProcess, _request, load
from bench.common import Figure, machine

ROOT = Path(__file__).resolve().parents[1]
OUT = RESULTS.parent / "connections.json"
BASELINE = "ed2ee5c"  # the commit before the connection rules
ATTACKERS = [f"127.0.1.{n}" for n in range(1, 7)]
ANOTHER_CLIENT = "127.0.0.2"


@contextlib.contextmanager
def baseline_tree(rev: str) -> Iterator[Path]:
    """`src/` of `rev`, unpacked into a temporary directory."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", rev, "src"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tempfile.TemporaryDirectory(prefix="yoke-baseline-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        src = Path(tmp) / "src"
        found = subprocess.run(
            [sys.executable, "-c", "import yoke; print(yoke.__file__)"],
            env={"PYTHONPATH": str(src), "PATH": str(Path(sys.executable).parent)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert found.startswith(str(src)), f"the baseline's server would import {found}"
        yield src


async def fresh_connections(port: int, request: bytes, total: int) -> dict[str, Any]:
    """Like `load`, but every request opens a connection of its own and closes it."""
    statuses: Counter[int] = Counter()

    async def client(count: int) -> None:
        for _ in range(count):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            m = _LENGTH.search(head)
            await reader.readexactly(int(m.group(1)) if m else 0)
            statuses[int(head[9:12])] += 1
            writer.close()

    per = max(1, total // CLIENTS)
    t = time.perf_counter()
    await asyncio.gather(*(client(per) for _ in range(CLIENTS)))
    return {"rps": per * CLIENTS / (time.perf_counter() - t), "statuses": dict(statuses)}


async def flooded(port: int, requests: int) -> dict[str, Any]:
    with SlowLoris(port, 1200, ATTACKERS) as flood:
        await asyncio.to_thread(flood.wait_ticks, 3)  # all opened, two rounds trickled
        start = _request("POST", "/v1/starts", b'{"workflow":"noop","input":null}')
        ready = _request("GET", "/readyz")
        answered, latencies, failures = 0, [], Counter[str]()
        for n in range(requests):
            t = time.perf_counter()
            try:
                async with asyncio.timeout(5):
                    reader, writer = await asyncio.open_connection(
                        "127.0.0.1", port, local_addr=(ANOTHER_CLIENT, 0)
                    )
                    writer.write(start if n % 2 else ready)
                    head = await reader.readuntil(b"\r\n\r\n")
                    writer.close()
                status = int(head[9:12])
                answered += 200 <= status < 300
                if not 200 <= status < 300:
                    failures[str(status)] += 1
            except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
                failures[type(exc).__name__] += 1
            latencies.append(time.perf_counter() - t)
        latencies.sort()
        return {
            "answered": answered,
            "p50_ms": 1000 * latencies[len(latencies) // 2],
            "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
            "failures": dict(failures),
            "attacker_opened": flood.opened,
        }


class _Transport:
    """Just enough of a transport for the protocol: writes counted, never sent."""

    def __init__(self) -> None:
        self.writes = 0
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5555), "sockname": ("127.0.0.1", 8000)}.get(name)

    def write(self, data: bytes) -> None:
        self.writes += 1

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


async def protocol_cpu_us(n: int) -> float:
    """CPU per request of yoke's protocol class alone (whichever `yoke` this process
    imports): `n` requests fed to one kept-alive connection of a fake transport, answered by
    a two-line ASGI app. No socket and no other process: the steadiest figure of what the
    protocol costs."""
    from uvicorn.config import Config
    from uvicorn.server import ServerState

    from yoke.server.protocol import HeadLimits, bounded_protocol

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    config = Config(app, lifespan="off", access_log=False)
    config.load()
    cls = bounded_protocol(HeadLimits(max_line=16 << 10, max_head=64 << 10))
    protocol = cls(config=config, server_state=ServerState(), app_state={})
    transport = _Transport()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    request = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\naccept: */*\r\n\r\n"
    t = time.process_time()
    for _ in range(n):
        protocol.data_received(request)
        await asyncio.sleep(0)  # the app's task answers
        await asyncio.sleep(0)
    spent = time.process_time() - t
    assert transport.writes >= n, transport.writes
    return 1e6 * spent / n


def protocol_in(env: dict[str, str], n: int) -> float:
    """`protocol_cpu_us` in a fresh process that imports the tree of `env`."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_connections", "--protocol-only", str(n)],
        env={**os.environ, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout)


def cpu_seconds(pid: int) -> float:
    """CPU time the process's threads have run, in ns from the scheduler (/proc's tick
    counts are 10 ms coarse: too coarse for a measure of a second)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that just ended
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


MEASURES = ("healthz", "starts", "fresh")


async def one(server: ServeProcess, measure: str, n: int) -> dict[str, Any]:
    bare = _request("GET", "/healthz")
    start = _request("POST", "/v1/starts", b'{"workflow":"noop","input":null}')
    cpu = cpu_seconds(server.process.pid)
    if measure == "healthz":
        out = await load(server.port, bare, n)
    elif measure == "starts":
        out = await load(server.port, start, n)
    else:
        out = await fresh_connections(server.port, bare, n)
    per = max(1, n // CLIENTS) * CLIENTS
    out["cpu_us"] = 1e6 * (cpu_seconds(server.process.pid) - cpu) / per
    return out


async def paired(trees: dict[str, dict[str, str]], tmp: Path, n: int, rounds: int) -> list[Any]:
    """Both servers up at once; each round measures each in turn (which goes first
    alternates), so both see the same moments of this shared machine."""
    servers = {
        name: ServeProcess(f"sqlite:///{tempfile.mkdtemp(dir=tmp)}/b.db", env=env)
        for name, env in trees.items()
    }
    try:
        for server in servers.values():
            await server.ready()
            for measure in MEASURES:
                await one(server, measure, n // 4)  # warm up
        results = []
        for r in range(rounds):
            order = list(servers) if r % 2 == 0 else list(reversed(servers))
            results.append(
                {
                    measure: {name: await one(servers[name], measure, n) for name in order}
                    for measure in MEASURES
                }
            )
        return results
    finally:
        for server in servers.values():
            server.stop()


async def flood_once(env: dict[str, str], tmp: Path, requests: int) -> dict[str, Any]:
    server = ServeProcess(
        f"sqlite:///{tempfile.mkdtemp(dir=tmp)}/f.db", env=env, nofile=(1024, 1024)
    )
    try:
        await server.ready()
        return await flooded(server.port, requests)
    finally:
        server.stop()


def _fig(values: list[float]) -> dict[str, float]:
    f = Figure.of(values)
    return {"median": f.median, "min": f.low, "max": f.high}


def summarize(rounds: list[dict[str, Any]], floods: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in MEASURES:
        row: dict[str, Any] = {}
        for tree in ("this", "baseline"):
            row[f"{tree}_rps"] = _fig([r[m][tree]["rps"] for r in rounds])
            row[f"{tree}_cpu_us"] = _fig([r[m][tree]["cpu_us"] for r in rounds])
        row["rps_ratio"] = _fig([r[m]["this"]["rps"] / r[m]["baseline"]["rps"] for r in rounds])
        row["cpu_ratio"] = _fig(
            [r[m]["baseline"]["cpu_us"] / r[m]["this"]["cpu_us"] for r in rounds]
        )
        out[m] = row
    for tree in ("this", "baseline"):
        out[f"flood_{tree}"] = {
            "answered": _fig([f[tree]["answered"] for f in floods]),
            "p50_ms": _fig([f[tree]["p50_ms"] for f in floods]),
            "p99_ms": _fig([f[tree]["p99_ms"] for f in floods]),
            "failures": [f[tree]["failures"] for f in floods],
        }
    return out


def markdown(doc: dict[str, Any]) -> str:
    s = doc["summary"]

    def f(m: dict[str, float], digits: int = 0) -> str:
        return f"{m['median']:,.{digits}f} ({m['min']:,.{digits}f}-{m['max']:,.{digits}f})"

    names = {
        "healthz": "`GET /healthz`, keep-alive",
        "starts": "`POST /v1/starts`, keep-alive",
        "fresh": "`GET /healthz`, a new connection each",
    }
    lines = [
        "## Connections: the rules' cost, and another client under a slow-loris flood "
        "(`bench_connections`)",
        "",
        f"A `yoke serve` of this tree and one of the baseline (`src/` of `{doc['baseline']}`, "
        "the commit before the rules, on the same virtual environment and uvicorn), both up at "
        f"once over fresh SQLite databases; {doc['rounds']} rounds, each measuring each server "
        f"in turn (which goes first alternates): {doc['clients']} clients on loopback in a "
        f"closed loop, {doc['requests']:,} requests per measure. Server CPU: the server "
        "process's CPU time per request over the measure (steadier than requests/s on this "
        "shared machine; its ratio is the baseline's over this tree's, so above 1 is faster). "
        "Flood, "
        f"{doc['floods']} times per tree: the server at an open-file limit of 1,024 (soft and "
        "hard), 1,200 connections from six addresses sending a head a byte a second (reopened "
        f"when closed); another address sends {doc['flood_requests']} requests, each on a new "
        "connection (5 s timeout). Medians (min-max); ratios per round. Target: >= 0.95.",
        "",
        "| measure | req/s this tree | req/s baseline | ratio | server CPU us/req this tree "
        "| baseline | ratio |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for m, name in names.items():
        row = s[m]
        lines.append(
            f"| {name} | {f(row['this_rps'])} | {f(row['baseline_rps'])} | "
            f"{f(row['rps_ratio'], 2)} | {f(row['this_cpu_us'], 1)} | "
            f"{f(row['baseline_cpu_us'], 1)} | {f(row['cpu_ratio'], 2)} |"
        )
    p = s["protocol"]
    lines.append(
        "| the protocol alone (a fake transport, in process: no socket, no scheduler) | | | | "
        f"{f(p['this_us'], 2)} | {f(p['baseline_us'], 2)} | {f(p['ratio'], 2)} |"
    )
    this, base = s["flood_this"], s["flood_baseline"]
    lines += [
        "",
        "| under the flood | this tree | baseline |",
        "| --- | --- | --- |",
        f"| another client's requests answered 2xx, of {doc['flood_requests']} | "
        f"{f(this['answered'])} | {f(base['answered'])} |",
        f"| their p50 / p99 ms | {this['p50_ms']['median']:.1f} / {f(this['p99_ms'], 1)} | "
        f"{base['p50_ms']['median']:.1f} / {f(base['p99_ms'], 1)} |",
    ]
    failures: Counter[str] = Counter()
    for run in base["failures"]:
        failures.update(run)
    if failures:
        seen = ", ".join(f"{k} {v}" for k, v in failures.most_common())
        lines += ["", f"The baseline's failed requests under the flood, all runs: {seen}."]
    return "\n".join(lines)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small N, for a smoke run")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--baseline", default=BASELINE, help="git revision to compare with")
    ap.add_argument("--protocol-only", type=int, metavar="N", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.protocol_only:
        print(await protocol_cpu_us(args.protocol_only))
        return
    n = 1280 if args.quick else 5120
    rounds = args.rounds or (2 if args.quick else 15)
    floods = 1 if args.quick else 3
    flood_requests = 20 if args.quick else 100
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the flood's 1,200 sockets
    with baseline_tree(args.baseline) as old, tempfile.TemporaryDirectory() as tmp:
        trees = {"this": {}, "baseline": {"PYTHONPATH": str(old)}}
        protocol = []
        for r in range(rounds):
            order = list(trees) if r % 2 == 0 else list(reversed(trees))
            protocol.append({name: protocol_in(trees[name], 4 * n) for name in order})
        results = await paired(trees, Path(tmp), n, rounds)
        flood_results = []
        for run in range(floods):
            order = list(trees) if run % 2 == 0 else list(reversed(trees))
            flood_results.append(
                {name: await flood_once(trees[name], Path(tmp), flood_requests) for name in order}
            )
    doc = {
        "benchmark": "connections",
        "quick": args.quick,
        "rounds": rounds,
        "requests": n,
        "clients": CLIENTS,
        "floods": floods,
        "flood_requests": flood_requests,
        "baseline": args.baseline,
        "machine": machine(),
        "python": platform.python_version(),
        "rounds_raw": results,
        "floods_raw": flood_results,
        "protocol_raw": protocol,
    }
    doc["summary"] = summarize(results, flood_results)
    doc["summary"]["protocol"] = {
        "this_us": _fig([p["this"] for p in protocol]),
        "baseline_us": _fig([p["baseline"] for p in protocol]),
        "ratio": _fig([p["baseline"] / p["this"] for p in protocol]),
    }
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=2) + "\n")
    print(markdown(doc))


if __name__ == "__main__":
    try:  # the loop the server runs on (uvicorn picks uvloop too), for the client as well
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())
