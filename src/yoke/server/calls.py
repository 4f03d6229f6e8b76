"""What a handler reads of a request (`Incoming`), and `Call`, the light request of a lean row.

A Starlette `Request` is built for every routed request and grows what it is asked for:
`Headers` scanned again for each header, query parameters parsed even when there are none, the
body read through an async generator. On the hot `POST /v1/starts` those were a good part of
the server's own work, so a lean row's handler is given a `Call` instead: the headers picked
from the scope in one pass (lower-case names; the first of a repeated header wins, as with
`Headers.get`), no query parsing for an empty query string, and the body read straight from
`receive`. Both satisfy `Incoming`, the part of a request the shared helpers and the handlers
of lean rows read, so one handler serves the lean dispatch and the router alike.

This module must never decide anything about a request: it only reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from starlette.datastructures import URL, QueryParams
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope

_NO_QUERY = QueryParams()


class Incoming(Protocol):
    """The part of a request that a lean row's handler may read."""

    @property
    def scope(self) -> Scope: ...

    @property
    def method(self) -> str: ...

    @property
    def url(self) -> URL: ...

    @property
    def headers(self) -> Mapping[str, str]: ...  # names in lower case

    @property
    def query_params(self) -> Mapping[str, str]: ...

    async def body(self) -> bytes: ...


class Call:
    """One request, read from the ASGI scope and `receive` (an `Incoming`)."""

    __slots__ = ("_body", "_query", "_receive", "headers", "scope")

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self.scope = scope
        self._receive = receive
        self._body: bytes | None = None
        self._query: QueryParams | None = None
        headers: dict[str, str] = {}
        for name, value in scope["headers"]:
            key = name.decode("latin-1")
            if key not in headers:
                headers[key] = value.decode("latin-1")
        self.headers: Mapping[str, str] = headers

    @property
    def method(self) -> str:
        method: str = self.scope["method"]
        return method

    @property
    def url(self) -> URL:
        return URL(scope=self.scope)

    @property
    def query_params(self) -> QueryParams:
        if self._query is None:
            raw = self.scope["query_string"]
            self._query = QueryParams(raw) if raw else _NO_QUERY
        return self._query

    async def body(self) -> bytes:
        """The whole body, read once (`guards.Guard` bounds it as it arrives)."""
        if self._body is None:
            chunks: list[bytes] = []
            while True:
                message = await self._receive()
                if message["type"] == "http.request":
                    chunks.append(message.get("body", b""))
                    if not message.get("more_body", False):
                        break
                elif message["type"] == "http.disconnect":
                    raise ClientDisconnect()
            self._body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return self._body
