"""The `yoke` command: `yoke demo` ends by itself and prints its summary; `yoke version`; the
client verbs against a real `yoke serve` of the example shop; `yoke db upgrade`."""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import yoke
from tests.server.e2e import yoke_serve
from yoke.cli import app


def test_version() -> None:
    result = CliRunner().invoke(app, ["version"])
    assert result.exit_code == 0
    assert result.output.strip() == yoke.__version__


def test_demo_runs_and_shows_the_fair_scheduler_protecting_light_tenants() -> None:
    # A real process, as a newcomer runs it (short, so the suite stays fast).
    done = subprocess.run(
        [sys.executable, "-m", "yoke", "demo", "--fair", "--seconds", "3"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Summary" in done.stdout
    rows = [line for line in done.stdout.splitlines() if "create_" in line]
    assert any("fair" in row for row in rows) and any("FIFO" in row for row in rows)


def test_demo_serves_the_durable_scheduler_and_ends_with_a_summary() -> None:
    # README's first Quick start runs `yoke demo`: a real server, real HTTP starts, its
    # dashboard's URL, then a summary; it ends by itself.
    done = subprocess.run(
        [sys.executable, "-m", "yoke", "demo", "--seconds", "4", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "dashboard: http://127.0.0.1:" in done.stdout
    for line in ("Summary", "light tenants' wait p50 / p99", "flood's share", "Jain's index"):
        assert line in done.stdout


async def test_durable_demo_light_tenants_wait_less_than_the_flood(tmp_path: Path) -> None:
    import io

    from rich.console import Console

    from yoke.server.demo import run

    s = await run(4, port=0, console=Console(file=io.StringIO()), directory=tmp_path)
    assert s.light_p50 is not None and s.flood_p50 is not None
    assert s.light_p50 < s.flood_p50
    assert s.flood_share is not None and s.flood_share > 0.5
    assert s.starts_per_second > 0 and s.jain is not None


async def test_the_demo_says_so_when_its_port_is_taken(tmp_path: Path) -> None:
    import io
    import socket

    from rich.console import Console

    from yoke.server.demo import run

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = io.StringIO()
        await run(0.5, port=port, console=Console(file=out, width=200), directory=tmp_path)
    text = out.getvalue()
    moved = re.search(rf"port {port} on 127\.0\.0\.1 is taken: serving on port (\d+) instead", text)
    assert moved is not None, text
    assert f"dashboard: http://127.0.0.1:{moved.group(1)}/ui/" in text


def test_demo_refuses_a_run_longer_than_twenty_seconds() -> None:
    result = CliRunner().invoke(app, ["demo", "--seconds", "60"])
    assert result.exit_code != 0


async def test_demo_outcome_light_tenants_wait_far_less_under_the_fair_scheduler() -> None:
    import io

    from rich.console import Console

    from yoke.demo import run_demo

    fair, fifo = await run_demo(3, console=Console(file=io.StringIO()), seed=3)
    assert fair.light_p50 is not None and fifo.light_p50 is not None
    assert fair.scheduler.startswith("fair") and fifo.scheduler.startswith("FIFO")
    # Under the flood the FIFO queue only grows; the fair lanes serve a light task at the next
    # free slot. The gap is large (tens of times); 3x leaves room for a slow, shared machine.
    # Medians: one stall of this process (a GC pass, a busy neighbour in CI) is the p99 of a
    # few dozen light tasks, and would decide the test.
    assert fair.light_p50 * 3 < fifo.light_p50


# -- serve, the client verbs and db upgrade ----------------------------------------------------
@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("cli")
    with yoke_serve(f"sqlite:///{tmp}/cli.db", tmp, app="examples.shop:app") as srv:
        yield srv.url


def _yoke(url: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, [*args, "--url", url])
    return result.exit_code, result.output


def test_start_show_list_cancel_resume_restart(server_url: str) -> None:
    code, out = _yoke(
        server_url,
        "start",
        "checkout",
        "--input",
        '{"order": 7, "items": ["tea"], "total": 3}',
        "--wait",
        "5",
        "--json",
    )
    assert code == 0, out
    start = json.loads(out)
    assert start["status"] == "GRANTED"
    code, out = _yoke(
        server_url,
        "start",
        "restock",
        "--input",
        '{"seconds": 30}',
        "--session",
        "shop/a",
        "--priority",
        "2",
        "--idempotency-key",
        "k-1",
    )
    assert code == 0 and "GRANTED" in out and "shop/a" in out
    code, out = _yoke(server_url, "executions", "list", "--json", "--workflow", "restock")
    (restock,) = json.loads(out)["items"]
    eid = restock["execution_id"]
    code, out = _yoke(server_url, "executions", "show", eid)
    assert code == 0 and "RUNNING" in out and "restock" in out
    code, out = _yoke(server_url, "executions", "cancel", eid, "--json")
    assert code == 0 and json.loads(out)["status"] == "CANCELLED"
    code, out = _yoke(server_url, "executions", "resume", eid, "--json")
    assert code == 0 and json.loads(out)["kind"] == "resume"
    code, out = _yoke(
        server_url,
        "executions",
        "restart",
        start["execution_id"],
        "--from-step",
        "charge",
        "--json",
    )
    assert code == 0 and json.loads(out)["kind"] == "restart"
    code, out = _yoke(server_url, "executions", "list")
    assert code == 0 and start["execution_id"] in out and "execution_id" in out


def test_a_failed_execution_shows_its_error_and_traceback(server_url: str) -> None:
    code, out = _yoke(
        server_url, "start", "checkout", "--input", '{"order": 8, "total": -1}', "--json"
    )
    assert code == 0, out
    eid = json.loads(out)["execution_id"]
    for _ in range(200):
        code, out = _yoke(server_url, "executions", "show", eid, "--json")
        if json.loads(out)["status"] != "RUNNING":
            break
    error = json.loads(out)["error"]
    assert (error["type"], error["step"], error["attempt"]) == ("ValueError", "charge", 1)
    code, out = _yoke(server_url, "executions", "show", eid)
    words = " ".join(out.split())  # the table wraps long cells in a narrow console
    assert code == 0 and "FAILED" in words
    assert "ValueError: a negative total cannot be charged (step 'charge', attempt 1)" in words
    assert "traceback:" in out and 'raise ValueError("a negative total cannot be charged")' in out
    code, out = _yoke(server_url, "executions", "list", "--status", "failed", "--json")
    assert code == 0 and [e["execution_id"] for e in json.loads(out)["items"]] == [eid]


def test_limits_and_audit(server_url: str) -> None:
    code, out = _yoke(
        server_url,
        "limits",
        "set",
        "--max-running",
        "5",
        "--max-running-per-workflow",
        '{"restock": 2}',
        "--json",
    )
    assert code == 0, out
    assert json.loads(out)["max_running_per_workflow"] == {"restock": 2}
    code, out = _yoke(server_url, "limits", "show")
    assert code == 0 and "max_running" in out and "5" in out
    code, out = _yoke(server_url, "audit", "--json")
    assert code == 0 and json.loads(out)["items"][-1]["after"]["max_running"] == 5
    code, out = _yoke(server_url, "audit")
    assert code == 0 and "limits" in out
    # back to no limits for the other tests
    _yoke(
        server_url, "limits", "set", "--clear", "max_running", "--clear", "max_running_per_workflow"
    )


def test_limits_set_changes_only_the_limits_given(server_url: str) -> None:
    code, out = _yoke(server_url, "limits", "set", "--max-running", "3", "--json")
    assert code == 0 and json.loads(out)["max_running"] == 3, out
    code, out = _yoke(server_url, "limits", "set", "--max-queued", "5", "--json")
    assert code == 0, out
    limits = json.loads(out)
    assert limits["max_running"] == 3 and limits["max_queued"] == 5
    code, out = _yoke(server_url, "limits", "set", "--clear", "max_running", "--json")
    limits = json.loads(out)
    assert limits["max_running"] is None and limits["max_queued"] == 5
    code, out = _yoke(server_url, "limits", "set", "--clear", "max_speed")
    assert code == 2 and "--clear takes one of" in out
    code, out = _yoke(server_url, "limits", "set", "--max-queued", "1", "--clear", "max_queued")
    assert code == 2 and "both set and cleared" in out
    code, out = _yoke(server_url, "limits", "set", "--clear", "max_queued", "--json")
    assert json.loads(out)["max_queued"] is None


def test_tenants_set_list_and_clear(server_url: str) -> None:
    code, out = _yoke(
        server_url, "tenants", "set", "globex", "weight=2", "executions.max_running=5",
        "actors.append_rate=50.5", "--json",
    )  # fmt: skip
    assert code == 0, out
    row = json.loads(out)
    assert (row["weight"], row["executions"]["max_running"]) == (2.0, 5)
    assert row["actors"]["append_rate"] == 50.5
    code, out = _yoke(server_url, "tenants", "set", "*", "executions.max_queued=100", "--json")
    assert code == 0 and json.loads(out)["tenant"] == "*", out
    code, out = _yoke(server_url, "tenants", "list", "--json")
    listed = {t["tenant"]: t for t in json.loads(out)["items"]}
    assert listed["globex"]["effective"]["executions"]["max_queued"] == 100  # from `*`
    code, out = _yoke(server_url, "tenants", "list")
    assert code == 0 and "globex" in out and "2.0" in out  # a table (cells may wrap)
    code, out = _yoke(server_url, "tenants", "clear", "globex", "executions.max_running", "--json")
    assert json.loads(out)["executions"]["max_running"] is None and json.loads(out)["weight"] == 2
    code, out = _yoke(server_url, "tenants", "clear", "globex", "--json")
    assert json.loads(out)["weight"] is None and json.loads(out)["actors"]["append_rate"] is None
    code, out = _yoke(server_url, "tenants", "set", "globex", "speed=3")
    assert code == 2 and "FIELD=VALUE" in out
    code, out = _yoke(server_url, "tenants", "set", "globex", "executions.rate=-1")
    assert code == 1 and "422" in out
    _yoke(server_url, "tenants", "clear", "*")


def test_tables_show_whole_ids_and_local_times(server_url: str) -> None:
    import re

    code, out = _yoke(
        server_url,
        "start",
        "checkout",
        "--input",
        '{"order": 9, "items": [], "total": 1}',
        "--wait",
        "5",
        "--json",
    )
    eid = json.loads(out)["execution_id"]
    code, out = _yoke(server_url, "executions", "list")  # an 80-column console
    assert code == 0 and eid in out, out
    local_iso = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d"
    code, out = _yoke(server_url, "executions", "show", eid)
    assert re.search(r"created_at\s+" + local_iso, out), out
    _yoke(server_url, "limits", "set", "--max-queued", "100")
    code, out = _yoke(server_url, "audit")
    assert re.search(local_iso, out), out


def test_errors_exit_non_zero(server_url: str, tmp_path: Path) -> None:
    code, out = _yoke(server_url, "executions", "show", "nope")
    assert code == 1 and "404" in out
    code, out = _yoke(server_url, "start", "nope")
    assert code == 1 and "no workflow named" in out
    code, out = _yoke(server_url, "start", "checkout", "--input", "{bad")
    assert code == 2
    code, out = _yoke("http://127.0.0.1:9", "limits", "show")
    assert code == 1 and "Cannot reach" in out
    result = CliRunner().invoke(app, ["serve", "--app", "examples.shop:app", "--host", "0.0.0.0"])
    assert result.exit_code == 2 and "refusing" in result.output
    result = CliRunner().invoke(app, ["serve", "--app", "nowhere:app"])
    assert result.exit_code == 2


def test_db_upgrade(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["db", "upgrade", "--database-url", f"sqlite:///{tmp_path}/new.db"]
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith("schema at version ")
    result = CliRunner().invoke(app, ["db", "upgrade", "--database-url", "mysql://x"])
    assert result.exit_code == 2 and "unsupported database URL" in result.output


WORKER_APP = """
import yoke

app = yoke.App()


@app.actor(subscribe=["pings"], key="id")
async def pinger(ctx, event):
    await ctx.state.update(lambda s: {**s, "n": s.get("n", 0) + 1})


@app.actor(subscribe=["bad"], key="id", backoff=yoke.Backoff(initial=0.01, max_attempts=3))
async def failing(ctx, event):
    raise RuntimeError("always fails")
"""


def test_worker_command_runs_until_sigterm_and_deregisters(tmp_path: Path) -> None:
    import signal
    import time

    (tmp_path / "pingapp.py").write_text(WORKER_APP)
    db = tmp_path / "w.db"
    proc = subprocess.Popen(
        [
            sys.executable,
            *("-m", "yoke", "worker", "--app", "pingapp:app"),
            "--database-url",
            f"sqlite:///{db}",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        row = None
        while time.monotonic() < deadline and row is None:
            if db.exists():
                with (
                    contextlib.suppress(sqlite3.OperationalError),
                    contextlib.closing(sqlite3.connect(db)) as conn,
                ):
                    row = conn.execute("SELECT pid, stopped_at FROM runtime_workers").fetchone()
            time.sleep(0.1)
        assert row is not None, "the worker never registered"
        assert row[0] == proc.pid and row[1] is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""
        with contextlib.closing(sqlite3.connect(db)) as conn:
            stopped = conn.execute("SELECT stopped_at FROM runtime_workers").fetchone()
        assert stopped is not None and stopped[0] is not None
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_worker_command_refuses_a_bad_app() -> None:
    result = CliRunner().invoke(app, ["worker", "--app", "no_such_module:app"])
    assert result.exit_code == 2


def test_worker_logs_its_start_failures_and_stop_as_json(tmp_path: Path) -> None:
    import asyncio
    import signal
    import time

    (tmp_path / "pingapp.py").write_text(WORKER_APP)
    db = tmp_path / "w.db"
    log = tmp_path / "worker.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                *("-m", "yoke", "worker", "--app", "pingapp:app", "--log-format", "json"),
                *("--database-url", f"sqlite:///{db}", "--log-level", "info"),
            ],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={"YOKE_WORKER_ID": "w-logs", "PATH": "/usr/bin:/bin"},
        )
    try:
        # An appender that runs no worker, with the same fan-out as the worker's app.
        appender = yoke.App(f"sqlite:///{db}", actor_worker=False)

        @appender.actor(subscribe=["bad"], key="id")
        async def failing(ctx: object, event: object) -> None:
            raise AssertionError("never run here")

        async def append() -> None:
            async with appender.running():
                await appender.append_many("bad", [{"id": f"i{n}"} for n in range(20)])

        deadline = time.monotonic() + 30
        while "starting" not in log.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
            time.sleep(0.1)
        asyncio.run(append())
        # 20 events x 3 attempts: 60 failures, of which 5 are written (then rate-limited).
        while log.read_text().count("failed, attempt") < 5:
            assert time.monotonic() < deadline + 30, log.read_text()
            time.sleep(0.1)
        time.sleep(1.0)  # the other failures happen meanwhile; none may add a line
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    messages = [x["message"] for x in lines]
    start = next(m for m in messages if "starting" in m)
    assert "w-logs" in start and "w.db" in start and "failing, pinger" in start and "64" in start
    failures = [x for x in lines if "failed, attempt" in x["message"]]
    assert failures and all(x["level"] == "warning" for x in failures)
    assert "'failing' instance 'i" in failures[0]["message"]
    assert "RuntimeError: always fails" in failures[0]["message"]
    assert len(failures) <= 5, "failures of one actor are rate-limited"
    assert any("stopped" in m and "w-logs" in m for m in messages), messages


EXECUTOR_APP = """
import os

import yoke

app = yoke.App()


@app.actor(subscribe=["pings"], key="id")
async def pinger(ctx, event):
    await ctx.state.update(lambda s: {**s, "pid": os.getpid()})


@app.portal()
async def feed(ctx):
    await ctx.append("pings", {"id": "x"}, tenant="t1")
    await ctx.stopping.wait()
"""


def test_worker_command_runs_executors_and_serves_its_metrics(tmp_path: Path) -> None:
    import json
    import signal
    import socket
    import time
    import urllib.request

    (tmp_path / "execapp.py").write_text(EXECUTOR_APP)
    tmp_path.chmod(0o755)  # the app, readable by the tenants' uids (else, as root: refused)
    db = tmp_path / "w.db"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            *("-m", "yoke", "worker", "--app", "execapp:app", "--executors", "process"),
            *("--database-url", f"sqlite:///{db}", "--metrics-port", str(port)),
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        state = None
        while time.monotonic() < deadline and state is None:
            if db.exists():
                with (
                    contextlib.suppress(sqlite3.OperationalError),
                    contextlib.closing(sqlite3.connect(db)) as conn,
                ):
                    row = conn.execute(
                        "SELECT state FROM actor_instances WHERE tenant = 't1'"
                    ).fetchone()
                    if row is not None and "pid" in json.loads(row[0]):
                        state = json.loads(row[0])
            time.sleep(0.1)
        assert state is not None, "the portal's event was never processed"
        assert state["pid"] != proc.pid  # process() ran in the tenant's executor
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
        assert 'yoke_executors{state="READY"} 1.0' in text
        assert 'yoke_executor_boot_phase_seconds_count{phase="app"} 1.0' in text
        assert 'yoke_actor_process_total{actor="pinger"} 1.0' in text
        with (
            contextlib.suppress(urllib.error.HTTPError),
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10),
        ):
            raise AssertionError("only /metrics is served")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_worker_command_refuses_an_unknown_executor_mode(tmp_path: Path) -> None:
    (tmp_path / "execapp.py").write_text(EXECUTOR_APP)
    with contextlib.chdir(tmp_path):
        result = CliRunner().invoke(app, ["worker", "--app", "execapp:app", "--executors", "vm"])
    assert result.exit_code == 2 and "inline" in result.output


def test_the_example_shop_runs_a_worker_with_its_cart_actor(tmp_path: Path) -> None:
    import asyncio
    import os
    import signal
    import time

    root = Path(__file__).resolve().parents[1]
    db = tmp_path / "shop.db"
    log = tmp_path / "worker.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("YOKE_")}
    env["YOKE_NOTIFY_POLL_BACKUP_SECS"] = "0.2"  # SQLite: another process's append is polled
    with log.open("w") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                *("-m", "yoke", "worker", "--app", "examples.shop:app", "--log-level", "info"),
                *("--database-url", f"sqlite:///{db}"),
            ],
            cwd=root,  # as README runs it, from the checkout
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )
    try:
        deadline = time.monotonic() + 30
        while "starting" not in log.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
            time.sleep(0.1)
        start = next(line for line in log.read_text().splitlines() if "starting" in line)
        assert "actors cart," in start, start
        # An appender that runs no worker, with the same fan-out as the shop's.
        appender = yoke.App(f"sqlite:///{db}", actor_worker=False)

        @appender.actor(subscribe=["carts"], key="cart_id")
        async def cart(ctx: object, event: object) -> None:
            raise AssertionError("never run here")

        async def add_and_see() -> object:
            async with appender.running():
                await appender.append("carts", {"cart_id": "c1", "line": "tea"}, tenant="acme")
                while not (
                    view := await appender.actors.instance("cart", "c1", tenant="acme")
                ).state:
                    assert time.monotonic() < deadline + 30, log.read_text()
                    await asyncio.sleep(0.05)  # polling the store, which the worker writes
                return view.state

        assert asyncio.run(add_and_see()) == {"items": 1}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
