"""`yoke[otel]`: yoke's spans through OpenTelemetry. The only module of yoke that imports it.

The spans (docs/decisions.md, D20):

    <the caller's span>             (the W3C traceparent of POST /v1/starts, or the current span
    └── yoke.start                   of the Python caller): arrival -> its end recorded
        ├── yoke.admit               arrival -> granted (or refused, cancelled): its wait
        └── yoke.run                 the workflow's body; the current span inside it
    yoke.process                     one process() call of an actor (a trace of its own)

`yoke.start` carries `yoke.workflow`, `yoke.tenant`, `yoke.session`, `yoke.start_id`,
`yoke.kind`, `yoke.priority`, then `yoke.execution_id` and `yoke.status`; its events are
`yoke.queued` (with the position), `yoke.granted` and `yoke.refused` (with the reason). A
failure (FAILED, TIMED_OUT, ABORTED, or a store that failed the start) is the span's ERROR
status; a refusal by a limit or shutdown is the scheduler at work, not an error.

`OtelTracing(tracer_provider=None)` uses the global tracer provider, set by the program (or by
`opentelemetry-instrument`). `yoke serve` and `yoke worker` call `export_from_env()`, which,
when nobody set one, sets the SDK's with the exporter `OTEL_TRACES_EXPORTER` names (the
standard `OTEL_*` variables configure it).

This module is imported only when tracing is on: nothing of yoke's core imports it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from importlib import metadata
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from yoke.errors import BadValue
from yoke.tracing import (
    MAX_EVENTS,
    MAX_MESSAGE_CHARS,
    ASGIApp,
    CallTrace,
    Failed,
    StartTrace,
    Tracing,
    bounded,
)

log = logging.getLogger("yoke.otel")
ROOT = Context()  # no parent: a process() call's trace begins with it


class OtelTracing(Tracing):
    """Tracing through OpenTelemetry: spans of the given provider, else the global one."""

    enabled = True

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self._own_provider = tracer_provider is not None
        self._tracer = trace.get_tracer("yoke", _version(), tracer_provider=tracer_provider)

    def export(self) -> None:
        if not self._own_provider:
            export_from_env()

    def start(
        self,
        *,
        start_id: str,
        workflow: str,
        session: str,
        tenant: str,
        kind: str,
        priority: int,
    ) -> StartTrace:
        attributes: dict[str, AttributeValue] = {
            "yoke.workflow": bounded(workflow),
            "yoke.tenant": bounded(tenant),
            "yoke.session": bounded(session),
            "yoke.start_id": start_id,
            "yoke.kind": kind,
            "yoke.priority": priority,
        }
        caller = otel_context.get_current()  # the HTTP request's, or the Python caller's
        span = self._tracer.start_span("yoke.start", context=caller, attributes=attributes)
        return _Start(self._tracer, span, caller, attributes)

    def call(
        self,
        *,
        actor: str,
        instance: str,
        tenant: str,
        stream: str,
        event_id: int,
        group: str,
        attempt: int,
        start_ns: int | None = None,
    ) -> CallTrace:
        span = self._tracer.start_span(
            "yoke.process",
            context=ROOT,
            start_time=start_ns,
            kind=trace.SpanKind.CONSUMER,
            attributes={
                "yoke.actor": bounded(actor),
                "yoke.instance": bounded(instance),
                "yoke.tenant": bounded(tenant),
                "yoke.stream": bounded(stream),
                "yoke.event_id": event_id,
                "yoke.group": bounded(group),
                "yoke.attempt": attempt,
            },
        )
        return _Call(span)

    @contextlib.contextmanager
    def appending(self, *, stream: str, tenant: str, count: int) -> Iterator[None]:
        attributes = {"yoke.stream": bounded(stream), "yoke.tenant": bounded(tenant)}
        with self._tracer.start_as_current_span(
            "yoke.append",
            kind=trace.SpanKind.PRODUCER,
            attributes={**attributes, "yoke.count": count},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield
            except Exception as exc:
                _fail(span, Failed(type(exc).__name__, str(exc)))
                raise

    def asgi(self, app: ASGIApp) -> ASGIApp:
        async def traced(scope: Any, receive: Any, send: Any) -> None:
            parent = _incoming(scope)
            if parent is None:
                await app(scope, receive, send)
                return
            token = otel_context.attach(parent)
            try:
                await app(scope, receive, send)
            finally:
                otel_context.detach(token)

        return traced


def _incoming(scope: Any) -> Context | None:
    """The trace context an HTTP request carries (the global propagator's headers: W3C
    `traceparent`, `tracestate`, `baggage` by default), or None: none sent, or a server span
    of an instrumentation around yoke is the parent already."""
    if scope.get("type") != "http" or trace.get_current_span().get_span_context().is_valid:
        return None
    propagator = propagate.get_global_textmap()
    fields = propagator.fields
    carrier: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        key = name.decode("latin-1").lower()
        if key in fields:
            carrier[key] = value.decode("latin-1")
    if not carrier:
        return None
    return propagator.extract(carrier)


class _Start:
    """`yoke.start` and its two children. Each verb is safe to call again (the shell may
    answer a ticket more than once): only the first end of each span counts."""

    __slots__ = ("_admit", "_attributes", "_caller", "_events", "_run", "_span", "_tracer")

    def __init__(
        self,
        tracer: trace.Tracer,
        span: Span,
        caller: Context,
        attributes: Mapping[str, AttributeValue],
    ) -> None:
        self._tracer = tracer
        self._span = span
        # Every context of this start is built on its caller's, never on the one its run's
        # task happens to hold: that task was made by whichever start's batch granted it, and
        # another tenant's baggage must not reach this workflow.
        self._caller = caller
        parent = trace.set_span_in_context(span, caller)
        self._attributes = attributes
        self._admit: Span | None = tracer.start_span("yoke.admit", context=parent)
        self._run: Span | None = None
        self._events = 0

    def _event(self, name: str, attributes: Mapping[str, Any]) -> None:
        if self._events < MAX_EVENTS:
            self._events += 1
            self._span.add_event(name, attributes)

    def queued(self, position: int | None) -> None:
        self._event("yoke.queued", {} if position is None else {"yoke.position": position})

    def granted(self, execution_id: str) -> None:
        admit, self._admit = self._admit, None
        if admit is None:
            return
        self._span.set_attribute("yoke.execution_id", execution_id)
        self._event("yoke.granted", {"yoke.execution_id": execution_id})
        admit.set_attribute("yoke.outcome", "granted")
        admit.end()

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        run = self._tracer.start_span(
            "yoke.run",
            context=trace.set_span_in_context(self._span, self._caller),
            attributes={
                k: self._attributes[k] for k in ("yoke.workflow", "yoke.tenant", "yoke.session")
            },
        )
        self._run = run
        token = otel_context.attach(trace.set_span_in_context(run, self._caller))
        try:
            yield
        finally:
            otel_context.detach(token)

    def ran(self, status: str, error: Failed | None) -> None:
        run, self._run = self._run, None
        if run is None:  # stopped before its body began
            return
        run.set_attribute("yoke.status", status)
        _fail(run, error)
        run.end()

    def ended(self, status: str, error: Failed | None, *, refused: str | None = None) -> None:
        if not self._span.is_recording():  # ended already
            return
        admit, self._admit = self._admit, None
        if admit is not None:  # it left without a grant
            admit.set_attribute("yoke.outcome", status.lower())
            admit.end()
        if refused is not None:
            self._event("yoke.refused", {"yoke.reason": bounded(refused, MAX_MESSAGE_CHARS)})
        self._span.set_attribute("yoke.status", status)
        _fail(self._span, error)
        self._span.end()


class _Call:
    __slots__ = ("_span",)

    def __init__(self, span: Span) -> None:
        self._span = span

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        token = otel_context.attach(trace.set_span_in_context(self._span, ROOT))
        try:
            yield
        finally:
            otel_context.detach(token)

    def ended(self, error: BaseException | None) -> None:
        if error is not None:
            _fail(self._span, Failed(type(error).__name__, str(error)))
        self._span.end()


def _fail(span: Span, error: Failed | None) -> None:
    """The span's ERROR status, and an `exception` event (the semantic conventions' names),
    both bounded; never the traceback: it is in the execution's record."""
    if error is None:
        return
    message = bounded(error.message, MAX_MESSAGE_CHARS)
    kind = bounded(error.type)
    span.set_status(Status(StatusCode.ERROR, f"{kind}: {message}"))
    span.add_event("exception", {"exception.type": kind, "exception.message": message})


def _version() -> str:
    try:
        return metadata.version("yoke")
    except metadata.PackageNotFoundError:  # run from a source tree
        return "0"


# -- export for `yoke serve` and `yoke worker` --------------------------------------------------
def export_from_env(env: Mapping[str, str] | None = None) -> trace.TracerProvider:
    """The global tracer provider; when nobody set one, the SDK's, set now, exporting in
    batches to the exporter `OTEL_TRACES_EXPORTER` names (`otlp`, the default: OTLP over
    `OTEL_EXPORTER_OTLP_PROTOCOL`, http/protobuf unless `grpc`; `console`; `none`; or any
    exporter package's entry point name). The SDK reads the other `OTEL_*` variables itself
    (`OTEL_SERVICE_NAME`, `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_TRACES_SAMPLER`...)."""
    current = trace.get_tracer_provider()
    if not isinstance(current, trace.ProxyTracerProvider):
        return current  # the program (or opentelemetry-instrument) set one: it is used
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    source = os.environ if env is None else env
    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "yoke"}))
    provider = TracerProvider(resource=resource)
    for name in _exporter_names(source):
        provider.add_span_processor(BatchSpanProcessor(_exporter(name)()))
    trace.set_tracer_provider(provider)
    return provider


def _exporter_names(env: Mapping[str, str]) -> list[str]:
    names = [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]
    if "none" in names:
        return []
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    otlp = "otlp_proto_grpc" if protocol == "grpc" else "otlp_proto_http"
    return [otlp if n == "otlp" else n for n in names]


def _exporter(name: str) -> Any:
    """The span exporter class an installed package registers under `name`."""
    found = metadata.entry_points(group="opentelemetry_traces_exporter", name=name)
    for entry in found:
        return entry.load()
    hint = {
        "otlp_proto_http": "opentelemetry-exporter-otlp-proto-http (in yoke[otel])",
        "otlp_proto_grpc": "opentelemetry-exporter-otlp-proto-grpc",
    }.get(name, "the package that provides it")
    raise BadValue(f"OTEL_TRACES_EXPORTER names {name!r}, which is not installed: install {hint}")
