"""`yoke worker --metrics-port`: the worker's Prometheus metrics over plain HTTP.

A worker has no API server, so this answers `GET /metrics` only (anything else is 404; one
request per connection; the request head is bounded and must arrive within a few seconds).
It serves the app's actor registry: the specification's actor metrics, the executor metrics of this
worker (`yoke_executor_boot_phase_seconds`, `yoke_executors`, `yoke_executor_crashes_total`),
and the store gauges read at each scrape. A worker holds no tokens, so unlike the server's
`/metrics` it asks for none (its labels name tenants' instances): it listens on loopback
unless told otherwise. This module must never change the app.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from yoke.app import App, run_worker
from yoke.errors import YokeError

log = logging.getLogger("yoke.server")

MAX_HEAD = 8192
HEAD_TIMEOUT = 5.0


async def run_worker_with_metrics(app: App, *, host: str, port: int) -> None:
    server = await asyncio.start_server(
        lambda r, w: _answer(app, r, w), host=host, port=port, limit=MAX_HEAD
    )
    bound = ", ".join(str(s.getsockname()) for s in server.sockets)
    log.info("worker metrics on http://%s/metrics", bound)
    try:
        async with server:
            await run_worker(app)
    finally:
        server.close()


async def scrape(app: App) -> bytes:
    from prometheus_client import generate_latest

    with contextlib.suppress(YokeError):  # a scrape answers with the last values read
        await app.actors.refresh_gauges()
    registry = app.actors.metrics.registry
    return b"" if registry is None else generate_latest(registry)


async def _answer(app: App, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        async with asyncio.timeout(HEAD_TIMEOUT):
            head = await reader.readuntil(b"\r\n\r\n")
        method, _, rest = head.partition(b" ")
        path = rest.split(b" ", 1)[0].split(b"?", 1)[0]
        if method == b"GET" and path == b"/metrics":
            body = await scrape(app)
            status, kind = b"200 OK", b"text/plain; version=0.0.4; charset=utf-8"
        else:
            body, status, kind = b"not found\n", b"404 Not Found", b"text/plain"
        writer.write(
            b"HTTP/1.1 " + status + b"\r\nContent-Type: " + kind
            + b"\r\nContent-Length: " + str(len(body)).encode()
            + b"\r\nConnection: close\r\n\r\n" + body
        )  # fmt: skip
        await writer.drain()
    except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
        pass  # a slow, truncated or oversized request gets no answer
    finally:
        writer.close()
