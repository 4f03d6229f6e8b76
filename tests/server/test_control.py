"""`/v1/limits`, `/v1/scheduler`, `/v1/audit` in process."""

from __future__ import annotations

from tests.server.conftest import Serve
from yoke.executions import Limits


async def test_limits_are_read_by_anyone_and_replaced_whole_by_an_admin(serve: Serve) -> None:
    _, client = await serve(Limits(max_running=3, max_queued=7))
    assert (await client("acme").get("/v1/limits")).json()["max_queued"] == 7
    r = await client("operator").put("/v1/limits", json={"max_running": 2})
    assert r.status_code == 403
    r = await client("admin").put(
        "/v1/limits", json={"max_running": 2, "max_running_per_workflow": {"echo": 1}}
    )
    assert r.status_code == 200
    assert r.json() == {
        "max_running": 2,
        "max_running_per_session": None,
        "max_running_per_workflow": {"echo": 1},
        "max_queued": None,
        "on_limit": "queue",
    }
    assert (await client("acme").get("/v1/limits")).json() == r.json()


async def test_a_reviewer_veto_is_403_and_changes_nothing(serve: Serve) -> None:
    server, client = await serve()
    server.app.add_reviewer(lambda change: "frozen for the release")
    r = await client("admin").put("/v1/limits", json={"max_running": 1})
    assert r.status_code == 403 and "frozen" in r.json()["detail"]
    assert (await client("admin").get("/v1/limits")).json()["max_running"] is None


async def test_scheduler_shows_slots_sessions_and_next_picks(serve: Serve) -> None:
    _, client = await serve(Limits(max_running=2, max_running_per_session=1))
    acme, globex = client("acme"), client("globex")
    await acme.post("/v1/starts", json={"workflow": "hold"})
    await acme.post("/v1/starts", json={"workflow": "echo"})
    await globex.post("/v1/starts", json={"workflow": "hold"})
    await globex.post("/v1/starts", json={"workflow": "echo"})
    s = (await client("operator").get("/v1/scheduler")).json()
    assert s["running"] == 2 and s["queued"] == 2 and s["slots_free"] == 0
    assert {x["session"]: (x["running"], x["queued"]) for x in s["sessions"]} == {
        "acme": (1, 1),
        "globex": (1, 1),
    }
    assert s["others"] is None
    assert s["next_picks"] == [] and s["fairness"] == 1.0  # both sessions held by their cap
    assert s["ledger"]["global"] == 2 and not s["shutting_down"]
    await client("admin").put("/v1/limits", json={"max_running": 2, "max_running_per_session": 2})
    s = (await acme.get("/v1/scheduler")).json()
    assert s["running"] == 2


async def test_next_picks_follow_priority_then_fewest_running(serve: Serve) -> None:
    _, client = await serve(Limits(max_running=1))
    acme, globex = client("acme"), client("globex")
    await acme.post("/v1/starts", json={"workflow": "hold"})
    a = (await acme.post("/v1/starts", json={"workflow": "echo"})).json()
    g = (await globex.post("/v1/starts", json={"workflow": "echo"})).json()
    p = (await acme.post("/v1/starts", json={"workflow": "echo", "priority": 9})).json()
    s = (await client("operator").get("/v1/scheduler")).json()
    assert s["queued"] == 3
    assert [x["start_id"] for x in s["next_picks"]] == [p["start_id"], g["start_id"], a["start_id"]]
    # A tenant sees the same order, of its own starts only.
    s = (await acme.get("/v1/scheduler")).json()
    assert [x["start_id"] for x in s["next_picks"]] == [p["start_id"], a["start_id"]]


async def test_audit_needs_admin_and_pages(serve: Serve) -> None:
    _, client = await serve()
    admin = client("admin")
    for n in (1, 2, 3):
        await admin.put("/v1/limits", json={"max_running": n})
    assert (await client("operator").get("/v1/audit")).status_code == 403
    items = (await admin.get("/v1/audit", params={"limit": 2, "offset": 1})).json()["items"]
    assert [i["after"]["max_running"] for i in items] == [2, 3]
    assert items[0]["principal"] == "root" and items[0]["roles"] == ["ADMIN"]


async def test_an_event_is_appended_to_the_callers_tenant(serve: Serve) -> None:
    _, client = await serve()
    c = client("acme")
    r = await c.post("/v1/streams/carts/events", json={"cart_id": "c1", "n": 1})
    assert r.status_code == 202
    body = r.json()
    assert body["stream"] == "carts" and body["tenant"] == "acme" and body["event_id"] >= 1
    key = {"Idempotency-Key": "ev-1"}
    a = await c.post("/v1/streams/carts/events", json={"cart_id": "c2"}, headers=key)
    b = await c.post("/v1/streams/carts/events", json={"cart_id": "c2"}, headers=key)
    assert a.content == b.content and b.headers["idempotent-replayed"] == "true"
    assert (await c.post("/v1/streams/carts/events", content=b"{")).status_code == 400
    assert (await client("nobody").post("/v1/streams/carts/events", json={})).status_code == 401
