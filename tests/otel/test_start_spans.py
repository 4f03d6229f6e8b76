"""A start's spans: `yoke.start` from arrival to the record of its end, with `yoke.admit` (its
wait) and `yoke.run` (the workflow's body) as children, continuing the caller's trace from the
W3C `traceparent` of `POST /v1/starts` (docs/decisions.md, D20). On both stores."""

from __future__ import annotations

import asyncio

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from tests.otel.conftest import Serve, Spans, traced_app
from yoke.executions import Limits
from yoke.tracing import MAX_ATTRIBUTE_CHARS

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = {"traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"}


def child_of(span: ReadableSpan, parent: ReadableSpan) -> bool:
    assert span.parent is not None
    return bool(span.parent.span_id == parent.context.span_id)


def times(span: ReadableSpan) -> tuple[int, int]:
    assert span.start_time is not None and span.end_time is not None
    return span.start_time, span.end_time


async def test_a_start_over_http_is_a_child_of_the_callers_span(serve: Serve, spans: Spans) -> None:
    app, client = await serve()
    r = await client.post(
        "/v1/starts",
        json={"workflow": "echo", "input": 1, "session": "acme/cart-1"},
        headers=TRACEPARENT,
    )
    assert r.status_code == 201, r.text
    execution_id = r.json()["execution_id"]
    [start] = await spans.wait_for("yoke.start")
    [admit], [run] = spans.named("yoke.admit"), spans.named("yoke.run")

    # The caller's trace, continued: yoke.start's parent is the caller's span.
    assert start.context.trace_id == int(TRACE_ID, 16)
    assert start.parent is not None and start.parent.span_id == int(CALLER_SPAN, 16)
    assert start.parent.is_remote
    assert child_of(admit, start) and child_of(run, start)
    assert {admit.context.trace_id, run.context.trace_id} == {start.context.trace_id}

    attrs = dict(start.attributes or {})
    assert attrs["yoke.workflow"] == "echo"
    assert attrs["yoke.tenant"] == "acme" and attrs["yoke.session"] == "acme/cart-1"
    assert attrs["yoke.start_id"] == r.json()["start_id"]
    assert attrs["yoke.execution_id"] == execution_id
    assert attrs["yoke.status"] == "SUCCEEDED" and attrs["yoke.kind"] == "start"
    assert (admit.attributes or {})["yoke.outcome"] == "granted"
    assert (run.attributes or {})["yoke.status"] == "SUCCEEDED"
    assert [e.name for e in start.events] == ["yoke.granted"]
    assert start.status.status_code is StatusCode.UNSET

    # Arrival, the wait, the run, the record of the end: in that order.
    s0, s1 = times(start)
    a0, a1 = times(admit)
    r0, r1 = times(run)
    assert s0 <= a0 <= a1 <= r0 <= r1 <= s1
    done = await app.executions.wait(execution_id, timeout=5)
    assert done.status.name == "SUCCEEDED"


async def test_without_a_traceparent_the_start_begins_a_trace(serve: Serve, spans: Spans) -> None:
    _, client = await serve()
    r = await client.post("/v1/starts", json={"workflow": "echo", "session": "acme"})
    assert r.status_code == 201
    [start] = await spans.wait_for("yoke.start")
    assert start.parent is None


async def test_a_failed_workflow_is_an_error_on_its_run_and_its_start(
    serve: Serve, spans: Spans
) -> None:
    _, client = await serve()
    r = await client.post(
        "/v1/starts", json={"workflow": "fail", "session": "acme"}, headers=TRACEPARENT
    )
    assert r.status_code == 201
    [start] = await spans.wait_for("yoke.start")
    [run] = spans.named("yoke.run")
    for span in (run, start):
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "RuntimeError: asked to fail"
        assert (span.attributes or {})["yoke.status"] == "FAILED"
        [exc] = [e for e in span.events if e.name == "exception"]
        assert (exc.attributes or {})["exception.type"] == "RuntimeError"


async def test_a_queued_start_records_its_wait_and_its_grant(serve: Serve, spans: Spans) -> None:
    app, client = await serve(Limits(max_running=1))
    first = await client.post("/v1/starts", json={"workflow": "hold", "session": "acme"})
    assert first.status_code == 201
    r = await client.post(
        "/v1/starts", json={"workflow": "echo", "session": "acme"}, headers=TRACEPARENT
    )
    assert r.status_code == 202 and r.json()["position"] == 1
    app.gate.set()  # type: ignore[attr-defined]
    await spans.wait_for("yoke.start", 2)
    [start] = [s for s in spans.named("yoke.start") if s.parent is not None]
    [admit] = [a for a in spans.named("yoke.admit") if child_of(a, start)]
    events = [(e.name, dict(e.attributes or {})) for e in start.events]
    assert events == [("yoke.queued", {"yoke.position": 1}), ("yoke.granted", events[1][1])]
    # Its wait lasted until the first one's slot freed: past the first run's end.
    [first_run] = [s for s in spans.named("yoke.run") if s.context.trace_id != int(TRACE_ID, 16)]
    assert times(admit)[1] >= times(first_run)[1]


async def test_a_start_refused_by_a_limit_records_the_refusal(serve: Serve, spans: Spans) -> None:
    _, client = await serve(Limits(max_running=1, on_limit="reject"))
    assert (await client.post("/v1/starts", json={"workflow": "hold"})).status_code == 201
    r = await client.post(
        "/v1/starts", json={"workflow": "echo", "session": "acme"}, headers=TRACEPARENT
    )
    assert r.status_code == 429
    [start] = await spans.wait_for("yoke.start")
    [admit] = [a for a in spans.named("yoke.admit") if child_of(a, start)]
    assert start.parent is not None and start.parent.span_id == int(CALLER_SPAN, 16)
    assert (start.attributes or {})["yoke.status"] == "REFUSED"
    assert (admit.attributes or {})["yoke.outcome"] == "refused"
    [refused] = [e for e in start.events if e.name == "yoke.refused"]
    assert "limit reached" in str((refused.attributes or {})["yoke.reason"])
    # The scheduler at work, not a failure: no error status, no run.
    assert start.status.status_code is StatusCode.UNSET
    assert [r for r in spans.named("yoke.run") if child_of(r, start)] == []


async def test_a_cancelled_start_ends_its_span(serve: Serve, spans: Spans) -> None:
    _, client = await serve(Limits(max_running=1))
    assert (await client.post("/v1/starts", json={"workflow": "hold"})).status_code == 201
    queued = (await client.post("/v1/starts", json={"workflow": "echo"})).json()
    r = await client.delete(f"/v1/starts/{queued['start_id']}")
    assert r.status_code == 200, r.text
    [start] = await spans.wait_for("yoke.start")
    assert (start.attributes or {})["yoke.status"] == "CANCELLED"
    [admit] = [a for a in spans.named("yoke.admit") if child_of(a, start)]
    assert (admit.attributes or {})["yoke.outcome"] == "cancelled"


async def test_attributes_a_tenant_chooses_are_bounded(database_url: str, spans: Spans) -> None:
    app = traced_app(database_url, spans)
    session = "acme/" + "s" * 10_000
    async with app.running():
        start = await app.executions.start("echo", None, session=session)
        assert start.execution_id is not None
        await app.executions.wait(start.execution_id, timeout=5)
        [span] = await spans.wait_for("yoke.start")
    [run] = spans.named("yoke.run")
    for s in (span, run):
        value = str((s.attributes or {})["yoke.session"])
        assert len(value) == MAX_ATTRIBUTE_CHARS and session.startswith(value[:-3])
    assert all(len(str(v)) <= MAX_ATTRIBUTE_CHARS for v in (span.attributes or {}).values())


async def test_a_start_from_python_continues_the_current_span(
    database_url: str, spans: Spans
) -> None:
    """No HTTP: the caller's current span is the parent, and the workflow's own spans nest
    under `yoke.run`."""
    tracer = spans.provider.get_tracer("test")
    app = traced_app(database_url, spans)

    @app.workflow()
    async def inner(ctx: object, input: object) -> None:
        with tracer.start_as_current_span("user work"):
            await asyncio.sleep(0)

    async with app.running():
        with tracer.start_as_current_span("caller") as caller:
            start = await app.executions.start(inner, None, session="acme")
        assert start.execution_id is not None
        await app.executions.wait(start.execution_id, timeout=5)
        [span] = await spans.wait_for("yoke.start")
    [run], [work] = spans.named("yoke.run"), spans.named("user work")
    assert span.parent is not None and span.parent.span_id == caller.get_span_context().span_id
    assert child_of(work, run)


async def test_a_workflow_sees_its_own_callers_context_never_another_starts(
    database_url: str, spans: Spans
) -> None:
    """Starts granted in one batch run in tasks made by that batch, in the context of the start
    that formed it: the run's context must be built on its own caller's, or one tenant's
    baggage (and trace) reaches another tenant's workflow and its outgoing calls."""
    from opentelemetry import baggage
    from opentelemetry import context as otel_context

    app = traced_app(database_url, spans)
    seen: dict[str, dict[str, object]] = {}

    @app.workflow()
    async def peek(ctx: object, who: str) -> None:
        seen[who] = dict(baggage.get_all())

    async with app.running():
        token = otel_context.attach(baggage.set_baggage("secret", "acme-only"))
        try:  # acme's start forms the grant batch; globex's joins it in the same turn
            acme = asyncio.ensure_future(app.executions.start(peek, "acme", session="acme"))
        finally:
            otel_context.detach(token)
        globex = asyncio.ensure_future(app.executions.start(peek, "globex", session="globex"))
        for start in await asyncio.gather(acme, globex):
            assert start.execution_id is not None
            await app.executions.wait(start.execution_id, timeout=5)
    assert seen == {"acme": {"secret": "acme-only"}, "globex": {}}


async def test_a_restart_over_http_is_a_start_of_kind_restart_in_the_callers_trace(
    serve: Serve, spans: Spans
) -> None:
    app, client = await serve()
    first = (await client.post("/v1/starts", json={"workflow": "echo", "session": "acme"})).json()
    await app.executions.wait(first["execution_id"], timeout=5)
    r = await client.post(
        f"/v1/executions/{first['execution_id']}/restart", json={}, headers=TRACEPARENT
    )
    assert r.status_code == 201, r.text
    await spans.wait_for("yoke.start", 2)
    [again] = [s for s in spans.named("yoke.start") if s.parent is not None]
    assert again.parent is not None and again.parent.span_id == int(CALLER_SPAN, 16)
    assert (again.attributes or {})["yoke.kind"] == "restart"
