"""Tenants in admission over HTTP: a start names its tenant and a plain tenant sees what is
stored as its own (not what a session's name suggests); a tenant's queue bound and its rates
answer 429 problem JSON with Retry-After to that tenant alone, before anything is written."""

from __future__ import annotations

import asyncio

from tests.server.conftest import Serve, Start
from tests.server.test_actor_routes import append
from tests.server.test_errors import assert_problem
from yoke.executions import Limits


async def test_a_start_names_its_tenant_and_visibility_follows_it(serve: Serve) -> None:
    server, client = await serve()
    acme, globex = client("acme"), client("globex")
    r = await acme.post("/v1/starts", json={"workflow": "echo", "session": "acme/a"})
    assert r.status_code == 201 and r.json()["tenant"] == "acme", r.text
    ex = (await acme.get(f"/v1/executions/{r.json()['execution_id']}")).json()
    assert ex["tenant"] == "acme"
    # The Python API is trusted: it may file a start under a tenant its session does not
    # name. Who sees it follows the stored tenant, not the session.
    app = server.app.executions
    theirs = await app.start("echo", None, session="acme/b", tenant="initech")
    ours = await app.start("echo", None, session="shared", tenant="acme")
    assert (await acme.get(f"/v1/starts/{theirs.start_id}")).status_code == 404
    assert (await acme.get(f"/v1/starts/{ours.start_id}")).status_code == 200
    assert (await globex.get(f"/v1/starts/{ours.start_id}")).status_code == 404
    assert ours.execution_id is not None and theirs.execution_id is not None
    assert (await acme.get(f"/v1/executions/{ours.execution_id}")).status_code == 200
    assert (await acme.get(f"/v1/executions/{theirs.execution_id}")).status_code == 404
    listed = (await acme.get("/v1/executions")).json()["items"]
    assert {e["execution_id"] for e in listed} == {ex["execution_id"], ours.execution_id}


async def test_a_tenants_queue_bound_is_429_for_it_alone(serve: Serve) -> None:
    server, client = await serve(Limits(max_running=1))
    admin, acme, globex = client("admin"), client("acme"), client("globex")
    r = await admin.put("/v1/tenants/*", json={"executions": {"max_queued": 1}})
    assert r.status_code == 200, r.text
    assert (await client("operator").post("/v1/starts", json={"workflow": "hold"})).status_code
    assert (await acme.post("/v1/starts", json={"workflow": "echo"})).status_code == 202
    refused = await acme.post("/v1/starts", json={"workflow": "echo"})
    problem = assert_problem(refused, 429)
    assert "max_queued" in problem["detail"] and int(refused.headers["Retry-After"]) >= 1
    assert (await globex.post("/v1/starts", json={"workflow": "echo"})).status_code == 202
    ran = await server.app.executions.list(tenant="acme")
    assert ran.items == ()  # acme's one start waits: nothing of it ran


async def test_a_tenants_start_rate_is_429_with_when_a_token_is_there(serve: Serve) -> None:
    server, client = await serve()
    admin, acme, globex = client("admin"), client("acme"), client("globex")
    await admin.put("/v1/tenants/acme", json={"executions": {"rate": 0.5, "burst": 1}})
    assert (await acme.post("/v1/starts", json={"workflow": "echo"})).status_code == 201
    refused = await acme.post("/v1/starts", json={"workflow": "echo"})
    problem = assert_problem(refused, 429)
    assert problem["type"].endswith("/rate-limited"), problem
    assert 1 <= int(refused.headers["Retry-After"]) <= 2 and 0 < problem["retry_after"] <= 2
    for _ in range(3):  # another tenant is not slowed
        assert (await globex.post("/v1/starts", json={"workflow": "echo"})).status_code == 201
    store = server.app.store
    assert store is not None
    ledger_before = await store.ledger()
    assert "tenant:acme" not in ledger_before  # its one start ended: nothing held


async def test_a_tenants_append_rate_is_429_and_writes_nothing(start: Start) -> None:
    _, client = await start(worker=False)
    admin, acme, globex = client("admin"), client("acme"), client("globex")
    # A token every 4 s: the third append is refused however slowly the machine runs the first
    # two (at 1/s, a loaded machine took a second between them and refilled one).
    r = await admin.put(
        "/v1/tenants/acme", json={"actors": {"append_rate": 0.25, "append_burst": 2}}
    )
    assert r.status_code == 200, r.text
    await append(acme, "carts", {"cart_id": "a1"}, {"cart_id": "a2"})
    refused = await acme.post("/v1/streams/carts/events", json={"cart_id": "a3"})
    problem = assert_problem(refused, 429)
    assert int(refused.headers["Retry-After"]) >= 1 and "append" in problem["detail"]
    await append(globex, "carts", *({"cart_id": f"g{i}"} for i in range(5)))
    counts = (await client("operator").get("/v1/actors")).json()["items"]
    instances = {a["name"]: a["counts"]["instances"] for a in counts}
    assert instances["cart"] == 2 + 5  # a3 was never written
    await asyncio.sleep(float(refused.headers["Retry-After"]))
    await append(acme, "carts", {"cart_id": "a3"})  # a token is there again
