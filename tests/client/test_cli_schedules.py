"""`yoke schedules list|set|delete` against a real `yoke serve` with tokens (SQLite,
PostgreSQL), through `yoke.client`: a tenant sets and sees its own schedules only, an operator
every tenant's, a bad cron expression is the server's 422 in one line, and the list fits 80
columns without cutting a word."""

from __future__ import annotations

import json

from tests.client.test_cli_verbs import fits, yoke


def test_schedules_set_list_delete(server: str) -> None:
    code, out, err = yoke(
        server,
        "acme",
        "schedules",
        "set",
        "nightly-report",
        "echo",
        "--cron",
        "30 2 * * *",
        "--timezone",
        "Europe/Berlin",
        "--input",
        '{"report": "daily"}',
    )
    assert code == 0, err
    assert "nightly-report" in out and "Europe/Berlin" in out and fits(out, 80), out
    code, out, err = yoke(server, "acme", "schedules", "set", "beat", "echo", "--every", "60")
    assert code == 0, err

    code, out, err = yoke(server, "acme", "schedules", "list")
    assert code == 0, err
    assert fits(out, 80), out
    for text in ("nightly-report", "30 2 * * *", "every 60s", "beat"):
        assert text in out, out
    assert "in " in out  # the next run, as a time from now

    code, out, err = yoke(server, "globex", "schedules", "list", "--json")
    assert code == 0 and json.loads(out) == {"items": []}, out
    code, out, err = yoke(server, "globex", "schedules", "delete", "beat", "--tenant", "acme")
    assert code == 1 and "error 403" in err
    code, out, err = yoke(server, "acme", "schedules", "set", "x", "echo", "--cron", "61 * * * *")
    assert code == 1 and "error 422" in err and "minute" in err.lower(), err

    code, out, err = yoke(server, "operator", "schedules", "list", "--json")
    items = json.loads(out)["items"]
    assert [(s["tenant"], s["name"]) for s in items] == [
        ("acme", "beat"),
        ("acme", "nightly-report"),
    ]
    assert items[1]["input"] == {"report": "daily"}
    code, out, err = yoke(server, "operator", "schedules", "delete", "beat", "--tenant", "acme")
    assert code == 0, err
    code, out, err = yoke(server, "acme", "schedules", "list", "--json")
    assert [s["name"] for s in json.loads(out)["items"]] == ["nightly-report"]
