"""The server's HTTP protocol writes an answer in one piece, and `POST /v1/starts` is the lean row.

The protocol (`server/protocol.py`) is driven here over a transport that records its writes:
an answer of one body is one write (its head with its body), an answer without a body (HEAD)
is one write too, a `100 Continue` goes out at once on its own, and a streamed answer's head
rides with its first chunk. The lean dispatch (`routing.LeanRoutes`) answers `POST /v1/starts`
without Starlette's router, which every other route still goes through.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import uvicorn
from starlette.routing import Router
from starlette.types import Receive, Scope, Send
from uvicorn.server import ServerState

from yoke.server.protocol import HeadLimits, bounded_protocol

from .conftest import Serve


class Wire:
    """A transport that keeps what is written to it."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name)

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


async def small(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:  # read the whole request body (a 100-continue is sent as it is asked for)
        more = (await receive()).get("more_body", False)
    body = b'{"ok":true}'
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json"), (b"content-length", b"11")],
        }
    )
    if scope["path"] == "/stream":
        await send({"type": "http.response.body", "body": body[:5], "more_body": True})
        await send({"type": "http.response.body", "body": body[5:]})
    else:
        await send({"type": "http.response.body", "body": body})


async def exchange(request: bytes, *, app: Any = small) -> list[bytes]:
    cls = bounded_protocol(HeadLimits(max_line=16 << 10, max_head=64 << 10))
    config = uvicorn.Config(app, http=cls, lifespan="off", access_log=False)
    config.load()
    proto = cls(config=config, server_state=ServerState(), app_state={})
    wire = Wire()
    proto.connection_made(wire)  # type: ignore[arg-type]
    proto.data_received(request)
    for _ in range(200):  # the app runs as a task of this loop
        await asyncio.sleep(0)
        if (wire.writes and wire.writes[-1].endswith(b'{"ok":true}')) or wire.closed:
            break
    for _ in range(20):
        await asyncio.sleep(0)
    proto.connection_lost(None)
    return wire.writes


async def test_an_answer_with_one_body_is_one_write() -> None:
    [write] = await exchange(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert write.startswith(b"HTTP/1.1 200 OK\r\n") and write.endswith(b'\r\n\r\n{"ok":true}')


async def test_an_answer_without_a_body_is_one_write() -> None:
    [write] = await exchange(b"HEAD / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert write.startswith(b"HTTP/1.1 200 OK\r\n") and write.endswith(b"\r\n\r\n")


async def test_a_streamed_answer_sends_its_head_with_the_first_chunk() -> None:
    writes = await exchange(b"GET /stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert len(writes) == 2
    assert writes[0].startswith(b"HTTP/1.1 200 OK\r\n") and writes[0].endswith(b'{"ok"')
    assert writes[1] == b":true}"


async def test_a_100_continue_is_not_held_back() -> None:
    head = (
        b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"
    )
    cls = bounded_protocol(HeadLimits(max_line=16 << 10, max_head=64 << 10))
    config = uvicorn.Config(small, http=cls, lifespan="off", access_log=False)
    config.load()
    proto = cls(config=config, server_state=ServerState(), app_state={})
    wire = Wire()
    proto.connection_made(wire)  # type: ignore[arg-type]
    proto.data_received(head)
    for _ in range(50):
        await asyncio.sleep(0)
        if wire.writes:
            break
    assert wire.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]  # before the body is sent
    proto.data_received(b"{}")
    for _ in range(50):
        await asyncio.sleep(0)
    proto.connection_lost(None)
    assert len(wire.writes) == 2 and wire.writes[1].endswith(b'{"ok":true}')


async def test_post_starts_is_answered_without_the_router(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real = Router.__call__

    async def counted(self: Router, scope: Scope, receive: Receive, send: Send) -> None:
        calls.append(scope["path"])
        await real(self, scope, receive, send)

    monkeypatch.setattr(Router, "__call__", counted)
    _, client = await serve(tokens=False)
    c = client("local")
    r = await c.post("/v1/starts", json={"workflow": "echo", "input": 1})
    assert r.status_code == 201, r.text
    bad = await c.post("/v1/starts", json={"workflow": "echo", "priority": "high"})
    assert bad.status_code == 422 and bad.headers["content-type"] == "application/problem+json"
    assert calls == []  # the lean row answered both, the error as the router's handlers do
    shown = await c.get(f"/v1/starts/{r.json()['start_id']}")
    assert shown.status_code == 200 and calls == [f"/v1/starts/{r.json()['start_id']}"]
