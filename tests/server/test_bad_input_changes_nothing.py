"""Bad input to the actor routes and their neighbours: a clear 4xx problem, and nothing written.

The inputs, on a real in-process server on SQLite and PostgreSQL: an event whose key holds a NUL
or a lone surrogate (a database refuses it, or stores it and then fails every claim of its
owner), a key too long for PostgreSQL's index (not an outage: a retry cannot help), a body nested
deeply enough to overflow the parser's recursion, and query numbers Python's `int()` reads but no
client means ("1_0", full-width digits). The last test is of the app's batch append, which the
portal stands on: a rejected batch must write none of its events.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from tests.server.conftest import Serve, Start
from tests.server.test_actor_routes import until
from tests.server.test_errors import assert_problem
from yoke.errors import BadValue, StoreUnavailable

EVENTS = "/v1/streams/carts/events"


async def nothing_stored(op: httpx.AsyncClient) -> None:
    """No instance, no pending row, for any actor of any tenant."""
    body = (await op.get("/v1/actors")).json()
    for actor in body["items"]:
        assert actor["counts"]["instances"] == 0 and actor["counts"]["pending"] == 0, actor
    assert (await op.get("/v1/actors/cart/instances")).json()["items"] == []


def nested(depth: int) -> bytes:
    return b'{"cart_id": "deep", "n": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"


UNROUTABLE: list[tuple[str, bytes]] = [
    ("NUL in the key", b'{"cart_id": "a\\u0000b"}'),
    ("lone surrogate in the key", b'{"cart_id": "\\ud800"}'),
    ("key past PostgreSQL's index row", b'{"cart_id": "' + b"k" * 3000 + b'"}'),
    ("key longer than the API addresses", b'{"cart_id": "' + b"k" * 257 + b'"}'),
    ("empty key", b'{"cart_id": ""}'),
    ("NUL in a field-named group", b'{"cart_id": "c1", "line": "\\u0000"}'),
    ("lone surrogate in a group", b'{"cart_id": "c1", "line": "\\udfff"}'),
]


@pytest.mark.parametrize(("case", "body"), UNROUTABLE, ids=[c for c, _ in UNROUTABLE])
async def test_an_event_that_cannot_be_routed_is_422_and_writes_nothing(
    start: Start, case: str, body: bytes
) -> None:
    _, client = await start(worker=False)
    acme, op = client("acme"), client("operator")
    for headers in ({}, {"Idempotency-Key": f"k-{len(body)}"}):
        problem = assert_problem(await acme.post(EVENTS, content=body, headers=headers), 422)
        assert "cart_id" in problem["detail"] or "line" in problem["detail"], problem
    await nothing_stored(op)


async def test_a_poisoned_key_never_reaches_the_worker(start: Start) -> None:
    """On SQLite a lone surrogate used to be stored as an instance id no read could decode:
    every later claim and heartbeat of the worker failed, so no event was processed again."""
    _, client = await start(worker=True)
    acme = client("acme")
    assert_problem(await acme.post(EVENTS, content=b'{"cart_id": "\\udc80"}'), 422)
    assert (await acme.post(EVENTS, json={"cart_id": "after"})).status_code == 202
    await until(acme, "/v1/actors/cart/instances/after", lambda b: b["state"] == {"items": 1})


async def test_odd_but_storable_keys_are_accepted_and_addressable(start: Start) -> None:
    _, client = await start(worker=False)
    acme = client("acme")
    for key in ("k" * 256, "org/7 ü?", "😀", "%2F", " "):
        event = {"cart_id": key, "x": "\u0000 and \ud800 in data: stored escaped, harmless"}
        r = await acme.post(EVENTS, content=json.dumps(event))
        assert r.status_code == 202, (key, r.text)
        listed = (await acme.get("/v1/actors/cart/instances?limit=1000")).json()["items"]
        (link,) = [i["links"]["self"] for i in listed if i["instance_id"] == key]
        assert (await acme.get(link)).json()["pending"] == 1


@pytest.mark.parametrize("key", [None, "deep"])
@pytest.mark.parametrize("depth", [201, 2_000, 100_000])
async def test_a_deeply_nested_event_is_400(start: Start, depth: int, key: str | None) -> None:
    _, client = await start(worker=False)
    acme = client("acme")
    headers = {"Idempotency-Key": key} if key else {}
    body = assert_problem(await acme.post(EVENTS, content=nested(depth), headers=headers), 400)
    assert "nested" in body["detail"]
    await nothing_stored(client("operator"))
    assert (await acme.post(EVENTS, content=nested(200), headers=headers)).status_code == 202


async def test_a_deep_start_with_an_idempotency_key_is_400(serve: Serve) -> None:
    """The key's fingerprint parsed the body first, and its RecursionError escaped as a 503."""
    _, client = await serve()
    c = client("acme")
    deep = b'{"workflow": "echo", "input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert_problem(await c.post("/v1/starts", content=deep, headers={"Idempotency-Key": "d"}), 400)
    assert (await c.get("/v1/executions")).json()["items"] == []


NOT_PLAIN_NUMBERS = ["1_0", "%EF%BC%91", "%205", "5%20", "0x10", "1e2", "", "9" * 5000]


@pytest.mark.parametrize("raw", NOT_PLAIN_NUMBERS)
async def test_a_paging_limit_is_a_plain_decimal(start: Start, raw: str) -> None:
    _, client = await start(worker=False)
    op = client("operator")
    assert_problem(await op.get(f"/v1/actors/cart/instances?limit={raw}"), 422)
    assert_problem(await op.get(f"/v1/executions?limit={raw}"), 422)
    assert (await op.get("/v1/actors/cart/instances?limit=%2B10")).status_code == 200


@pytest.mark.parametrize("raw", ["1_0", "%EF%BC%91", "%201", "infinity", "0x1", "1.", "."])
async def test_a_wait_is_a_plain_decimal(serve: Serve, raw: str) -> None:
    _, client = await serve()
    c = client("acme")
    if raw == "1.":  # a decimal point with no fraction is still a plain number
        assert (await c.post(f"/v1/starts?wait={raw}", json={"workflow": "echo"})).is_success
        return
    assert_problem(await c.post(f"/v1/starts?wait={raw}", json={"workflow": "echo"}), 422)
    assert (await c.get("/v1/executions")).json()["items"] == []


async def test_the_store_unavailable_is_503_on_every_actor_route(
    start: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, client = await start(worker=False)
    op = client("operator")

    async def down(*args: object, **kwargs: object) -> Any:
        raise StoreUnavailable("PostgreSQL unavailable: connection refused")

    monkeypatch.setattr(server.app, "append", down)
    monkeypatch.setattr(server.app, "append_once", down)  # the route with an Idempotency-Key
    for name in ("actors", "instances", "instance", "workers"):
        monkeypatch.setattr(server.app.actors.inspect, name, down)
    for method, path in [
        ("POST", EVENTS),
        ("GET", "/v1/actors"),
        ("GET", "/v1/actors/cart/instances"),
        ("GET", "/v1/actors/cart/instances/c1"),
        ("GET", "/v1/workers"),
    ]:
        r = await op.request(method, path, json={"cart_id": "c1"} if method == "POST" else None)
        body = assert_problem(r, 503)
        assert body["title"] == "Store unavailable" and r.headers["retry-after"] == "1"
    # A kept answer is only a success: after the outage the same key appends afresh.
    key = {"Idempotency-Key": "outage"}
    assert_problem(await op.post(EVENTS, json={"cart_id": "c1"}, headers=key), 503)
    monkeypatch.undo()
    assert (await op.post(EVENTS, json={"cart_id": "c1"}, headers=key)).status_code == 202


# The runtime's registry refuses such a batch as BadValue before any event is built
# (`definitions._route`). Before, PostgreSQL failed the batch with StoreError, an untranslated
# UnicodeEncodeError, or (a key past the index row limit) StoreUnavailable, as if a retry could
# help; SQLite stored the batch whole, and a lone surrogate then failed every claim of the
# worker.
@pytest.mark.parametrize("bad", ["a\x00b", "\ud800", "k" * 3000])
async def test_a_rejected_batch_append_writes_none_of_its_events(start: Start, bad: str) -> None:
    server, client = await start(worker=False)
    batch = [{"cart_id": "good-1"}, {"cart_id": bad}, {"cart_id": "good-2"}]
    with pytest.raises(BadValue):
        await server.app.append_many("carts", batch, tenant="acme")
    await asyncio.sleep(0)
    await nothing_stored(client("operator"))
