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

Bodies are bounded in `guards.Guard` (they reach the app only as it asks for them, and
uvicorn stops reading past 64 KiB not asked for). This module must never know a route.
"""

from __future__ import annotations

import asyncio
import http
from dataclasses import dataclass

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


@dataclass(frozen=True, kw_only=True, slots=True)
class HeadLimits:
    max_line: int  # the request target, or one header line (name and value)
    max_head: int  # the request line and every header


class _Refused(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    limits = HeadLimits(max_line=16 << 10, max_head=64 << 10)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head: int | None = 0  # bytes of the current head fed so far; None in a body

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
        body = (
            f'{{"type":"about:blank","title":"{http.HTTPStatus(r.status).phrase}",'
            f'"status":{r.status},"detail":"{r}"}}'
        ).encode()
        head = (
            f"HTTP/1.1 {r.status} {http.HTTPStatus(r.status).phrase}\r\n"
            "content-type: application/problem+json\r\n"
            f"content-length: {len(body)}\r\n"
            "connection: close\r\n\r\n"
        ).encode()
        self.transport.write(head + body)
        self.transport.close()

    # -- parser callbacks ------------------------------------------------------------------
    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head is None:
            self._head = 0

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
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.transport is self.transport:
            cycle.transport = _HeadWithBody(self.transport)  # type: ignore[assignment]

    def on_response_complete(self) -> None:
        cycle = self.cycle
        if cycle is not None and isinstance(cycle.transport, _HeadWithBody):
            cycle.transport.flush()  # an answer with no body (HEAD, 204, 304): its head now
        super().on_response_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._head = 0


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


def bounded_protocol(limits: HeadLimits) -> type[BoundedHttpToolsProtocol]:
    """The protocol class for one server's limits (uvicorn takes a class, not an instance)."""
    return type("BoundedHttpTools", (BoundedHttpToolsProtocol,), {"limits": limits})
