"""`/v1/tenants`: fleet-wide tenant weights and caps over HTTP. ADMIN changes them (reviewed,
audited); a plain tenant reads only its own row; bad input is a 4xx problem that stores
nothing."""

from __future__ import annotations

from tests.server.conftest import Serve, Start
from tests.server.test_actor_routes import append, until
from tests.server.test_errors import assert_problem


async def test_an_admin_sets_weights_and_caps_and_each_tenant_reads_its_own(serve: Serve) -> None:
    _, client = await serve()
    admin = client("admin")
    r = await admin.put("/v1/tenants/acme", json={"weight": 4})
    assert r.status_code == 200, r.text
    assert r.json()["weight"] == 4.0 and r.json()["max_running"] is None
    r = await admin.put("/v1/tenants/acme", json={"max_running": 3})
    assert (r.json()["weight"], r.json()["max_running"]) == (4.0, 3)  # the weight stays
    await admin.put("/v1/tenants/globex", json={"weight": 0.5, "max_running": 1})
    r = await admin.put("/v1/tenants/globex", json={"max_running": None})  # lifts the cap
    assert (r.json()["weight"], r.json()["max_running"]) == (0.5, None)
    everyone = (await client("operator").get("/v1/tenants")).json()["items"]
    assert [t["tenant"] for t in everyone] == ["acme", "globex"]
    mine = (await client("acme").get("/v1/tenants")).json()["items"]
    assert [(t["tenant"], t["weight"], t["max_running"]) for t in mine] == [("acme", 4.0, 3)]
    theirs = (await client("globex").get("/v1/tenants")).json()["items"]
    assert [t["tenant"] for t in theirs] == ["globex"]
    audit = (await admin.get("/v1/audit")).json()["items"]
    assert [(a["kind"], a["subject"]) for a in audit if a["kind"] == "tenant"] == [
        ("tenant", "acme"),
        ("tenant", "acme"),
        ("tenant", "globex"),
        ("tenant", "globex"),
    ]


async def test_bad_input_or_a_veto_is_a_problem_and_stores_nothing(serve: Serve) -> None:
    server, client = await serve()
    admin = client("admin")
    for body in (
        {"weight": 0},
        {"weight": -1},
        {"weight": 1e6},
        {"weight": "2"},
        {"max_running": 0},
        {"max_running": 2.5},
        {"max_running": True},
        {"other": 1},
        {},
    ):
        assert_problem(await admin.put("/v1/tenants/acme", json=body), 422)
    assert_problem(await admin.put("/v1/tenants/acme", content=b"{not json"), 400, 422)
    assert_problem(await admin.put("/v1/tenants/" + "x" * 5000, json={"weight": 2}), 422)
    assert_problem(await client("operator").put("/v1/tenants/acme", json={"weight": 2}), 403)
    server.app.add_reviewer(lambda change: "frozen" if change.kind == "tenant" else None)
    assert_problem(await admin.put("/v1/tenants/acme", json={"weight": 2}), 403)
    assert (await admin.get("/v1/tenants")).json() == {"items": []}


async def test_fairness_shows_the_actor_worker_per_tenant_a_tenant_its_own(start: Start) -> None:
    _, client = await start()
    acme, globex = client("acme"), client("globex")
    await append(acme, "carts", {"cart_id": "a1"}, {"cart_id": "a2"})
    await append(globex, "carts", {"cart_id": "g1"})
    await until(globex, "/v1/actors/cart/instances/g1", lambda b: b["state"] == {"items": 1})
    await until(acme, "/v1/actors/cart/instances/a2", lambda b: b["state"] == {"items": 1})
    mine = (await acme.get("/v1/fairness")).json()["actors"]
    assert [i["tenant"] for i in mine["items"]] == ["acme"] and mine["jain"] is None
    assert mine["items"][0]["processed"] >= 2  # cart and audit
    assert mine["items"][0]["wait_p50"] is not None
    every = (await client("operator").get("/v1/fairness")).json()["actors"]
    assert {i["tenant"] for i in every["items"]} == {"acme", "globex"}
    assert 0 < every["jain"] <= 1
