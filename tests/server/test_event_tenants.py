"""`POST /v1/streams/{stream}/events?tenant=`: an OPERATOR or ADMIN appends for a tenant (an
ingest gateway); anyone else naming another tenant is refused (403) and nothing is written. In
process, on SQLite and PostgreSQL, events processed by the server's own worker."""

from __future__ import annotations

import httpx

from tests.server.conftest import Start
from tests.server.test_actor_routes import until

CART = "/v1/actors/cart/instances"


def quiet(body: dict[str, object]) -> bool:
    return body["queue_depth"] == 0


async def test_an_operator_appends_for_a_tenant_and_only_that_tenant_sees_it(
    start: Start,
) -> None:
    _, client = await start()
    ops, acme, globex = client("operator"), client("acme"), client("globex")
    r = await ops.post("/v1/streams/carts/events?tenant=acme", json={"cart_id": "c1", "line": "a"})
    assert r.status_code == 202, r.text
    assert r.json()["tenant"] == "acme"
    seen = await until(acme, f"{CART}/c1", quiet)
    assert seen["tenant"] == "acme" and seen["state"] == {"items": 1}
    # Not in the operator's own tenant, nor in globex's.
    assert (await ops.get(f"{CART}/c1")).status_code == 404
    assert (await globex.get(f"{CART}/c1")).status_code == 404
    assert (await globex.get(CART)).json()["items"] == []


async def test_a_plain_token_may_not_append_for_another_tenant(start: Start) -> None:
    _, client = await start()
    ops, acme = client("operator"), client("acme")
    r = await acme.post(
        "/v1/streams/carts/events?tenant=globex", json={"cart_id": "g1", "line": "a"}
    )
    assert r.status_code == 403, r.text
    assert r.headers["content-type"] == "application/problem+json"
    # Its own tenant, named or not, is its own.
    r = await acme.post("/v1/streams/carts/events?tenant=acme", json={"cart_id": "a1", "line": "a"})
    assert r.status_code == 202 and r.json()["tenant"] == "acme", r.text
    await until(acme, f"{CART}/a1", quiet)
    # Nothing was written for globex: no instance, no event counted in its tenant.
    assert (await ops.get(f"{CART}?tenant=globex")).json()["items"] == []
    actors = (await ops.get("/v1/actors?tenant=globex")).json()["items"]
    assert all(a["counts"]["instances"] == 0 for a in actors)


async def test_one_key_for_two_tenants_is_another_request_not_a_replay(start: Start) -> None:
    _, client = await start()
    ops = client("operator")
    event = {"cart_id": "k1", "line": "a"}
    key = {"Idempotency-Key": "gateway-42"}
    first = await ops.post("/v1/streams/carts/events?tenant=acme", json=event, headers=key)
    assert first.status_code == 202, first.text
    again = await ops.post("/v1/streams/carts/events?tenant=acme", json=event, headers=key)
    assert again.json() == first.json()  # a retry: the first answer
    other = await ops.post("/v1/streams/carts/events?tenant=globex", json=event, headers=key)
    assert other.status_code == 422, other.text  # never acme's answer given as globex's
    assert (await ops.get(f"{CART}?tenant=globex")).json()["items"] == []


async def test_a_tenant_name_is_checked_like_any_text(start: Start) -> None:
    _, client = await start()
    ops: httpx.AsyncClient = client("operator")
    r = await ops.post("/v1/streams/carts/events?tenant=a%00b", json={"cart_id": "x"})
    assert r.status_code == 422, r.text
