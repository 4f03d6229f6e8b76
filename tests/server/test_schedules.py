"""`/v1/schedules` on both stores: a plain tenant manages only its own schedules, in its own
sessions, and sees nothing of another tenant's; an OPERATOR manages every tenant's; a bad cron
expression, time zone or value is a 4xx problem and changes nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.conftest import Client, make_app, running
from tests.server.test_errors import assert_problem
from yoke.server import Server, TokenBook


@pytest.fixture
async def client(database_url: str, tokens_file: Path) -> AsyncIterator[Client]:
    server = Server(make_app(database_url), tokens=TokenBook.from_file(tokens_file))
    async with running(server) as c:
        yield c


NIGHTLY = {"workflow": "echo", "cron": "30 2 * * *", "timezone": "Europe/Berlin"}


async def test_a_tenant_manages_only_its_own_schedules(client: Client) -> None:
    acme, globex, ops = client("acme"), client("globex"), client("operator")
    r = await globex.put("/v1/schedules/nightly", json={**NIGHTLY, "session": "globex/secret"})
    assert r.status_code == 200, r.text
    assert r.json()["tenant"] == "globex"
    r = await acme.put("/v1/schedules/nightly", json={**NIGHTLY, "input": {"n": 1}})
    assert r.status_code == 200, r.text
    mine = r.json()
    assert (mine["tenant"], mine["session"], mine["fired"]) == ("acme", "acme", 0)
    assert mine["next_at"] > 0 and mine["last_tick_at"] is None

    # acme sees its own, by the same name as globex's, and nothing of globex's.
    listed = (await acme.get("/v1/schedules")).json()["items"]
    assert [(s["tenant"], s["name"]) for s in listed] == [("acme", "nightly")]
    text = json.dumps(listed) + (await acme.get("/v1/schedules/nightly")).text
    assert "globex" not in text and "secret" not in text
    for method, path in (
        ("GET", "/v1/schedules?tenant=globex"),
        ("GET", "/v1/schedules/nightly?tenant=globex"),
        ("DELETE", "/v1/schedules/nightly?tenant=globex"),
    ):
        assert_problem(await acme.request(method, path), 403)
    r = await acme.put("/v1/schedules/nightly?tenant=globex", json=NIGHTLY)
    assert_problem(r, 403)
    r = await acme.put("/v1/schedules/x", json={**NIGHTLY, "session": "globex"})  # its sessions
    assert_problem(r, 403)
    assert_problem(await acme.get("/v1/schedules/x"), 404)

    # The operator sees and manages both.
    everyone = (await ops.get("/v1/schedules")).json()["items"]
    assert [(s["tenant"], s["name"]) for s in everyone] == [
        ("acme", "nightly"),
        ("globex", "nightly"),
    ]
    r = await ops.delete("/v1/schedules/nightly?tenant=globex")
    assert r.status_code == 200 and r.json()["session"] == "globex/secret"
    assert_problem(await ops.get("/v1/schedules/nightly?tenant=globex"), 404)
    r = await acme.delete("/v1/schedules/nightly")
    assert r.status_code == 200
    assert (await ops.get("/v1/schedules")).json()["items"] == []


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({**NIGHTLY, "cron": "61 2 * * *"}, 422),
        ({**NIGHTLY, "cron": "* * * * * *"}, 422),
        ({**NIGHTLY, "cron": "x" * 201}, 422),
        ({**NIGHTLY, "timezone": "Nowhere/City"}, 422),
        ({**NIGHTLY, "timezone": "../etc/passwd"}, 422),
        ({"workflow": "echo"}, 422),  # neither cron nor every
        ({"workflow": "echo", "every": 0.5}, 422),
        ({"workflow": "echo", "every": "5"}, 422),
        ({"workflow": "echo", "every": 5, "cron": "* * * * *"}, 422),
        ({"workflow": "echo", "every": 5, "catch_up": "all"}, 422),
        ({"workflow": "echo", "every": 5, "input": {"x": "y" * 70_000}}, 422),
        ({"workflow": "echo", "every": 5, "extra": 1}, 422),
        ({"workflow": "nope", "every": 5}, 404),
    ],
)
async def test_bad_values_are_problems_and_store_nothing(
    client: Client, body: dict[str, Any], status: int
) -> None:
    ops = client("operator")
    r = await ops.put("/v1/schedules/x", json=body)
    assert_problem(r, status)
    assert (await ops.get("/v1/schedules")).json()["items"] == []


@pytest.mark.parametrize("name", ["a%2Fb", "-x", "x" * 129, "%00"])
async def test_bad_names_are_problems(client: Client, name: str) -> None:
    r = await client("operator").put(f"/v1/schedules/{name}", json={**NIGHTLY})
    assert r.status_code in (404, 422), r.text
    assert r.headers["content-type"].startswith("application/problem+json")
