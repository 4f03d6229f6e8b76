"""The operator's `yoke` verbs against a real `yoke serve` with tokens (SQLite, PostgreSQL):
`yoke workers list`, `yoke events append` (for a tenant: OPERATOR only), `yoke start --result`,
and tables that fit a fixed width without cutting a word (a column that does not fit is left
out and named)."""

from __future__ import annotations

import json
import re

from typer.testing import CliRunner

from tests.server.conftest import TOKENS
from yoke.cli import app


def yoke(server: str, who: str, *args: str, width: int = 80) -> tuple[int, str, str]:
    env = {"COLUMNS": str(width), "YOKE_URL": server, "YOKE_TOKEN": TOKENS[who][0]}
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def fits(text: str, width: int) -> bool:
    return all(len(line) <= width for line in text.splitlines())


def test_workers_list_shows_the_fleet_to_an_operator(server: str) -> None:
    code, out, err = yoke(server, "operator", "workers", "list")
    assert code == 0, err
    assert fits(out, 80), out
    (worker,) = json.loads(yoke(server, "operator", "workers", "list", "--json")[1])["items"]
    assert worker["worker_id"] in out  # whole: an id cut in two cannot be pasted back
    assert re.search(r"\blive\b", out) and "ago" in out and "placement balanced" in out
    code, out, err = yoke(server, "acme", "workers", "list")
    assert code == 1 and "error 403" in err


def test_events_append_in_ones_own_tenant_or_for_a_tenant_as_operator(server: str) -> None:
    code, out, err = yoke(server, "acme", "events", "append", "ticks", '{"id": "c1"}', "--json")
    assert code == 0, err
    assert json.loads(out)["tenant"] == "acme"
    code, out, err = yoke(
        server, "operator", "events", "append", "ticks", '{"id": "c1"}', "--tenant", "globex"
    )
    assert code == 0 and re.search(r"tenant\s+globex", out), out + err
    code, out, err = yoke(
        server, "acme", "events", "append", "ticks", '{"id": "c1"}', "--tenant", "globex"
    )
    assert code == 1 and "error 403" in err and "own tenant" in err
    code, out, err = yoke(server, "acme", "events", "append", "ticks", "[1, 2]")
    assert code == 2 and "JSON object" in err


def test_start_result_prints_the_output_or_says_why_not(server: str) -> None:
    code, out, err = yoke(server, "acme", "start", "echo", "--input", '{"n": 3}', "--result")
    assert code == 0, err
    assert json.loads(out) == {"n": 3}
    code, out, err = yoke(server, "acme", "start", "fail", "--input", '"x"', "--result")
    assert code == 1 and out == ""
    assert "FAILED" in err and "asked to fail: x" in err
    code, out, err = yoke(
        server, "acme", "start", "hold", "--input", "30", "--wait", "1", "--result"
    )
    assert code == 1 and "RUNNING after 1 s" in err
    running = re.search(r"execution (\S+) RUNNING", err)
    assert running is not None
    yoke(server, "acme", "executions", "cancel", running.group(1))


def test_start_later_and_signal_from_the_command_line(server: str) -> None:
    code, out, err = yoke(server, "acme", "start", "echo", "--delay", "60", "--json")
    assert code == 0, err
    scheduled = json.loads(out)
    assert scheduled["status"] == "SCHEDULED" and scheduled["due_at"] is not None
    code, out, err = yoke(server, "acme", "start", "echo", "--delay", "1", "--result")
    assert code == 2 and "--result" in err
    code, out, err = yoke(server, "acme", "start", "approval", "--wait", "5", "--json")
    execution_id = json.loads(out)["execution_id"]
    for _ in range(500):
        code, out, err = yoke(server, "acme", "executions", "list", "--status", "WAITING")
        if execution_id in out:
            break
    assert execution_id in out, out + err
    code, out, err = yoke(server, "acme", "signal", execution_id, "approve", "--payload", "5")
    assert code == 0, err
    code, out, err = yoke(server, "acme", "executions", "show", execution_id, "--json")
    for _ in range(500):
        if json.loads(out)["status"] == "SUCCEEDED":
            break
        code, out, err = yoke(server, "acme", "executions", "show", execution_id, "--json")
    assert json.loads(out)["output"] == 5
    code, out, err = yoke(server, "acme", "signal", execution_id, "approve", "--payload", "{")
    assert code == 2 and "JSON" in err


def test_tables_fit_the_width_and_never_cut_a_word(server: str) -> None:
    session = "acme/a-session-whose-name-is-one-long-word-of-fifty-chars"
    ids = []
    for n in range(3):
        code, out, err = yoke(
            server, "acme", "start", "echo", "--session", session, "--input", str(n), "--json"
        )
        assert code == 0, err
        ids.append(json.loads(out)["execution_id"])
    code, wide, _ = yoke(server, "acme", "executions", "list", "--session", session, width=200)
    assert session in wide and all(i in wide for i in ids)
    code, out, err = yoke(server, "acme", "executions", "list", "--session", session)
    assert code == 0, err
    assert fits(out, 80), out
    assert all(i in out for i in ids)  # ids whole
    # The session (one word longer than the room left) is left out, and said to be.
    assert "not shown at this width: session, error" in out
    assert not any(part in out for part in ("a-session-whose", "fifty-chars"))
    code, out, err = yoke(server, "acme", "executions", "show", ids[0], width=60)
    assert code == 0 and fits(out, 60), out
    assert ids[0] in out and session in out  # a value on a line of its own, whole
