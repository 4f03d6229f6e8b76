"""`GET /v1/executions/{id}?wait=` long-polls until the execution ends: it answers when the
execution ends, not at its bound; at the bound it answers the execution as it is (RUNNING);
it is one of the tenant's long-polls (429 past the cap, the place given back after); a finished
execution answers at once; the bound is checked like a start's (422 past 60 s)."""

from __future__ import annotations

import asyncio
import time

from tests.actors.executors import until
from tests.server.conftest import Serve
from tests.server.test_errors import assert_problem


async def test_a_waiting_read_answers_when_the_execution_ends(serve: Serve) -> None:
    server, client = await serve()
    acme = client("acme")
    r = await acme.post("/v1/starts?wait=5", json={"workflow": "hold"})
    assert r.status_code == 201, r.text
    path = f"/v1/executions/{r.json()['execution_id']}"
    t0 = time.monotonic()
    still = await acme.get(f"{path}?wait=0.3")
    assert still.json()["status"] == "RUNNING" and time.monotonic() - t0 >= 0.29
    waiting = asyncio.create_task(acme.get(f"{path}?wait=30"))
    await until(lambda: server.state.long_polls.held("acme") == 1)
    assert not waiting.done()
    server.app.gate.set()  # type: ignore[attr-defined]  # the workflow returns
    done = await asyncio.wait_for(waiting, 10)
    assert done.json()["status"] == "SUCCEEDED" and done.json()["output"] == "released"
    assert server.state.long_polls.held("acme") == 0
    t0 = time.monotonic()
    again = await acme.get(f"{path}?wait=30")  # ended: at once
    assert again.json()["status"] == "SUCCEEDED" and time.monotonic() - t0 < 5


async def test_a_waiting_read_is_one_of_the_tenants_long_polls(serve: Serve) -> None:
    server, client = await serve()
    server.state.long_polls.per_tenant = 1
    acme = client("acme")
    eid = (await acme.post("/v1/starts?wait=5", json={"workflow": "hold"})).json()["execution_id"]
    first = asyncio.create_task(acme.get(f"/v1/executions/{eid}?wait=30"))
    await until(lambda: server.state.long_polls.held("acme") == 1)
    assert_problem(await acme.get(f"/v1/executions/{eid}?wait=30"), 429)
    assert (await acme.get(f"/v1/executions/{eid}")).status_code == 200  # no wait: no cap
    assert (await client("globex").get(f"/v1/executions/{eid}?wait=0.1")).status_code == 404
    server.app.gate.set()  # type: ignore[attr-defined]
    assert (await asyncio.wait_for(first, 10)).json()["status"] == "SUCCEEDED"
    assert_problem(await acme.get(f"/v1/executions/{eid}?wait=61"), 422)
