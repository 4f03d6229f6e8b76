"""`GET /ui/events`: one Server-Sent Events stream per browser (its dashboard tabs share it
through a SharedWorker, `static/stream.js`; a browser without one opens a stream per visible
tab), carrying only "changed" signals (`event: changed`, `data: {"v": <version>}`); each region
of the page then re-fetches its own fragment.

The stream sends the current version at once (a tab that reconnects resyncs), then each new
version as the hub raises it (coalesced there: the latest version is always sent), a comment
every `PING` seconds, and ends when the client goes away or the hub closes (server shutdown), so
shutdown is never held up by open streams. Pure ASGI: no buffering middleware, no task left
behind.

Open streams are bounded twice: the hub's `max_streams` in all, and `per_viewer` for one
tenant (a plain principal's tenant, or a privileged principal), so that one tenant opening
streams by the thousand is refused (429) long before the others are locked out of theirs.

This module must never render anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

from starlette.types import Receive, Scope, Send

from yoke.errors import LimitExceeded, NotRunning, Unauthorized, YokeError
from yoke.executions import Principal
from yoke.server.auth import principal_in, privileged, scraper, tenant_of
from yoke.server.problems import from_yoke_error
from yoke.server.ui.hub import Hub

PING = 15.0
PER_VIEWER = 32  # one per browser (a tab each without SharedWorker): room for a team's


class TooManyStreams(NotRunning):
    title = "Too many open event streams"


class TooManyStreamsOfOne(LimitExceeded):
    title = "Too many open event streams of one tenant"


def viewer_of(p: Principal) -> str:
    """Whose share of the streams a principal's stream counts against."""
    return f"principal:{p.name}" if privileged(p) else f"tenant:{tenant_of(p)}"


class EventStream:
    def __init__(self, hub: Hub, *, per_viewer: int = PER_VIEWER) -> None:
        self.hub = hub
        self.per_viewer = per_viewer
        self.open: dict[str, int] = {}  # viewer -> streams open (no entry at 0)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hub = self.hub
        try:
            p = principal_in(scope)
            if p is None or scraper(p):
                raise Unauthorized("log in first")
            if hub.closed:
                raise NotRunning("shutting down")
            viewer = viewer_of(p)
            if self.open.get(viewer, 0) >= self.per_viewer:
                raise TooManyStreamsOfOne(
                    f"at most {self.per_viewer} open streams per tenant: close a tab",
                    retry_after=PING,
                )
            if hub.streams >= hub.max_streams:
                raise TooManyStreams(f"at most {hub.max_streams} open streams")
        except YokeError as exc:
            await from_yoke_error(exc, scope["path"])(scope, receive, send)
            return
        hub.streams += 1
        self.open[viewer] = self.open.get(viewer, 0) + 1
        gone = asyncio.Event()

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    gone.set()
                    return

        watcher = asyncio.ensure_future(watch())
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream; charset=utf-8"),
                        (b"cache-control", b"no-cache, no-store"),
                        (b"x-accel-buffering", b"no"),
                    ],
                }
            )
            sent = hub.version
            await _chunk(send, f"retry: 3000\nevent: changed\ndata: {json.dumps({'v': sent})}\n\n")
            while not gone.is_set() and not hub.closed:
                waiter = asyncio.ensure_future(hub.wait(sent, PING))
                done, _ = await asyncio.wait({waiter, watcher}, return_when="FIRST_COMPLETED")
                if waiter not in done:
                    waiter.cancel()
                    break
                version = waiter.result()
                if hub.closed:
                    break
                if version > sent:
                    sent = version
                    await _chunk(send, f"event: changed\ndata: {json.dumps({'v': sent})}\n\n")
                else:
                    await _chunk(send, ": ping\n\n")
            if not gone.is_set():
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client went away while we wrote
        finally:
            hub.streams -= 1
            left = self.open.pop(viewer) - 1
            if left:
                self.open[viewer] = left
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher


async def _chunk(send: Send, text: str) -> None:
    await send({"type": "http.response.body", "body": text.encode(), "more_body": True})
