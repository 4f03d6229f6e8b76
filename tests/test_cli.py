"""The `yoke` command: `yoke demo` ends by itself and prints its summary; `yoke version`."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

import yoke
from yoke.cli import app


def test_version() -> None:
    result = CliRunner().invoke(app, ["version"])
    assert result.exit_code == 0
    assert result.output.strip() == yoke.__version__


def test_demo_runs_and_shows_the_fair_scheduler_protecting_light_tenants() -> None:
    # A real process, as a newcomer runs it (short, so the suite stays fast).
    done = subprocess.run(
        [sys.executable, "-m", "yoke", "demo", "--seconds", "3"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Summary" in done.stdout
    rows = [line for line in done.stdout.splitlines() if "create_" in line]
    assert any("fair" in row for row in rows) and any("FIFO" in row for row in rows)


def test_demo_refuses_a_run_longer_than_twenty_seconds() -> None:
    result = CliRunner().invoke(app, ["demo", "--seconds", "60"])
    assert result.exit_code != 0


async def test_demo_outcome_light_tenants_wait_far_less_under_the_fair_scheduler() -> None:
    import io

    from rich.console import Console

    from yoke.demo import run_demo

    fair, fifo = await run_demo(3, console=Console(file=io.StringIO()), seed=3)
    assert fair.light_p99 is not None and fifo.light_p99 is not None
    assert fair.scheduler.startswith("fair") and fifo.scheduler.startswith("FIFO")
    # Under the flood the FIFO queue only grows; the fair lanes serve a light task at the next
    # free slot. The gap is large (tens of times); 3x leaves room for a slow, shared machine.
    assert fair.light_p99 * 3 < fifo.light_p99
