"""`GET /ui/events`: one Server-Sent Events stream per visible dashboard tab, carrying only
"changed" signals (`event: changed`, `data: {"v": <version>}`); each region of the page then
re-fetches its own fragment.

The stream sends the current version at once (a tab that reconnects resyncs), then each new
version as the hub raises it (coalesced there: the latest version is always sent), a comment
every `PING` seconds, and ends when the client goes away or the hub closes (server shutdown), so
shutdown is never held up by open streams. Pure ASGI: no buffering middleware, no task left
behind.

This module must never render anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

from starlette.types import Receive, Scope, Send

from yoke.errors import NotRunning, Unauthorized, YokeError
from yoke.server.auth import principal_in
from yoke.server.problems import from_yoke_error
from yoke.server.ui.hub import Hub

PING = 15.0


class TooManyStreams(NotRunning):
    title = "Too many open event streams"


class EventStream:
    def __init__(self, hub: Hub) -> None:
        self.hub = hub

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hub = self.hub
        try:
            if principal_in(scope) is None:
                raise Unauthorized("log in first")
            if hub.closed:
                raise NotRunning("shutting down")
            if hub.streams >= hub.max_streams:
                raise TooManyStreams(f"at most {hub.max_streams} open streams")
        except YokeError as exc:
            await from_yoke_error(exc, scope["path"])(scope, receive, send)
            return
        hub.streams += 1
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
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher


async def _chunk(send: Send, text: str) -> None:
    await send({"type": "http.response.body", "body": text.encode(), "more_body": True})
