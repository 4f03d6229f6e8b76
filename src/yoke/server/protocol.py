"""uvicorn's httptools protocol with the request head bounded before it is held, and each
answer written in one piece.

httptools keeps a header's name and value in strings it grows as bytes arrive, with no limit
of its own, and uvicorn keeps the request target the same way: a client that sends a 200 MB
header makes the server hold (and copy, again and again) all of it before anyone can refuse
it. Here every byte fed to the parser while a request's head is incomplete is counted, and
the parser is never fed past `max_header_bytes` of head: when the head is not complete by
then, the answer is 431 and the connection closes. The request target is refused past
`max_header_line_bytes` (414), and so is any one header line (431). What is held of a head is
thus at most the limit plus one read of the transport (a pipelined request's head may begin
in the read that ends the previous body).

uvicorn writes an answer's status line and headers as soon as the app starts it, and its body
as a second write: two sends, often two TCP segments, and two wake-ups of the client for one
small JSON answer. Here a response's head is held until its first body bytes (or its end) and
written with them: one write per answer of one body. A `100 Continue` is never held.

Connections are admitted, timed and refused by the rules of `connections.ConnectionTable`
(a head deadline, a cap per client address, a capacity under the open-file limit); this
module does what the table says. A refused connection is answered at once, before anything is
read, with a problem JSON (429 past the per-client cap, 503 at capacity) and closed; a head
past its deadline is answered 408 (or, if not one byte of it came, just closed). One timer per
server walks the table for late heads, so a request costs the table a few dict operations and
no timer of its own.

Bodies are bounded in `guards.Guard` (they reach the app only as it asks for them, and
uvicorn stops reading past 64 KiB not asked for). This module must never know a route.
"""

from __future__ import annotations

import asyncio
import http
import logging
from dataclasses import dataclass

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from yoke.server.connections import ConnectionLimits, ConnectionTable, Verdict

log = logging.getLogger("yoke.server")


@dataclass(frozen=True, kw_only=True, slots=True)
class HeadLimits:
    max_line: int  # the request target, or one header line (name and value)
    max_head: int  # the request line and every header


class _Refused(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status


def _problem(status: int, detail: str, *, retry_after: int | None = None) -> bytes:
    """A whole answer that closes its connection, written before or instead of any request."""
    phrase = http.HTTPStatus(status).phrase
    body = f'{{"type":"about:blank","title":"{phrase}","status":{status},"detail":"{detail}"}}'
    retry = "" if retry_after is None else f"retry-after: {retry_after}\r\n"
    return (
        f"HTTP/1.1 {status} {phrase}\r\n"
        "content-type: application/problem+json\r\n"
        f"content-length: {len(body)}\r\n"
        f"{retry}connection: close\r\n\r\n{body}"
    ).encode()


_REFUSED = {
    Verdict.TOO_MANY_FROM_CLIENT: _problem(
        429, "too many connections from this address", retry_after=1
    ),
    Verdict.FULL: _problem(503, "the server holds all the connections it can", retry_after=1),
}
_HEAD_LATE = _problem(408, "the request head did not arrive in time")


class _Sweep:
    """The one timer of a server's connections: it closes the heads past their deadline, and
    now and then logs what the table refused."""

    LOG_EVERY = 10.0  # seconds between two summaries of refusals at most

    def __init__(self, table: ConnectionTable[BoundedHttpToolsProtocol]) -> None:
        self.table = table
        self.interval = min(1.0, max(0.05, table.limits.header_timeout / 4))
        self.armed = False
        self._logged = table.stats()
        self._logged_at = 0.0

    def arm(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self.armed:
            self.armed = True
            loop.call_later(self.interval, self._run, loop)

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        self.armed = False
        now = loop.time()
        for conn in self.table.expired(now):
            conn.head_late()
        if now - self._logged_at >= self.LOG_EVERY:
            self._log(now)
        if self.table.open:
            self.arm(loop)

    def _log(self, now: float) -> None:
        was, s = self._logged, self.table.stats()
        if (s.refused_per_client, s.refused_full, s.made_room, s.timed_out) == (
            was.refused_per_client,
            was.refused_full,
            was.made_room,
            was.timed_out,
        ):
            return
        log.warning(
            "connections: %d refused past the per-client cap, %d refused at capacity, "
            "%d closed to make room, %d heads late (since the last summary); %r",
            s.refused_per_client - was.refused_per_client,
            s.refused_full - was.refused_full,
            s.made_room - was.made_room,
            s.timed_out - was.timed_out,
            self.table,
        )
        self._logged, self._logged_at = s, now


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    limits = HeadLimits(max_line=16 << 10, max_head=64 << 10)
    table: ConnectionTable[BoundedHttpToolsProtocol]
    sweep: _Sweep

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head: int | None = 0  # bytes of the current head fed so far; None in a body
        peer = self.client[0] if self.client is not None else None
        verdict, room = self.table.admit(self, peer, self.loop.time())
        if verdict is not Verdict.ADMITTED:
            self.connections.discard(self)  # not one of uvicorn's to wait for at shutdown
            transport.write(_REFUSED[verdict])
            transport.close()
            return
        if room is not None:
            room.transport.abort()  # its descriptor now, whatever it has not yet written
        self.sweep.arm(self.loop)

    def connection_lost(self, exc: Exception | None) -> None:
        self.table.forget(self)
        super().connection_lost(exc)

    def head_late(self) -> None:
        """The table let this connection go: its head did not arrive by the deadline."""
        if self._head:
            self.transport.write(_HEAD_LATE)
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        try:
            self._feed(data)
        except _Refused as r:
            self._refuse(r)
        except httptools.HttpParserError as exc:
            if isinstance(exc.__context__, _Refused):  # raised in a parser callback
                self._refuse(exc.__context__)
                return
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()

    def _feed(self, data: bytes) -> None:
        while data:
            if self._head is None:  # in a body: uvicorn's flow control bounds what is held
                self.parser.feed_data(data)
                return
            room = self.limits.max_head - self._head
            if room <= 0:
                raise _Refused(431, "the request head is too large")
            chunk, data = data[:room], data[room:]
            self._head += len(chunk)
            self.parser.feed_data(chunk)
            # If the head completed inside `chunk`, the rest is body (or the next request).

    def _refuse(self, r: _Refused) -> None:
        self.logger.info("refused a request head: %s", r)
        if self.cycle is not None and not self.cycle.response_complete:
            # A pipelined request while an answer is still being written: no second answer
            # can be put on the wire in order, so the connection just closes.
            self.transport.close()
            return
        self.transport.write(_problem(r.status, str(r)))
        self.transport.close()

    # -- parser callbacks ------------------------------------------------------------------
    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head is None:
            self._head = 0
        self.table.head_begins(self, self.loop.time())

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > self.limits.max_line:
            raise _Refused(414, "the request target is too long")

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) + len(value) > self.limits.max_line:
            raise _Refused(431, "a request header is too large")
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._head = None
        self.table.head_complete(self)
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.transport is self.transport:
            cycle.transport = _HeadWithBody(self.transport)  # type: ignore[assignment]

    def on_response_complete(self) -> None:
        cycle = self.cycle
        if cycle is not None and isinstance(cycle.transport, _HeadWithBody):
            cycle.transport.flush()  # an answer with no body (HEAD, 204, 304): its head now
        next_in_line = bool(self.pipeline)
        super().on_response_complete()
        if not next_in_line and self._head is not None and not self.transport.is_closing():
            self.table.answered(self, self.loop.time(), head_begun=self._head > 0)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._head = 0
        cycle = self.cycle
        if cycle is not None and cycle.response_complete and not self.transport.is_closing():
            # Answered before its body ended, and kept open: it waits from now.
            self.table.answered(self, self.loop.time(), head_begun=False)


class _HeadWithBody:
    """The transport as one request's cycle sees it: a response head (a write that begins
    `HTTP/1.1 ` and is not a 1xx) is held and written together with the next write."""

    __slots__ = ("_held", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
        elif data.startswith(b"HTTP/1.1 ") and not data.startswith(b"HTTP/1.1 1"):
            self._held = bytes(data)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> object:  # is_closing, get_extra_info...
        return getattr(self._transport, name)


def bounded_protocol(
    limits: HeadLimits, connections: ConnectionLimits | None = None
) -> type[BoundedHttpToolsProtocol]:
    """The protocol class for one server's limits (uvicorn takes a class, not an instance):
    its connections share one table and one timer."""
    table: ConnectionTable[BoundedHttpToolsProtocol] = ConnectionTable(
        connections or ConnectionLimits()
    )
    attributes = {"limits": limits, "table": table, "sweep": _Sweep(table)}
    return type("BoundedHttpTools", (BoundedHttpToolsProtocol,), attributes)
