"""Rendering the dashboard: Jinja2 templates shipped in the package, and a cache of rendered
fragments so that N viewers of one state cost one render.

A fragment is keyed by (region, its parameters, the viewer's scope, the hub's version): every
viewer with the same scope (the same tenant and roles) at the same version gets the same bytes,
and concurrent requests for a key not yet rendered wait for the one render in progress. The
cache is bounded (least recently used out).

Every HTML answer carries a strict Content-Security-Policy: scripts and styles from this server
only, no inline script, no eval, no framing.

This module must never compute a figure; it renders what the views return.
"""

from __future__ import annotations

import asyncio
import datetime
import math
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

import jinja2
from starlette.responses import HTMLResponse, Response

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _ago(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _when(at: float | None) -> str:
    if at is None:
        return "-"
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(seconds: float) -> str:
    """A setting's length of time: `60 s`, `10 min`, `1 h`."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 120 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def _ms(ms: float | None) -> str:
    """A duration in milliseconds as a person reads it: `301.9 ms`."""
    return "-" if ms is None or not math.isfinite(ms) else f"{ms:.1f} ms"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("yoke.server.ui", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ago"] = _ago
    env.filters["when"] = _when
    env.filters["pct"] = _pct
    env.filters["ms"] = _ms
    env.filters["duration"] = _duration
    return env


def html(body: str | bytes, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return HTMLResponse(body, status_code=status, headers={**SECURITY_HEADERS, **(headers or {})})


class FragmentCache:
    def __init__(self, *, size: int = 512) -> None:
        self.size = size
        self.renders = 0
        self.hits = 0
        self._done: OrderedDict[Hashable, bytes] = OrderedDict()
        self._pending: dict[Hashable, asyncio.Future[bytes]] = {}

    def __repr__(self) -> str:
        return f"FragmentCache({len(self._done)}/{self.size}, renders={self.renders})"

    async def get(self, key: Hashable, render: Callable[[], Awaitable[bytes]]) -> bytes:
        found = self._done.get(key)
        if found is not None:
            self._done.move_to_end(key)
            self.hits += 1
            return found
        pending = self._pending.get(key)
        if pending is not None:
            self.hits += 1
            return await asyncio.shield(pending)
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[key] = fut
        try:
            body = await render()
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: a failure nobody else awaited is not logged twice
            raise
        finally:
            del self._pending[key]
        self.renders += 1
        fut.set_result(body)
        self._done[key] = body
        while len(self._done) > self.size:
            self._done.popitem(last=False)
        return body


def render_to(env: jinja2.Environment, name: str, context: dict[str, Any]) -> bytes:
    return env.get_template(name).render(context).encode()
