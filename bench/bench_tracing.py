"""What tracing costs a start: the same in-process starts of a no-op workflow on SQLite, by
yoke at a base commit (`--base`, default `main`: before the tracing seam), by this tree with
tracing off (the default), and by this tree with tracing on (OpenTelemetry's SDK, every span
sampled, batched to an exporter that drops them: the cost of making the spans, not of sending
them).

`python -m bench.bench_tracing [--quick] [--base REF]`

Each run is a fresh process (`--child`), the three kinds interleaved run by run so that the
load of a shared machine falls on each alike; the base runs from a detached git worktree of
`REF` put on `PYTHONPATH` (the same interpreter and packages). A run's figures are the wall
time and the CPU time per start: CLIENTS callers in a closed loop, until every start was
answered and every execution's end recorded. Prints a markdown section; the raw figures go
to bench/results/tracing.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.common import Figure

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "tracing.json"
CLIENTS = 32
KINDS = ("base", "off", "on")


# -- one run, in a fresh process --------------------------------------------------------------
async def _starts(kind: str, url: str, n: int) -> tuple[float, float]:
    """Seconds per start: wall time, and the process's CPU time (every thread: the SQLite
    store's too), which the other loads of a shared machine disturb less."""
    import yoke

    tracing: Any = None
    if kind == "on":
        from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        from yoke.otel import OtelTracing

        class Drop(SpanExporter):
            def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Drop()))
        tracing = OtelTracing(provider)
    app = yoke.App(url) if tracing is None else yoke.App(url, tracing=tracing)

    @app.workflow("noop")
    async def noop(ctx: yoke.Context, input: Any) -> Any:
        return None

    async with app.running():
        ex = app.executions

        async def caller(count: int) -> None:
            for _ in range(count):
                await ex.start("noop")

        await asyncio.gather(*(caller(10) for _ in range(CLIENTS)))  # warm: imports, caches
        per = n // CLIENTS
        t0, c0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(caller(per) for _ in range(CLIENTS)))
        await app.shutdown(60)  # returns once every execution has finished
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    return elapsed / (per * CLIENTS), cpu / (per * CLIENTS)


def child(kind: str, n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        seconds, cpu = asyncio.run(_starts(kind, f"sqlite:///{tmp}/yoke.db", n))
    print(json.dumps({"kind": kind, "seconds": seconds, "cpu": cpu}))


# -- the runs ---------------------------------------------------------------------------------
@contextlib.contextmanager
def base_tree(ref: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp) / "base"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(where), ref],
            check=True,
        )
        try:
            yield where
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)], check=True
            )


def one_run(kind: str, n: int, base: Path) -> tuple[float, float]:
    env = dict(os.environ)
    if kind == "base":  # its yoke first on the path; bench.* still this tree's
        env["PYTHONPATH"] = os.pathsep.join([str(base / "src"), str(ROOT)])
    argv = [sys.executable, "-m", "bench.bench_tracing", "--child", kind, "-n", str(n)]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"a {kind} run failed")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return float(found["seconds"]), float(found["cpu"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--base", help="a git ref (default: where this branch left main)")
    parser.add_argument("--child")
    parser.add_argument("-n", type=int, default=4000)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.n)
        return
    runs, n = (3, 1000) if args.quick else (7, args.n)
    seconds: dict[str, list[float]] = {k: [] for k in KINDS}
    cpu: dict[str, list[float]] = {k: [] for k in KINDS}
    ref = args.base or _git("merge-base", "HEAD", "main")
    with base_tree(ref) as base:
        commit = _git("rev-parse", "--short", ref)
        for i in range(runs):
            for kind in KINDS[i % 3 :] + KINDS[: i % 3]:  # each kind first in turn
                wall, used = one_run(kind, n, base)
                seconds[kind].append(wall)
                cpu[kind].append(used)
                print(f"run {i + 1}/{runs} {kind}: {wall * 1e6:.0f} us", file=sys.stderr)
    RESULTS.parent.mkdir(exist_ok=True)
    seam = seam_cost()
    raw = {"base": commit, "n": n, "seconds": seconds, "cpu": cpu, "seam_seconds": seam}
    RESULTS.write_text(json.dumps(raw, indent=1) + "\n")
    print(
        markdown(
            seconds,
            cpu,
            base=args.base or f"{commit} (where this branch left main)",
            n=n,
            runs=runs,
            seam=seam,
        )
    )


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def seam_cost(rounds: int = 200_000) -> float:
    """Seconds per start of what the seam adds with tracing off, timed alone (too little to
    show through the noise of whole starts): the tracer asked once, then the five checks of
    the ticket's trace and the body's null context."""
    from yoke.executions import traces
    from yoke.executions.tickets import Phase, Ticket
    from yoke.store import NewStart, StartKind
    from yoke.tracing import NO_TRACING

    new = NewStart(
        start_id="s",
        kind=StartKind.START,
        workflow="w",
        session="s",
        tenant="t",
        priority=0,
        input="null",
        fingerprint="",
        idempotency_key=None,
        principal=None,
        source_execution_id=None,
        from_step=None,
        instance_id="i",
        created_at=0.0,
    )
    t = Ticket(new.logged(seq=1), None, Phase.LOGGING)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(rounds):
            t.trace = traces.begin(NO_TRACING, new)
            if t.trace is not None:  # _answered, for the first answer
                pass
            if t.trace is not None:  # _answered, for the grant
                pass
            with traces.running(t):
                pass
            if t.trace is not None:  # _finish: ran
                pass
            if t.trace is not None:  # _finish: ended
                pass
        best = min(best, (time.perf_counter() - t0) / rounds)
    return best


def markdown(
    seconds: dict[str, list[float]],
    cpu: dict[str, list[float]],
    *,
    base: str,
    n: int,
    runs: int,
    seam: float,
) -> str:
    label = {
        "base": f"yoke at {base}, no tracing seam",
        "off": "this tree, tracing off (the default)",
        "on": "this tree, tracing on (SDK, all sampled, exporter drops)",
    }

    def cells(values: dict[str, list[float]], k: str) -> str:
        us = Figure.of([v * 1e6 for v in values[k]]).fmt(" us", 1)
        if k == "base":
            return f"{us} | 1"
        ratios = [a / b for a, b in zip(values[k], values["base"], strict=True)]
        return f"{us} | {Figure.of(ratios).fmt('', 3)}"

    rows = [f"| {label[k]} | {cells(seconds, k)} | {cells(cpu, k)} |" for k in KINDS]
    return (
        "## Tracing: what a start costs with it off and on\n\n"
        f"{n} in-process starts of a no-op workflow on SQLite, {CLIENTS} callers; wall time and "
        f"CPU time (the process's, all threads) per start, median (min-max) of {runs} runs "
        "interleaved, and the ratio to the base run by run.\n\n"
        "| yoke | wall per start | to base | CPU per start | to base |\n"
        "| --- | --- | --- | --- | --- |\n" + "\n".join(rows) + "\n"
        f"\nWhat the seam adds to a start with tracing off, timed alone (best of 5): "
        f"{seam * 1e9:.0f} ns.\n"
    )


if __name__ == "__main__":
    main()
