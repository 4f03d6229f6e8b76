"""`/v1/tenants`: one set of settings per tenant over HTTP (a weight, its executions' limits,
its actors' limits), and `*`, the defaults of every tenant without a value of its own. ADMIN
changes them (reviewed, audited); a field left out stays, null clears it; a plain tenant reads
only its own row and the defaults that apply to it; bad input is a 4xx problem that stores
nothing."""

from __future__ import annotations

from typing import Any

from tests.server.conftest import Serve, Start
from tests.server.test_actor_routes import append, until
from tests.server.test_errors import assert_problem

NOTHING = {
    "weight": None,
    "executions": {"max_running": None, "max_queued": None, "rate": None, "burst": None},
    "actors": {
        "max_running": None,
        "append_rate": None,
        "append_burst": None,
        "max_instances": None,
        "max_timers": None,
    },
}


def own(t: dict[str, Any]) -> dict[str, Any]:
    return {k: t[k] for k in NOTHING}


async def test_an_admin_sets_fields_and_each_tenant_reads_its_own(serve: Serve) -> None:
    _, client = await serve()
    admin = client("admin")
    r = await admin.put("/v1/tenants/acme", json={"weight": 4})
    assert r.status_code == 200, r.text
    assert own(r.json()) == {**NOTHING, "weight": 4.0}
    r = await admin.put("/v1/tenants/acme", json={"executions": {"max_running": 3, "rate": 5}})
    body = r.json()
    assert body["weight"] == 4.0  # left out: it stays
    assert body["executions"] == {"max_running": 3, "max_queued": None, "rate": 5.0, "burst": None}
    r = await admin.put("/v1/tenants/acme", json={"executions": {"rate": None}})  # null clears
    assert r.json()["executions"]["rate"] is None and r.json()["executions"]["max_running"] == 3
    await admin.put("/v1/tenants/globex", json={"weight": 0.5, "actors": {"max_running": 1}})
    r = await admin.put("/v1/tenants/globex", json={"actors": {"max_running": None}})
    assert (r.json()["weight"], r.json()["actors"]["max_running"]) == (0.5, None)
    everyone = (await client("operator").get("/v1/tenants")).json()["items"]
    assert [t["tenant"] for t in everyone] == ["acme", "globex"]
    mine = (await client("acme").get("/v1/tenants")).json()["items"]
    assert [(t["tenant"], t["weight"], t["executions"]["max_running"]) for t in mine] == [
        ("acme", 4.0, 3)
    ]
    theirs = (await client("globex").get("/v1/tenants")).json()["items"]
    assert [t["tenant"] for t in theirs] == ["globex"]
    audit = (await admin.get("/v1/audit")).json()["items"]
    assert [(a["kind"], a["subject"]) for a in audit if a["kind"] == "tenant"] == [
        ("tenant", "acme"),
        ("tenant", "acme"),
        ("tenant", "acme"),
        ("tenant", "globex"),
        ("tenant", "globex"),
    ]


async def test_star_holds_the_defaults_of_every_tenant_without_its_own(serve: Serve) -> None:
    """`*` gives every tenant the values it has not set itself, field by field; a tenant's
    own value wins; clearing its own value falls back to `*` again. A plain tenant sees `*`
    (what applies to it) and its own row, never another tenant's."""
    _, client = await serve()
    admin = client("admin")
    r = await admin.put(
        "/v1/tenants/*",
        json={"weight": 2, "executions": {"max_running": 5, "max_queued": 50}},
    )
    assert r.status_code == 200, r.text
    assert r.json()["tenant"] == "*" and r.json()["effective"] is None
    r = await admin.put("/v1/tenants/acme", json={"executions": {"max_running": 2}})
    applies = r.json()["effective"]
    assert applies["weight"] == 2.0  # from `*`
    assert applies["executions"]["max_running"] == 2  # its own wins
    assert applies["executions"]["max_queued"] == 50  # from `*`
    await admin.put("/v1/tenants/globex", json={"actors": {"max_timers": 10}})
    mine = (await client("acme").get("/v1/tenants")).json()["items"]
    assert [t["tenant"] for t in mine] == ["*", "acme"]
    assert mine[1]["effective"]["executions"] == {
        "max_running": 2,
        "max_queued": 50,
        "rate": None,
        "burst": None,
    }
    # A tenant with no row of its own sees `*` and a row of nothing set, whose effective
    # values are the defaults.
    (await client("admin").put("/v1/tenants/acme", json={"executions": {"max_running": None}}))
    mine = (await client("acme").get("/v1/tenants")).json()["items"]
    assert mine[1]["effective"]["executions"]["max_running"] == 5
    listed = (await client("operator").get("/v1/tenants")).json()["items"]
    assert [t["tenant"] for t in listed] == ["*", "acme", "globex"]
    assert "globex" not in str(mine)


async def test_bad_input_or_a_veto_is_a_problem_and_stores_nothing(serve: Serve) -> None:
    server, client = await serve()
    admin = client("admin")
    bodies: tuple[dict[str, Any], ...] = (
        {"weight": 0},
        {"weight": -1},
        {"weight": 1e6},
        {"weight": "2"},
        {"max_running": 3},  # the flat form of old: now actors.max_running
        {"executions": {"max_running": 0}},
        {"executions": {"max_running": 2.5}},
        {"executions": {"max_running": True}},
        {"executions": {"max_queued": -1}},
        {"executions": {"rate": 0}},
        {"executions": {"rate": "5"}},
        {"executions": {"rate": 1e12}},
        {"executions": {"burst": 0}},
        {"executions": {"other": 1}},
        {"executions": []},
        {"actors": {"append_rate": -1}},
        {"actors": {"max_instances": 2**40}},
        {"actors": {"max_timers": -1}},
        {"other": 1},
        {},
    )
    for body in bodies:
        assert_problem(await admin.put("/v1/tenants/acme", json=body), 422)
    assert_problem(await admin.put("/v1/tenants/acme", content=b"{not json"), 400, 422)
    assert_problem(await admin.put("/v1/tenants/" + "x" * 5000, json={"weight": 2}), 422)
    assert_problem(await admin.put("/v1/tenants/a%2Fb", json={"weight": 2}), 404, 422)
    assert_problem(await client("operator").put("/v1/tenants/acme", json={"weight": 2}), 403)
    assert_problem(await client("acme").put("/v1/tenants/acme", json={"weight": 2}), 403)
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
