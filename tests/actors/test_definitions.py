"""Definitions: checked at definition time; routing (fan-out), groups, selectors, backoff."""

from __future__ import annotations

import json
from typing import Any

import pytest

from yoke.actors import ActorCtx, ActorRegistry, Backoff, Event, Queue
from yoke.actors.definitions import SINGLETON, select_from_config
from yoke.errors import BadType, BadValue
from yoke.store.actor_records import Target


async def noop(ctx: ActorCtx, event: Event) -> None:
    return None


def ev(i: int, data: Any) -> Event:
    return Event(
        id=i, event_id=i, stream="s", tenant="t", data=data, group_id="", attempt=1, appended_at=0.0
    )


def test_queue_checks() -> None:
    assert Queue().mode == "fifo" and Queue().concurrency == 1
    with pytest.raises(BadValue):
        Queue(mode="lifo")  # type: ignore[arg-type]
    with pytest.raises(BadValue):
        Queue(concurrency=0)
    with pytest.raises(BadType):
        Queue(concurrency=True)
    with pytest.raises(BadValue):
        Queue(mode="custom")
    with pytest.raises(BadValue):
        Queue(select={"order_by": "data.x"})
    with pytest.raises(BadType):
        Queue(group_by=3)  # type: ignore[arg-type]
    q = Queue(mode="custom", select={"order_by": "data.p", "desc": True})
    assert callable(q.select)


def test_group_of() -> None:
    assert Queue().group_of({"a": 1}) == ""
    assert Queue(group_by="line").group_of({"line": 7}) == "7"
    assert Queue(group_by="a.b").group_of({"a": {"b": "x"}}) == "x"
    assert Queue(group_by="line").group_of({}) == ""
    assert Queue(group_by=lambda d: d["n"] % 2).group_of({"n": 3}) == "1"


def test_backoff() -> None:
    b = Backoff()
    assert b.delay(1) == pytest.approx(0.1)
    assert b.delay(2) == pytest.approx(0.2)
    assert b.delay(9) == pytest.approx(25.6)
    assert b.delay(10) == 30.0 and b.delay(10_000) == 30.0
    assert not b.exhausted(10_000)
    assert Backoff(max_attempts=3).exhausted(3)
    with pytest.raises(BadValue):
        Backoff(factor=0.5)
    with pytest.raises(BadValue):
        Backoff(max_attempts=0)


def test_registry_routes_to_subscribers_by_key() -> None:
    reg = ActorRegistry()
    reg.actor(subscribe=["carts"], key="cart_id", queue=Queue(group_by="line"))(noop)
    reg.actor("audit", subscribe=["carts", "orders"])(noop)
    reg.actor("orders", subscribe=["orders"], key="order.id")(noop)
    assert reg.route("carts", {"cart_id": 5, "line": "a"}) == (
        Target(actor="noop", instance_id="5", group_id="a"),
        Target(actor="audit", instance_id=SINGLETON, group_id=""),
    )
    # An event must carry every subscriber's key, as a string or an integer: anything else
    # names no instance, and the event is refused rather than stored to route nowhere.
    for bad in (
        {"line": "a"},
        {"cart_id": None},
        {"cart_id": {"x": 1}},
        {"cart_id": [1]},
        {"cart_id": True},
        {"cart_id": 1.5},
    ):
        with pytest.raises(BadValue, match="'cart_id' as a string or an integer"):
            reg.route("carts", bad)
    assert reg.route("carts", {"cart_id": -7})[0].instance_id == "-7"
    assert reg.route("orders", {"order": {"id": "o1"}})[1] == Target(
        actor="orders", instance_id="o1", group_id=""
    )
    assert reg.route("nobody", {}) == ()
    e = reg.new_event("carts", {"cart_id": 1}, tenant="acme")
    assert json.loads(e.data) == {"cart_id": 1} and e.tenant == "acme"


def test_new_events_is_new_event_for_each_item() -> None:
    reg = ActorRegistry()
    reg.actor(subscribe=["carts"], key="cart_id", queue=Queue(group_by="line"))(noop)
    reg.actor("audit", subscribe=["carts"])(noop)
    items = [{"cart_id": 1, "line": "a"}, {"cart_id": "b", "line": "b"}, {"cart_id": 2}]
    assert reg.new_events("carts", items, tenant="acme") == [
        reg.new_event("carts", d, tenant="acme") for d in items
    ]
    assert reg.new_events("carts", [], tenant="acme") == []
    with pytest.raises(BadType):
        reg.new_events("", [], tenant="acme")
    with pytest.raises(BadType):
        reg.new_events("carts", [], tenant="")


def test_an_event_no_store_could_route_is_refused_before_anything_is_built() -> None:
    """Instance ids and groups come from event data; one a store could not keep (or the API
    not address) refuses the whole batch as `BadValue`, as do a group_by that raises, data
    nested too deeply to encode, and a stream or tenant no store keeps."""
    reg = ActorRegistry()
    reg.actor(subscribe=["carts"], key="cart_id", queue=Queue(group_by="line"))(noop)

    def boom(data: Any) -> str:
        raise KeyError("region")

    reg.actor("regions", subscribe=["orders"], queue=Queue(group_by=boom))(noop)
    good = {"cart_id": "c1"}
    for bad in ("a\x00b", "\ud800", "", "k" * 257):
        with pytest.raises(BadValue, match="cart_id"):
            reg.new_events("carts", [good, {"cart_id": bad}], tenant="acme")
    for bad in ("\x00", "\udfff", "g" * 257):
        with pytest.raises(BadValue, match="line"):
            reg.new_events("carts", [good, {"cart_id": "c2", "line": bad}], tenant="acme")
    with pytest.raises(BadValue, match="group_by"):
        reg.new_events("orders", [{}], tenant="acme")
    deep: Any = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(BadValue, match="nested"):
        reg.new_events("carts", [{"cart_id": "c1", "n": deep}], tenant="acme")
    with pytest.raises(BadValue, match="stream"):
        reg.new_events("carts\x00", [good], tenant="acme")
    with pytest.raises(BadValue, match="tenant"):
        reg.new_events("carts", [good], tenant="t" * 257)
    # the limits themselves are fine: 256 characters, any valid Unicode, an empty group
    [e] = reg.new_events("carts", [{"cart_id": "k" * 256, "line": "é" * 256}], tenant="acme")
    assert e.targets[0].instance_id == "k" * 256 and e.targets[0].group_id == "é" * 256
    [e] = reg.new_events("carts", [{"cart_id": "ü", "line": ""}], tenant="acme")
    assert e.targets[0].group_id == ""


def test_registry_refuses_bad_definitions() -> None:
    reg = ActorRegistry()
    with pytest.raises(BadType):
        reg.actor(subscribe="carts")
    with pytest.raises(BadValue):
        reg.actor(subscribe=[])

    def not_async(ctx: ActorCtx, event: Event) -> None:
        return None

    with pytest.raises(BadType):
        reg.actor(subscribe=["s"])(not_async)  # type: ignore[arg-type]
    reg.actor(subscribe=["s"])(noop)
    with pytest.raises(BadValue):
        reg.actor(subscribe=["s"])(noop)
    with pytest.raises(BadValue):
        reg.new_event("s", {"x": float("nan")}, tenant="t")


def test_select_from_config() -> None:
    events = [ev(1, {"p": 2}), ev(2, {"p": 9}), ev(3, {}), ev(4, {"p": 9})]
    assert select_from_config({"order_by": "data.p", "desc": True})(events) is events[1]
    assert select_from_config({"order_by": "data.p"})(events) is events[0]
    assert select_from_config({"order_by": "id", "desc": True})(events) is events[3]
    assert select_from_config({"order_by": "data.zz"})(events) is events[0]
    assert select_from_config({"order_by": "data.p"})([]) is None
    with pytest.raises(BadValue):
        select_from_config({"order_by": "nope"})
    with pytest.raises(BadValue):
        select_from_config({"order_by": "id", "limit": 1})
