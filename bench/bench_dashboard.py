"""The dashboard at scale: how long the Admission and Fairness views take with many sessions
queued, against the full-table read a naive view would make.

Sessions: 10,000 and 100,000, each with one queued start (made through `app.executions.start`
with `max_running=0`, on SQLite, in process). Each view is answered through the server's ASGI
app (`/v1/queue`, `/v1/fairness` and their HTML fragments), at a new state version each time so
that no cached render is reused; the heap is frozen after setup, as `yoke serve` does. Baseline
in the same run: `Kernel.stats()` (one frozen record per session, what a view listing every
session would start from). Medians of 5 runs (min-max); figures also to
`bench/results/dashboard.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

import yoke
from bench.common import Figure
from yoke.executions import Limits
from yoke.server import Server

PATHS = ("/v1/queue", "/v1/fairness", "/ui/f/queue", "/ui/f/fairness")


async def measure(sessions: int, runs: int) -> dict[str, Figure]:
    with tempfile.TemporaryDirectory() as folder:
        app = yoke.App(f"sqlite:///{folder}/bench.db", limits=Limits(max_running=0))

        @app.workflow()
        async def echo(ctx: yoke.Context, input: Any) -> Any:
            return input

        server = Server(app, tokens=None)
        async with server.lifespan():
            step = 10_000
            for lo in range(0, sessions, step):
                await asyncio.gather(
                    *(
                        app.executions.start("echo", i, session=f"s{i}")
                        for i in range(lo, min(sessions, lo + step))
                    )
                )
            gc.collect()
            gc.freeze()
            out: dict[str, list[float]] = {"baseline Kernel.stats()": []}
            transport = httpx.ASGITransport(app=server)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
                for _ in range(runs):
                    t0 = time.perf_counter()
                    app.executions.kernel.stats()
                    out["baseline Kernel.stats()"].append(time.perf_counter() - t0)
                    for path in PATHS:
                        server.dashboard.hub.bump()
                        t0 = time.perf_counter()
                        r = await c.get(path)
                        out.setdefault(path, []).append(time.perf_counter() - t0)
                        assert r.status_code == 200, r.text
            gc.unfreeze()
        return {k: Figure.of(v) for k, v in out.items()}


def render(results: dict[int, dict[str, Figure]], runs: int) -> str:
    lines = [
        "## The dashboard with many sessions queued",
        "",
        f"Medians of {runs} runs (min-max), ms; each view at a new state version (no cached "
        "render). Ratio: the view's time over `Kernel.stats()` (one record per session) in the "
        "same run.",
        "",
        "| sessions queued | view | ms | x `Kernel.stats()` |",
        "|---|---|---|---|",
    ]
    for sessions, figs in results.items():
        base = figs["baseline Kernel.stats()"].median
        lines.append(
            f"| {sessions:,} | baseline `Kernel.stats()` | "
            f"{_ms(figs['baseline Kernel.stats()'])} | 1.00 |"
        )
        for path in PATHS:
            f = figs[path]
            lines.append(f"| {sessions:,} | `{path}` | {_ms(f)} | {f.median / base:.2f} |")
    return "\n".join(lines)


def _ms(f: Figure) -> str:
    return f"{f.median * 1000:,.1f} ({f.low * 1000:,.1f}-{f.high * 1000:,.1f})"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    runs = 3 if args.quick else 5
    sizes = (10_000,) if args.quick else (10_000, 100_000)
    results = {n: asyncio.run(measure(n, runs)) for n in sizes}
    print(render(results, runs))
    out = Path(__file__).parent / "results" / "dashboard.json"
    out.parent.mkdir(exist_ok=True)
    raw = {
        str(n): {k: [f.median, f.low, f.high] for k, f in figs.items()}
        for n, figs in results.items()
    }
    out.write_text(json.dumps(raw, indent=2))
    return raw


if __name__ == "__main__":
    main()
