"""`yoke serve`: load an app by `module:attribute`, check where it may listen, run uvicorn.

Without a tokens file every caller is the local admin, so the server listens on loopback only and
refuses any other address. SIGTERM (or Ctrl-C) shuts down as the admission specification says: the
executions stop admitting and refuse their queued starts at once (so long-polls answer now), uvicorn
stops accepting and finishes the requests in flight, and the lifespan then gives running executions
`YOKE_EXECUTION_SHUTDOWN_TIMEOUT` to finish before aborting them. The process exits 0.

Before listening it raises its open-file limit to the hard limit and sizes the connections it
will hold below it (`descriptors`); the rules of each connection are `connections`'.

This module must never hold API logic.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import ipaddress
import os
import signal
import socket
import sys
from types import FrameType

import uvicorn

from yoke.app import App, check_ha, reach
from yoke.errors import BadValue
from yoke.server import descriptors
from yoke.server.asgi import Server
from yoke.server.connections import ConnectionLimits, TrustedProxies
from yoke.server.logs import configure_logging
from yoke.server.protocol import HeadLimits, bounded_protocol

KEEP_ALIVE_SECS = 30
_YOUNG_GC_THRESHOLD = 20_000  # allocations between young collections (CPython's default: 700)


def load_app(spec: str) -> App:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise BadValue(f"--app must be module:attribute (like examples.shop:app), got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as uvicorn does: apps next to where you stand
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # whatever the module raised as it ran: `--debug` shows where
        raise BadValue(
            f"cannot import {module_name!r}: {type(exc).__name__}: {' '.join(str(exc).split())}"
        ) from exc
    app = getattr(module, attr, None)
    if not isinstance(app, App):
        raise BadValue(f"{spec} is not a yoke.App (found {type(app).__name__})")
    app.actors.app_spec = spec  # what executor processes import
    return app


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, server: Server) -> None:
    if server.state.tokens is None and not is_loopback(host):
        raise BadValue(
            f"refusing to listen on {host}: without YOKE_TOKENS_FILE every caller "
            "is an admin, so only loopback (127.0.0.1, ::1) is allowed"
        )


class _Uvicorn(uvicorn.Server):
    """uvicorn, told about SIGTERM first, and exiting 0 after a graceful stop (stock uvicorn
    re-raises the signal after its shutdown, which ends the process with -15)."""

    def __init__(self, config: uvicorn.Config, server: Server) -> None:
        super().__init__(config)
        self.yoke = server
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # What is loaded by now (modules, the app, its store) lives as long as the process:
        # keep it out of the collector's full passes, whose pauses grow with the heap (with
        # thousands of starts queued they were the slowest answers' whole delay).
        gc.collect()
        gc.freeze()
        # A request allocates a few hundred objects that die with it (cycles are rare): with
        # the default threshold of 700 the young generation is collected every few requests.
        gc.set_threshold(_YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.yoke.state.begin_shutdown)


def run(
    spec: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    database_url: str | None = None,
    log_level: str | None = None,
    log_format: str | None = None,
    executors: str | None = None,
    forwarded_allow_ips: str | None = None,
    ha: bool = False,
    worker: bool = True,
) -> None:
    app = load_app(spec)
    if executors:
        app.actors.use_executors(executors)
    if not worker:
        # Only ingest (appends, starts, reads): own no instance, drain nothing; new instances
        # go to the live workers by the placement rule.
        app.actor_worker = False
    app.settings = app.settings.with_(
        **{
            k: v
            for k, v in (
                ("database_url", database_url),
                ("log_level", log_level),
                ("log_format", log_format),
                ("forwarded_allow_ips", forwarded_allow_ips),
            )
            if v
        }
    )
    if ha:
        app.settings = app.settings.with_(ha=True)
    settings = app.settings
    check_ha(settings)  # before listening: a clear error, not a failed lifespan
    configure_logging(settings.log_level, settings.log_format)
    app.tracing.export()  # YOKE_TRACING=otel: spans to the exporter the OTEL_* variables name
    if worker:
        app.actors.check_executors()  # as root without a uid or namespaces: refuse, exit 2
    server = Server.from_env(app)
    check_bind(host, server)
    asyncio.run(reach(settings))  # the cause in one line, before uvicorn starts the lifespan
    head = HeadLimits(max_line=settings.max_header_line_bytes, max_head=settings.max_header_bytes)
    capacity = descriptors.connection_capacity(descriptors.raise_open_file_limit())
    connections = ConnectionLimits(
        header_timeout=settings.header_timeout_secs,
        per_client=settings.max_connections_per_client,
        capacity=capacity,
        trusted=TrustedProxies(settings.forwarded_allow_ips),
    )
    config = uvicorn.Config(
        server,
        host=host,
        port=port,
        http=bounded_protocol(head, connections),
        ws="none",  # no route speaks WebSocket: no connection leaves the protocol's table
        lifespan="on",
        log_level=settings.log_level.lower(),
        log_config=None,  # the handlers of `configure_logging`, for uvicorn's loggers too
        timeout_graceful_shutdown=int(app.settings.execution_shutdown_timeout) + 5,
        # Idle between requests: a client that is slow to send its next one (a burst of starts
        # from one busy process) must not be cut off after uvicorn's default 5 s. Held longer
        # than this, an idle connection is closed; sooner, when the server is at capacity and
        # a new connection needs its place (`connections`).
        timeout_keep_alive=KEEP_ALIVE_SECS,
        access_log=False,
        # Set here, not left to uvicorn's default and its FORWARDED_ALLOW_IPS: only these
        # proxies may say a request came over https (the session cookie is then Secure) and
        # from which client (the login throttle counts by it).
        proxy_headers=True,
        forwarded_allow_ips=settings.forwarded_allow_ips,
    )
    _Uvicorn(config, server).run()
