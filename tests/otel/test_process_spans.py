"""A `process()` call's span: `yoke.process`, one per call, with its actor, instance, tenant,
stream, event and attempt; an error status when it raised; the current span inside the call,
so the actor's own spans nest under it. On both stores (`app_url`), and a runner that sends
(executor processes) timed from the worker's side."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Collection
from typing import Any

import httpx
import pytest
from opentelemetry.trace import StatusCode

import yoke
from tests.actors.conftest import FAST, open_actor_store
from tests.otel.conftest import Spans
from yoke.actors import ActorCtx, ActorSettings, Event
from yoke.actors.ctx import InstanceStateCell
from yoke.actors.definitions import ActorDef
from yoke.actors.runner import Done
from yoke.actors.traced import TracedRunner, traced
from yoke.server import Server
from yoke.tracing import NO_TRACING


async def test_each_process_call_has_a_span(app_url: str, spans: Spans) -> None:
    app = yoke.App(
        app_url,
        actor_settings=ActorSettings(worker_id="w1", **FAST),
        tracing=spans.tracing,
    )
    tracer = spans.provider.get_tracer("test")
    done = asyncio.Event()

    @app.actor(subscribe=["orders"], key="order", backoff=yoke.Backoff(initial=0.01))
    async def billing(ctx: ActorCtx, event: Event) -> None:
        if event.attempt == 1:
            raise ValueError("the bank said no")
        with tracer.start_as_current_span("charge"):
            done.set()

    async with app.running():
        await app.append("orders", {"order": "o-17"}, tenant="acme")
        async with asyncio.timeout(20):
            await done.wait()
        calls = await spans.wait_for("yoke.process", 2)
    first, second = sorted(calls, key=lambda s: s.start_time or 0)
    for attempt, span in enumerate((first, second), start=1):
        attrs = dict(span.attributes or {})
        assert attrs["yoke.actor"] == "billing" and attrs["yoke.instance"] == "o-17"
        assert attrs["yoke.tenant"] == "acme" and attrs["yoke.stream"] == "orders"
        assert attrs["yoke.attempt"] == attempt and isinstance(attrs["yoke.event_id"], int)
        assert span.parent is None  # a trace of its own
    assert first.status.status_code is StatusCode.ERROR
    assert first.status.description == "ValueError: the bank said no"
    assert second.status.status_code is StatusCode.UNSET
    [charge] = spans.named("charge")
    assert charge.parent is not None and charge.parent.span_id == second.context.span_id


async def test_tracing_off_leaves_the_runner_as_it_is() -> None:
    assert traced(None, object(), NO_TRACING) is None  # type: ignore[arg-type]


class Sending:
    """A runner that sends its calls (as the executor pool does) and ends them when told."""

    sends = True

    def __init__(self, *, at_once: bool = False) -> None:
        self.at_once = at_once
        self.pending: list[Done] = []

    def claimable(self) -> Collection[str] | None:
        return None

    def ready(self, tenant: str) -> bool:
        return True

    def run(self, actor: ActorDef, cell: InstanceStateCell, event: Event) -> Awaitable[None]:
        raise AssertionError("not run")

    def send(self, actor: ActorDef, cell: InstanceStateCell, event: Event, done: Done) -> bool:
        if self.at_once:
            done(RuntimeError("died at once"))
        else:
            self.pending.append(done)
        return True


def _call(spans: Spans, runner: Sending, ended: list[Any]) -> None:
    actor: Any = type("A", (), {"name": "mailer"})()
    cell: Any = type("C", (), {"ref": type("R", (), {"instance_id": "i-1"})()})()
    event = Event(
        id=1,
        event_id=7,
        stream="mail",
        tenant="acme",
        data={},
        group_id="g",
        attempt=1,
        appended_at=0.0,
    )
    assert TracedRunner(runner, spans.tracing).send(actor, cell, event, ended.append)


@pytest.mark.parametrize("at_once", [False, True])
def test_a_sent_call_is_timed_until_its_executor_answers(spans: Spans, at_once: bool) -> None:
    runner = Sending(at_once=at_once)
    ended: list[Any] = []
    _call(spans, runner, ended)
    if not at_once:
        assert spans.named("yoke.process") == []  # still running in its executor
        runner.pending[0](None)
    [span] = spans.named("yoke.process")
    assert len(ended) == 1
    assert (span.attributes or {})["yoke.event_id"] == 7
    expected = StatusCode.ERROR if at_once else StatusCode.UNSET
    assert span.status.status_code is expected


async def test_an_append_over_http_is_a_child_of_the_callers_span(
    app_url: str, spans: Spans
) -> None:
    """The append is in the caller's trace (`yoke.append`); the calls it leads to are traces
    of their own (an event does not carry its trace context yet: docs/decisions.md, D20)."""
    app = yoke.App(
        app_url, actor_settings=ActorSettings(worker_id="w1", **FAST), tracing=spans.tracing
    )
    done = asyncio.Event()

    @app.actor(subscribe=["orders"], key="order")
    async def billing(ctx: ActorCtx, event: Event) -> None:
        done.set()

    server = Server(app, tokens=None)
    async with server.lifespan():
        transport = httpx.ASGITransport(app=server, client=("127.0.0.1", 1))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
            r = await c.post(
                "/v1/streams/orders/events?tenant=acme",
                json={"order": "o-1"},
                headers={"traceparent": f"00-{'ab' * 16}-{'cd' * 8}-01"},
            )
            assert r.status_code == 202, r.text
            async with asyncio.timeout(20):
                await done.wait()
            await spans.wait_for("yoke.process")
    [append] = spans.named("yoke.append")
    assert append.parent is not None and append.parent.span_id == int("cd" * 8, 16)
    attrs = dict(append.attributes or {})
    assert attrs == {"yoke.stream": "orders", "yoke.tenant": "acme", "yoke.count": 1}


async def test_calls_in_executor_processes_have_their_spans(app_url: str, spans: Spans) -> None:
    """The drain's hot path to executor processes (`send`) with the traced runner: one span a
    call, timed until its executor's answer."""
    from tests.actors.executors import runtime, state, until

    rt = runtime()
    rt.tracing = spans.tracing
    backend = open_actor_store(app_url)
    await backend.open()
    try:
        async with rt.running(backend.actors):
            events = [{"k": "0", "g": n % 4, "n": n} for n in range(20)]
            await rt.append_many("jobs", events, tenant="acme")

            async def all_done() -> bool:
                done = (await state(backend.actors, "acme", "job", "0")).get("done", [])
                return len(done) == 20

            await until(all_done, seconds=60)
            calls = await spans.wait_for("yoke.process", 20)
    finally:
        await backend.close()
    assert {(s.attributes or {})["yoke.actor"] for s in calls} == {"job"}
    assert sorted(int(str((s.attributes or {})["yoke.event_id"])) for s in calls) == list(
        range(1, 21)
    )
    assert all(s.status.status_code is StatusCode.UNSET for s in calls)
