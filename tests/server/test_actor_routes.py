"""The actor routes (`/v1/actors...`, `/v1/workers`) and the actor metrics on `/metrics`, in
process on SQLite and PostgreSQL, with events appended over HTTP and processed by the worker the
server runs: definitions and counts, instance state after processing, dead letters of a failing
actor, queue depth and in flight, tenant isolation, roles, paging, and problem JSON for every
error. Waits poll the API with a generous bound; no sleep stands in for a synchronisation."""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.server.conftest import STALE_AFTER, WORKER, Start
from tests.server.test_errors import assert_problem
from tests.server.test_metrics_auth import _sample
from tests.server.test_openapi import _validator


async def until(
    c: httpx.AsyncClient, path: str, done: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """GET `path` until `done(answer)`; fail after a generous bound, saying what was seen."""
    last = ""
    try:
        async with asyncio.timeout(30):
            while True:
                r = await c.get(path)
                last = r.text
                if r.status_code == 200:
                    body: dict[str, Any] = r.json()
                    if done(body):
                        return body
                await asyncio.sleep(0.02)  # a poll interval, not a synchronisation
    except TimeoutError:
        raise AssertionError(f"GET {path} never got there; last answer: {last}") from None


async def append(c: httpx.AsyncClient, stream: str, *events: dict[str, Any]) -> None:
    for e in events:
        r = await c.post(f"/v1/streams/{stream}/events", json=e)
        assert r.status_code == 202, r.text


def settled(body: dict[str, Any]) -> bool:
    return bool(body["queue_depth"] == 0)


def counts(body: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Actor name -> counts, from a `GET /v1/actors` answer."""
    return {a["name"]: a["counts"] for a in body["items"]}


def idle(body: dict[str, Any]) -> bool:
    """Nothing pending or in flight for any actor: every process() call has returned."""
    return all(c["pending"] + c["in_flight"] == 0 for c in counts(body).values())


async def test_actors_and_instances_after_processing(start: Start) -> None:
    _, client = await start()
    acme = client("acme")
    await append(
        acme,
        "carts",
        {"cart_id": "c1", "line": "a"},
        {"cart_id": "c1", "line": "b"},
        {"cart_id": "c2"},
    )
    c1 = await until(acme, "/v1/actors/cart/instances/c1", lambda b: b["state"] == {"items": 2})
    assert c1["tenant"] == "acme" and c1["actor"] == "cart" and c1["instance_id"] == "c1"
    assert c1["version"] == 2 and c1["worker_id"] == WORKER and c1["epoch"] >= 1
    assert c1["created_at"] > 0 and c1["dead_letters"] == [] and c1["dead_letter_count"] == 0
    await until(acme, "/v1/actors/cart/instances/c2", lambda b: b["state"] == {"items": 1})
    await until(acme, "/v1/actors/cart/instances/c1", settled)
    await until(acme, "/v1/actors/audit/instances/c2", settled)
    assert (await acme.get(c1["links"]["self"])).json()["state"] == {"items": 2}

    listed = (await acme.get("/v1/actors")).json()
    assert listed["tenant"] == "acme"
    by_name = {a["name"]: a for a in listed["items"]}
    assert sorted(by_name) == ["audit", "cart", "slow"]
    cart = by_name["cart"]
    assert cart["subscribe"] == ["carts"] and cart["key"] == "cart_id"
    assert cart["queue"] == {"mode": "fifo", "concurrency": 2, "group_by": "line"}
    assert cart["counts"] == {"instances": 2, "pending": 0, "in_flight": 0, "dead_letters": 0}
    assert by_name["audit"]["backoff"]["max_attempts"] == 2
    assert by_name["slow"]["counts"]["instances"] == 0

    page = (await acme.get("/v1/actors/cart/instances")).json()
    assert [i["instance_id"] for i in page["items"]] == ["c1", "c2"]
    assert page["next_cursor"] is None
    assert page["items"][0]["queue_depth"] == 0 and page["items"][0]["worker_id"] == WORKER


async def test_a_failing_actor_leaves_dead_letters_and_counts_errors(start: Start) -> None:
    _, client = await start()
    acme = client("acme")
    await append(acme, "carts", {"cart_id": "c9", "bad": True}, {"cart_id": "c9"})
    audit = await until(
        acme, "/v1/actors/audit/instances/c9", lambda b: b["dead_letter_count"] == 1 and settled(b)
    )
    (dead,) = audit["dead_letters"]
    assert dead["error"] == "RuntimeError: refused" and dead["attempts"] == 2
    assert dead["data"] == {"cart_id": "c9", "bad": True} and dead["stream"] == "carts"
    assert dead["dead_at"] > 0 and dead["event_id"] >= 1
    audit_counts = counts((await acme.get("/v1/actors")).json())["audit"]
    assert audit_counts["dead_letters"] == 1 and audit_counts["pending"] == 0
    await until(acme, "/v1/actors/cart/instances/c9", lambda b: b["state"] == {"items": 2})
    await until(acme, "/v1/actors/cart/instances/c9", settled)

    text = (await client("scraper").get("/metrics")).text
    assert _sample(text, 'yoke_actor_process_errors_total{actor="audit"}') == 2
    assert _sample(text, 'yoke_actor_process_total{actor="audit"}') == 1
    assert _sample(text, 'yoke_actor_process_total{actor="cart"}') == 2


async def test_queue_depth_and_in_flight_while_process_runs(start: Start) -> None:
    server, client = await start()
    acme = client("acme")
    await append(acme, "slow", *({"k": "s1", "n": n} for n in range(3)))
    held = await until(acme, "/v1/actors/slow/instances/s1", lambda b: b["in_flight"] >= 1)
    # Concurrency 1: one process() runs, the others wait (claimed ahead, or still pending).
    assert held["queue_depth"] == 3 and held["pending"] + held["in_flight"] == 3
    slow = counts((await acme.get("/v1/actors")).json())["slow"]
    assert slow["pending"] + slow["in_flight"] == 3
    text = (await client("scraper").get("/metrics")).text
    assert _sample(text, 'yoke_queue_depth{actor="slow",instance="s1",tenant="acme"}') == 3
    server.app.gate.set()  # type: ignore[attr-defined]
    await until(acme, "/v1/actors/slow/instances/s1", settled)
    text = (await client("scraper").get("/metrics")).text
    assert _sample(text, 'yoke_actor_process_total{actor="slow"}') == 3
    assert 'instance="s1"' not in text  # a drained instance leaves the depth gauge


async def test_pending_events_without_a_worker(start: Start) -> None:
    """With no worker running, rows stay pending and unowned; the gauges still come from the
    store, read when scraped (no heartbeat refreshes them here)."""
    _, client = await start(worker=False)
    op = client("operator")
    await append(op, "carts", {"cart_id": "p1"}, {"cart_id": "p1"})
    p1 = (await op.get("/v1/actors/cart/instances/p1")).json()
    assert p1["tenant"] == "default" and p1["worker_id"] is None
    assert (p1["queue_depth"], p1["pending"], p1["in_flight"]) == (2, 2, 0)
    text = (await client("scraper").get("/metrics")).text
    assert _sample(text, 'yoke_queue_depth{actor="cart",instance="p1",tenant="default"}') == 2
    assert _sample(text, "yoke_runtime_workers") == 0
    workers = (await op.get("/v1/workers")).json()
    assert workers["items"] == []
    # An instance id is a key value, "/" and all; its link finds it.
    await append(op, "carts", {"cart_id": "org/7 ü?"})
    (linked,) = [
        i["links"]["self"]
        for i in (await op.get("/v1/actors/cart/instances")).json()["items"]
        if i["instance_id"] == "org/7 ü?"
    ]
    assert (await op.get(linked)).json()["pending"] == 1


async def test_metrics_are_one_exposition_with_both_parts(start: Start) -> None:
    _, client = await start()
    acme = client("acme")
    await append(acme, "carts", *({"cart_id": f"m{i}"} for i in range(5)))
    await until(acme, "/v1/actors", lambda b: idle(b) and counts(b)["cart"]["instances"] == 5)
    await acme.post("/v1/starts", json={"workflow": "nope"})
    text = (await client("scraper").get("/metrics")).text
    assert _sample(text, 'yoke_actor_process_total{actor="cart"}') == 5
    assert _sample(text, 'yoke_actor_process_total{actor="audit"}') == 5
    assert 'yoke_actor_process_errors_total{actor="cart"}' not in text
    assert _sample(text, "yoke_runtime_workers") == 1
    assert _sample(text, 'yoke_starts_total{outcome="invalid"}') == 1
    families = [ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE ")]
    assert len(families) == len(set(families))  # one exposition: no family twice
    assert {
        "yoke_actor_process_total",
        "yoke_actor_process_errors_total",
        "yoke_queue_depth",
        "yoke_runtime_workers",
        "yoke_starts_total",
        "yoke_executions_running",
    } <= set(families)


async def test_an_instance_of_another_tenant_is_absent(start: Start) -> None:
    _, client = await start()
    acme, globex, op = client("acme"), client("globex"), client("operator")
    await append(acme, "carts", {"cart_id": "c1"})
    await until(acme, "/v1/actors/cart/instances/c1", lambda b: b["state"] == {"items": 1})
    for path in (
        "/v1/actors/cart/instances/c1",
        "/v1/actors/cart/instances/c1?tenant=acme",
    ):
        body = assert_problem(await globex.get(path), 404)
        assert body["detail"] == "no instance 'c1' of actor 'cart'"
    assert (await globex.get("/v1/actors/cart/instances")).json()["items"] == []
    assert (await globex.get("/v1/actors/cart/instances?tenant=acme")).json()["items"] == []
    theirs = (await globex.get("/v1/actors?tenant=acme")).json()
    assert theirs["tenant"] == "acme"
    assert all(c["instances"] == 0 for c in counts(theirs).values())  # as if it had nothing
    assert counts((await globex.get("/v1/actors")).json())["cart"]["instances"] == 0
    # OPERATOR sees every tenant; an instance is addressed by its tenant.
    assert (await op.get("/v1/actors/cart/instances/c1?tenant=acme")).status_code == 200
    assert_problem(await op.get("/v1/actors/cart/instances/c1"), 404)  # tenant "default"
    every = (await op.get("/v1/actors/cart/instances")).json()["items"]
    assert [(i["tenant"], i["instance_id"]) for i in every] == [("acme", "c1")]
    assert (await op.get("/v1/actors/cart/instances?tenant=globex")).json()["items"] == []
    ops_view = (await op.get("/v1/actors")).json()
    assert ops_view["tenant"] is None
    assert counts(ops_view)["cart"]["instances"] == 1


async def test_workers_need_operator_or_admin(start: Start) -> None:
    _, client = await start()
    acme = client("acme")
    assert_problem(await acme.get("/v1/workers"), 403)
    await append(acme, "carts", {"cart_id": "w1"})
    await until(acme, "/v1/actors/cart/instances/w1", lambda b: b["state"] == {"items": 1})
    for who in ("operator", "admin"):
        body = (await client(who).get("/v1/workers")).json()
        assert body["stale_after"] == STALE_AFTER
        (w,) = body["items"]
        assert w["worker_id"] == WORKER and w["status"] == "live" and w["pid"] == os.getpid()
        assert w["instances"] == 2  # cart/w1 and audit/w1, both created by this worker
        assert w["hostname"] and w["heartbeat_at"] >= w["started_at"] and w["stopped_at"] is None


async def test_instances_come_in_pages(start: Start) -> None:
    _, client = await start(worker=False)
    op = client("operator")
    await append(op, "carts", *({"cart_id": f"i{n}"} for n in range(5)))
    seen: list[str] = []
    path = "/v1/actors/cart/instances?limit=2"
    while True:
        page = (await op.get(path)).json()
        seen += [i["instance_id"] for i in page["items"]]
        if page["next_cursor"] is None:
            break
        assert len(page["items"]) == 2
        path = f"/v1/actors/cart/instances?limit=2&cursor={page['next_cursor']}"
    assert seen == [f"i{n}" for n in range(5)]


def _cursor(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


BAD: list[tuple[str, str, int]] = [
    ("acme", "/v1/actors/nope/instances", 404),
    ("acme", "/v1/actors/nope/instances/x", 404),
    ("acme", "/v1/actors/cart/instances/never-seen", 404),
    ("acme", "/v1/actors/%00/instances", 422),
    ("acme", "/v1/actors/cart/instances/%00", 422),
    ("acme", "/v1/actors/cart/instances?limit=0", 422),
    ("acme", "/v1/actors/cart/instances?limit=x", 422),
    ("acme", "/v1/actors/cart/instances?limit=5000", 422),
    ("acme", "/v1/actors/cart/instances?limit=1e3", 422),
    ("acme", "/v1/actors/cart/instances?cursor=", 422),
    ("acme", "/v1/actors/cart/instances?cursor=%25%25", 422),
    *(
        ("acme", "/v1/actors/cart/instances?cursor=" + _cursor(raw), 422)
        for raw in (b"[1,2]", b"nope", b'["a",""]', b'["a"]', b"\xff\xfe")
    ),
    ("acme", "/v1/actors?tenant=", 422),
    ("acme", "/v1/actors?tenant=%00", 422),
    ("acme", "/v1/actors/cart/instances/x?tenant=" + "t" * 300, 422),
    ("acme", "/v1/workers", 403),
    ("anonymous", "/v1/actors", 401),
    ("anonymous", "/v1/workers", 401),
]


@pytest.mark.parametrize(("who", "path", "status"), BAD)
async def test_every_error_is_a_problem(start: Start, who: str, path: str, status: int) -> None:
    _, client = await start(worker=False)
    assert_problem(await client(who).get(path), status)


async def test_answers_match_their_schemas(start: Start) -> None:
    _, client = await start()
    op = client("operator")
    doc = (await op.get("/openapi.json")).json()
    await append(op, "carts", {"cart_id": "s1", "bad": True})
    await until(op, "/v1/actors/audit/instances/s1", lambda b: b["dead_letter_count"] == 1)
    checks = [
        ("/v1/actors", await op.get("/v1/actors")),
        ("/v1/actors/{name}/instances", await op.get("/v1/actors/audit/instances?limit=1")),
        (
            "/v1/actors/{name}/instances/{instance_id}",
            await op.get("/v1/actors/audit/instances/s1"),
        ),
        ("/v1/actors/{name}/instances/{instance_id}", await op.get("/v1/actors/audit/instances/x")),
        ("/v1/workers", await op.get("/v1/workers")),
        ("/v1/workers", await client("acme").get("/v1/workers")),
    ]
    for path, r in checks:
        assert _validator(doc, path, "get", r.status_code).is_valid(r.json()), (path, r.text)
