"""Fixtures of the tracing tests: OpenTelemetry's SDK with its in-memory exporter, and a small
app traced through it, served in process.

Each test has a provider of its own (never the global one, which can be set only once a
process), handed to the app as `yoke.otel.OtelTracing(provider)`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import yoke
from tests.actors.conftest import truncate_actor_tables
from yoke.executions import Limits
from yoke.otel import OtelTracing
from yoke.server import Server


class Spans:
    """The spans a test's provider finished, by name."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracing = OtelTracing(self.provider)

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name == name]

    async def wait_for(
        self, name: str, count: int = 1, seconds: float = 10.0
    ) -> list[ReadableSpan]:
        """The spans called `name` once `count` of them ended (a start's span ends just after
        its end is recorded, so a caller may see the execution finished a moment before)."""
        async with asyncio.timeout(seconds):
            while len(self.named(name)) < count:  # noqa: ASYNC110 (the exporter has no event)
                await asyncio.sleep(0.01)
        return self.named(name)


@pytest.fixture
def spans() -> Iterator[Spans]:
    s = Spans()
    yield s
    s.provider.shutdown()


def traced_app(database_url: str, spans: Spans, limits: Limits | None = None) -> yoke.App:
    app = yoke.App(database_url, limits=limits, tracing=spans.tracing)
    gate = asyncio.Event()
    app.gate = gate  # type: ignore[attr-defined]

    @app.workflow()
    async def echo(ctx: yoke.Context, input: Any) -> Any:
        return input

    @app.workflow()
    async def hold(ctx: yoke.Context, input: Any) -> Any:
        await gate.wait()
        return "released"

    @app.workflow()
    async def fail(ctx: yoke.Context, input: Any) -> Any:
        raise RuntimeError("asked to fail")

    return app


Client = Callable[..., httpx.AsyncClient]
Serve = Callable[..., Awaitable[tuple[yoke.App, httpx.AsyncClient]]]


@pytest.fixture
async def serve(database_url: str, spans: Spans) -> AsyncIterator[Serve]:
    """`app, client = await serve(limits=...)`: the traced app served in process (no tokens:
    the loopback caller is ADMIN)."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(limits: Limits | None = None) -> tuple[yoke.App, httpx.AsyncClient]:
            app = traced_app(database_url, spans, limits)
            server = Server(app, tokens=None)
            await stack.enter_async_context(server.lifespan())
            stack.callback(app.gate.set)  # type: ignore[attr-defined]
            client = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=server, client=("127.0.0.1", 1234)),
                base_url="http://localhost",
            )
            stack.push_async_callback(client.aclose)
            return app, client

        yield start


@pytest.fixture
def app_url(database_url: str) -> str:
    """`database_url` with the actors' tables emptied too."""
    if database_url.startswith("postgres"):
        truncate_actor_tables(database_url)
    return database_url
