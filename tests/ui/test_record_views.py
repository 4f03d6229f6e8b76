"""The dashboard's record views, in process on both stores: an actor's instances and one
instance (queue depth, in flight, dead letters, owner worker) with its JSON twin and a tenant
kept to its own; the Workers view lists executors and the executor mode; an execution links to
its children and to the runs restarted or resumed from it, and they back to it; the Actors page
lists the tenants' weights and fleet-wide caps, a tenant only its own."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.server.conftest import WORKER, Client, Start, make_app, running
from tests.server.test_actor_routes import append, settled, until
from yoke.server import Server, TokenBook
from yoke.store.actor_records import ExecutorRow


async def test_an_actors_instances_and_one_instance_page(start: Start) -> None:
    _, client = await start()
    acme = client("acme")
    await append(acme, "carts", {"cart_id": "c/1", "line": "a"}, {"cart_id": "c2", "bad": 1})
    c1 = await until(acme, "/v1/actors/cart/instances/c%2F1?tenant=acme", settled)
    await until(acme, "/v1/actors/audit/instances/c2", lambda b: b["dead_letter_count"] == 1)
    listing = (await acme.get("/ui/actors/cart")).text
    assert 'href="/ui/actors/cart/instances/c%2F1?tenant=acme"' in listing
    assert "<td>c2</td>" not in listing and ">c2</a>" in listing
    page = (await acme.get("/ui/actors/cart/instances/c%2F1?tenant=acme")).text
    assert f'<dd id="owner">{WORKER}' in page and f"(epoch {c1['epoch']})" in page
    assert '<dd id="depth">0</dd>' in page and '<dd id="in-flight">0</dd>' in page
    assert '"items": 1' in page  # its state
    dead = (await acme.get("/ui/actors/audit/instances/c2")).text
    assert '<dd id="dead">1</dd>' in dead and "refused" in dead  # the dead letter's error
    # Another tenant: the list is empty, the instance absent, as in the API.
    globex = client("globex")
    assert "No instances of cart" in (await globex.get("/ui/actors/cart?tenant=acme")).text
    hidden = (await globex.get("/ui/actors/cart/instances/c%2F1?tenant=acme")).text
    assert "no instance" in hidden and "owner" not in hidden  # the region says absent
    assert (await globex.get("/v1/actors/cart/instances/c%2F1?tenant=acme")).status_code == 404
    assert "no actor" in (await acme.get("/ui/actors/nosuch")).text


async def test_the_workers_view_lists_executors_and_the_mode(start: Start) -> None:
    server, client = await start()
    store = server.app.actors._require()
    now = server.app.clock.wall()
    forget = server.app.actors.inspect.forget_after
    ops = client("operator")
    inline = (await ops.get("/ui/workers")).text
    assert "this server's own worker: inline" in inline and "No executor process" in inline
    # Another worker, started with --executors process, recorded one of its executors.
    await store.fleet.register_worker("elsewhere", hostname="h2", pid=9, now=now)
    row = ExecutorRow(worker_id="elsewhere", tenant="acme", pid=4242, state="READY",
                      started_at=now, boot_ms=301.90996900000755, dispatches=7,
                      active_dispatch=1, crashes=2, isolation="process+rlimit",
                      stop_reason=None, updated_at=now)  # fmt: skip
    await store.executors.record_executors([row])
    # Two workers that left: one just now, one longer ago than `forget_after`.
    await store.fleet.register_worker("left-now", hostname="h3", pid=10, now=now)
    await store.fleet.stop_worker("left-now", now=now)
    await store.fleet.register_worker("left-long-ago", hostname="h4", pid=11, now=now - forget - 60)
    await store.fleet.stop_worker("left-long-ago", now=now - forget - 1)
    server.dashboard.hub.bump()  # a new version: the Workers region is rendered again
    page = (await ops.get("/ui/workers")).text
    assert '<table id="executors">' in page and "<td>4242</td>" in page
    assert "<td>301.9 ms</td>" in page and "301.909" not in page
    assert "<h2>Executors</h2>" in page  # no mode claimed for other workers' executors
    assert "<td>left-now</td>" in page and "left-long-ago" not in page
    listed = [w["worker_id"] for w in (await ops.get("/v1/workers")).json()["items"]]
    assert "left-now" in listed and "left-long-ago" not in listed
    over = (await ops.get("/v1/overview")).json()
    assert over["executor_mode"] == "inline" and over["executors_live"] == 1
    refused = (await client("acme").get("/ui/workers")).text
    assert "lacks role" in refused and "4242" not in refused


async def test_the_actors_page_shows_tenant_weights_each_tenant_only_its_own(
    start: Start,
) -> None:
    server, client = await start()
    admin, ops = client("admin"), client("operator")
    for tenant, body in (("acme", {"weight": 3.0}), ("globex", {"actors": {"max_running": 2}})):
        assert (await admin.put(f"/v1/tenants/{tenant}", json=body)).status_code == 200
    server.dashboard.hub.bump()  # a new version: the Actors region is rendered again
    page = (await ops.get("/ui/actors")).text
    assert '<table id="tenant-settings">' in page
    assert "<td>acme</td><td>3.0</td><td>(default)</td><td>root</td>" in page
    assert "<td>globex</td><td>(default)</td><td>2</td><td>root</td>" in page
    mine = (await client("acme").get("/ui/actors")).text
    assert "<td>acme</td><td>3.0</td>" in mine and "globex" not in mine


@pytest.fixture
async def served(database_url: str, tokens_file: Path) -> AsyncIterator[tuple[Server, Client]]:
    server = Server(make_app(database_url), tokens=TokenBook.from_file(tokens_file))
    async with contextlib.AsyncExitStack() as stack:
        yield server, await stack.enter_async_context(running(server))


async def test_executions_link_children_and_reruns_both_ways(
    served: tuple[Server, Client],
) -> None:
    _, client = served
    acme = client("acme")
    r = await acme.post("/v1/starts?wait=10", json={"workflow": "steps", "input": {"fail": 1}})
    parent = r.json()["execution_id"]
    first = await until(acme, f"/v1/executions/{parent}/steps", lambda b: b["status"] == "FAILED")
    [child] = first["children"]
    assert child["workflow"] == "echo" and first["reruns"] == []
    again = await acme.post(f"/v1/executions/{parent}/restart?wait=10", json={})
    rerun = again.json()["execution_id"]
    detail = (await acme.get(f"/v1/executions/{parent}/steps")).json()
    assert [(x["execution_id"], x["kind"]) for x in detail["reruns"]] == [(rerun, "restart")]
    page = (await acme.get(f"/ui/executions/{parent}")).text
    assert f'href="/ui/executions/{child["execution_id"]}"' in page  # to its child
    assert f'href="/ui/executions/{rerun}"' in page  # to its restart
    back = (await acme.get(f"/ui/executions/{child['execution_id']}")).text
    assert f'href="/ui/executions/{parent}"' in back  # the child's parent
    later = (await acme.get(f"/ui/executions/{rerun}")).text
    assert f'href="/ui/executions/{parent}"' in later  # the restart's source
    hidden = (await client("globex").get(f"/ui/executions/{parent}")).text
    assert "no execution" in hidden and child["execution_id"] not in hidden
