"""Tenants are adversaries: a plain tenant's scheduler view names only its own sessions,
`/metrics` needs a role that may read it and keeps its labels bounded, and a token cannot ask a
start priority above its `max_priority` (the Python API, whose caller is trusted, keeps the
full range)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.server.conftest import (
    TOKENS,
    TOKENS_TOML,
    Serve,
    Start,
    make_app,
    running,
)
from tests.server.test_errors import assert_problem
from yoke.actors.metrics import DEPTH_LIMIT
from yoke.executions import Limits, Principal
from yoke.server import Server, TokenBook
from yoke.server.metrics import TOP_SESSIONS
from yoke.store.actor_records import NewTimer


async def test_a_tenant_sees_only_its_own_sessions_in_the_scheduler(serve: Serve) -> None:
    _, client = await serve(Limits(max_running=1))
    acme, globex, ops = client("acme"), client("globex"), client("operator")
    await ops.post("/v1/starts", json={"workflow": "hold", "session": "initech"})  # the slot
    secret = await globex.post(
        "/v1/starts", json={"workflow": "echo", "session": "globex/secret-project-x"}
    )
    assert secret.status_code == 202
    await globex.post("/v1/starts", json={"workflow": "steps"})
    mine = (await acme.post("/v1/starts", json={"workflow": "echo", "session": "acme/a"})).json()

    view = (await acme.get("/v1/scheduler")).json()
    text = json.dumps(view)
    for foreign in ("globex", "secret-project-x", "initech", secret.json()["start_id"], "steps"):
        assert foreign not in text, (foreign, text)
    assert view["sessions"] == [{"session": "acme/a", "running": 0, "queued": 1}]
    assert view["others"] == {"running": 1, "queued": 2}
    assert [p["start_id"] for p in view["next_picks"]] == [mine["start_id"]]
    assert view["running"] == 1 and view["queued"] == 3  # totals, without names

    full = (await ops.get("/v1/scheduler")).json()
    assert {s["session"] for s in full["sessions"]} == {
        "initech",
        "globex/secret-project-x",
        "globex",
        "acme/a",
    }
    assert full["others"] is None and len(full["next_picks"]) == 3


@pytest.mark.parametrize(
    ("who", "status"),
    [("nobody", 401), ("acme", 403), ("scraper", 200), ("operator", 200), ("admin", 200)],
)
async def test_metrics_need_a_role_that_may_read_them(serve: Serve, who: str, status: int) -> None:
    _, client = await serve()
    r = await client(who).get("/metrics")
    assert r.status_code == status, r.text
    if status == 200:
        assert "yoke_starts_total" in r.text
    else:
        assert_problem(r, status)


async def test_without_tokens_metrics_are_the_local_admins(serve: Serve) -> None:
    _, client = await serve(tokens=False)
    assert (await client("anyone").get("/metrics")).status_code == 200


async def test_a_scraper_may_read_metrics_and_nothing_else(serve: Serve) -> None:
    """A METRICS token reads `/metrics` (and the public routes); every other route of the
    table, those open to any principal included, is 403 before its body is judged, and the
    dashboard does not take it: a scraper's token cannot start work or read a tenant's."""
    server, client = await serve(Limits(max_running=1))
    scraper = client("scraper")
    admin = client("admin")
    await client("acme").post("/v1/starts", json={"workflow": "hold"})
    before = (await admin.get("/v1/scheduler")).json(), (await admin.get("/v1/audit")).json()
    for op in server.ops:
        url = re.sub(r"{(\w+)(?::\w+)?}", r"no-such-\1", op.path)
        body = b'{"workflow": "echo"}' if op.body is not None else None
        r = await scraper.request(op.method, url, content=body)
        if op.access.public:
            assert r.status_code != 403, (op.method, op.path)
        elif op.path == "/metrics":
            assert r.status_code == 200 and "yoke_starts_total" in r.text
        else:
            assert_problem(r, 403)
    r = await scraper.post("/v1/starts", json={"workflow": "echo"})
    assert "may read /metrics alone" in assert_problem(r, 403)["detail"]
    assert ((await admin.get("/v1/scheduler")).json(), (await admin.get("/v1/audit")).json()) == (
        before
    )
    browser = client("nobody")
    refused = await browser.post("/ui/login", data={"token": TOKENS["scraper"][0]})
    assert refused.status_code == 403 and "yoke_session" not in refused.headers.get(
        "set-cookie", ""
    )
    page = await scraper.get("/ui/")
    assert page.status_code == 303 and page.headers["location"].startswith("/ui/login")
    assert (await scraper.get("/ui/f/overview")).status_code == 401


async def test_session_labels_stay_bounded_however_many_tenants(serve: Serve) -> None:
    _, client = await serve(Limits(max_running=0))
    ops = client("operator")
    for i in range(TOP_SESSIONS * 3):
        await ops.post("/v1/starts", json={"workflow": "echo", "session": f"tenant-{i:03d}"})
    text = (await client("scraper").get("/metrics")).text
    series = [ln for ln in text.splitlines() if ln.startswith("yoke_session_queued{")]
    assert len(series) == TOP_SESSIONS + 1
    assert 'yoke_session_queued{session="_other"} 40.0' in series


async def test_instance_labels_stay_bounded_with_an_aggregate(start: Start) -> None:
    server, client = await start(worker=False)  # nothing drains: every row stays pending
    runtime = server.app.actors
    await runtime.append_many(
        "carts", [{"cart_id": f"c{i}"} for i in range(DEPTH_LIMIT + 10)], tenant="acme"
    )
    await runtime.append("carts", {"cart_id": "c0"}, tenant="acme")  # c0 is the deepest
    text = (await client("scraper").get("/metrics")).text
    series = [ln for ln in text.splitlines() if ln.startswith("yoke_queue_depth{")]
    # Two actors subscribe to carts: each has its deepest instances and one `_other`.
    named = [s for s in series if 'instance="_other"' not in s]
    other = {s for s in series if 'instance="_other"' in s}
    assert len(named) == DEPTH_LIMIT
    assert len(other) == 2
    total = sum(float(s.rsplit(" ", 1)[1]) for s in series)
    assert total == 2 * (DEPTH_LIMIT + 11)  # nothing lost from the sum


# -- max_priority ------------------------------------------------------------------------------
async def test_a_plain_token_cannot_jump_the_queue(serve: Serve) -> None:
    _, client = await serve(Limits(max_running=0))
    globex, acme, ops = client("globex"), client("acme"), client("operator")
    r = await globex.post("/v1/starts", json={"workflow": "echo", "priority": 2147483647})
    body = assert_problem(r, 403)
    assert "at most 0" in body["detail"]
    assert (
        await globex.post("/v1/starts", json={"workflow": "echo", "priority": 1})
    ).status_code == 403
    assert (
        await globex.post("/v1/starts", json={"workflow": "echo", "priority": -5})
    ).status_code == 202
    assert (
        await acme.post("/v1/starts", json={"workflow": "echo", "priority": 9})
    ).status_code == 202
    r = await acme.post("/v1/starts", json={"workflow": "echo", "priority": 10})
    assert "at most 9" in assert_problem(r, 403)["detail"]
    r = await ops.post("/v1/starts", json={"workflow": "echo", "priority": 2147483647})
    assert r.status_code == 202  # OPERATOR and ADMIN are unlimited
    # Nothing was written for the refused ones.
    view = (await ops.get("/v1/scheduler")).json()
    assert view["queued"] == 3


async def test_restart_and_resume_keep_to_max_priority_too(serve: Serve) -> None:
    _, client = await serve()
    globex = client("globex")
    done = (await globex.post("/v1/starts", json={"workflow": "echo", "input": 1})).json()
    eid = done["execution_id"]
    await globex.get(f"/v1/executions/{eid}")
    for verb in ("restart", "resume"):
        r = await globex.post(f"/v1/executions/{eid}/{verb}", json={"priority": 5})
        assert_problem(r, 403)
    r = await globex.post(f"/v1/executions/{eid}/restart", json={"priority": 0})
    assert r.status_code in (201, 202), r.text
    r = await client("admin").post(f"/v1/executions/{eid}/restart", json={"priority": 50})
    assert r.status_code in (201, 202) and r.json()["priority"] == 50


async def test_the_python_api_keeps_the_full_priority_range(serve: Serve) -> None:
    server, _ = await serve(Limits(max_running=0))
    start = await server.app.executions.start(
        "echo", None, session="acme", priority=2**31 - 1, principal=Principal("acme-ci")
    )
    assert start.priority == 2**31 - 1


async def test_a_token_without_max_priority_and_with_roles_is_unlimited(serve: Serve) -> None:
    _, client = await serve(Limits(max_running=0))
    r = await client("admin").post("/v1/starts", json={"workflow": "echo", "priority": 10**6})
    assert r.status_code == 202 and r.json()["priority"] == 10**6


async def test_an_operator_token_with_a_max_priority_keeps_to_it_when_reprioritising(
    db_url: str, tmp_path: Path
) -> None:
    """A role holder's `max_priority`, when the file sets one, bounds every priority it asks:
    `PATCH /v1/starts/{id}` and the dashboard's priority control (its session keeps its
    token's bound) as well as starts."""
    path = tmp_path / "steward.toml"
    path.write_text(
        TOKENS_TOML
        + '[[tokens]]\ntoken = "t-steward"\nprincipal = "steward"\nroles = ["OPERATOR"]\n'
        + "max_priority = 5\n"
    )
    server = Server(make_app(db_url, Limits(max_running=0)), tokens=TokenBook.from_file(path))
    async with running(server) as client:
        steward = client("nobody")
        steward.headers["Authorization"] = "Bearer t-steward"
        queued = await client("acme").post("/v1/starts", json={"workflow": "echo"})
        sid = queued.json()["start_id"]
        r = await steward.patch(f"/v1/starts/{sid}", json={"priority": 6})
        assert "at most 5" in assert_problem(r, 403)["detail"]
        r = await steward.patch(f"/v1/starts/{sid}", json={"priority": 5})
        assert r.status_code == 200 and r.json()["priority"] == 5
        r = await client("operator").patch(f"/v1/starts/{sid}", json={"priority": 10**6})
        assert r.status_code == 200  # an OPERATOR without a max_priority: unlimited
        browser = client("nobody")
        await browser.post("/ui/login", data={"token": "t-steward"})
        csrf = (await browser.get("/ui/")).text.split('name="csrf" value="')[1].split('"')[0]
        form = {"start_id": sid, "csrf": csrf}
        r = await browser.post("/ui/actions/priority", data={**form, "priority": "7"})
        assert r.status_code == 403 and "at most 5" in r.text
        after = await client("admin").get(f"/v1/starts/{sid}")
        assert after.json()["priority"] == 10**6
        r = await browser.post("/ui/actions/priority", data={**form, "priority": "4"})
        assert r.status_code == 303
        assert (await client("admin").get(f"/v1/starts/{sid}")).json()["priority"] == 4


# -- the timers view ---------------------------------------------------------------------------
async def test_a_tenant_sees_its_next_timers_however_many_others_hold(start: Start) -> None:
    """A tenant's `/v1/timers` (and the Timers page) list its own next timers, read for that
    tenant alone: another tenant's thousand earlier timers neither hide them nor show."""
    server, client = await start(worker=False)
    store = server.app.actors._require()
    now = server.app.clock.wall()
    soon = int(now * 1000) + 3_600_000
    theirs = [
        NewTimer(tenant="globex", stream="carts", data='{"cart_id": "g"}', fire_at_ms=soon + i)
        for i in range(1000)
    ]
    await store.schedule(theirs, now=now)
    mine = NewTimer(tenant="acme", stream="carts", data='{"cart_id": "a"}', fire_at_ms=soon + 5000)
    [mine_id] = await store.schedule([mine], now=now)
    acme = client("acme")
    view = (await acme.get("/v1/timers", params={"limit": 5})).json()
    assert [(t["timer_id"], t["tenant"]) for t in view["items"]] == [(mine_id, "acme")]
    page = (await acme.get("/ui/timers")).text
    assert f"<td>{mine_id}</td>" in page and "globex" not in page
    admin = (await client("admin").get("/v1/timers", params={"limit": 5})).json()
    assert {t["tenant"] for t in admin["items"]} == {"globex"}  # every tenant's, soonest first
