"""An event that no instance can take is refused before anything is written: on a stream with
subscribers, each subscriber's key must be a string or an integer (422 otherwise); a stream
nobody subscribes to still takes any object."""

from __future__ import annotations

from typing import Any

import pytest

from tests.server.conftest import Start
from tests.server.test_errors import assert_problem


@pytest.mark.parametrize(
    "event",
    [
        {},
        {"cart_id": None},
        {"cart_id": {"id": 1}},
        {"cart_id": [1]},
        {"cart_id": True},
        {"cart_id": 1.5},
        {"other": "c1"},
    ],
)
async def test_an_event_without_a_usable_key_is_422_and_writes_nothing(
    start: Start, event: dict[str, Any]
) -> None:
    _, client = await start(worker=False)
    acme = client("acme")
    r = await acme.post("/v1/streams/carts/events", json=event)
    assert "as a string or an integer" in assert_problem(r, 422)["detail"]
    actors = (await acme.get("/v1/actors")).json()["items"]
    assert all(a["counts"]["instances"] == 0 for a in actors), actors


async def test_string_and_integer_keys_are_taken(start: Start) -> None:
    _, client = await start(worker=False)
    acme = client("acme")
    for key in ("c1", 42, -3):
        assert (
            await acme.post("/v1/streams/carts/events", json={"cart_id": key})
        ).status_code == 202
    page = (await acme.get("/v1/actors/cart/instances")).json()
    assert sorted(i["instance_id"] for i in page["items"]) == ["-3", "42", "c1"]


async def test_a_stream_without_subscribers_takes_any_object(start: Start) -> None:
    _, client = await start(worker=False)
    r = await client("acme").post("/v1/streams/nobody-listens/events", json={"cart_id": None})
    assert r.status_code == 202
