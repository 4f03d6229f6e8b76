"""The protocol tells its table each turn of a connection's life, driven byte by byte over a
transport that only records (no socket): the phases a kept-alive connection goes through, an
answer given before its request's body ended, and the connection closed to make room."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState

from yoke.server.connections import ConnectionLimits, Phase
from yoke.server.protocol import BoundedHttpToolsProtocol, HeadLimits, bounded_protocol


class Recording:
    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.written = b""
        self.state = "open"

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": (self.peer, 5555), "sockname": ("127.0.0.1", 8000)}.get(name)

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.state != "open"

    def close(self) -> None:
        self.state = "closed"

    def abort(self) -> None:
        self.state = "aborted"

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


async def early(scope: Any, receive: Any, send: Any) -> None:
    """Answers at once, reading none of the body."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def server(capacity: int | None = None) -> type[BoundedHttpToolsProtocol]:
    return bounded_protocol(
        HeadLimits(max_line=16 << 10, max_head=64 << 10), ConnectionLimits(capacity=capacity)
    )


def connect(cls: type[BoundedHttpToolsProtocol], peer: str) -> BoundedHttpToolsProtocol:
    config = Config(early, lifespan="off", access_log=False)
    config.load()
    protocol = cls(config=config, server_state=ServerState(), app_state={})
    protocol.connection_made(Recording(peer))  # type: ignore[arg-type]
    return protocol


async def answered() -> None:
    for _ in range(3):  # the app's task runs and finishes
        await asyncio.sleep(0)


async def test_a_kept_alive_connection_waits_idle_then_owes_a_head() -> None:
    cls = server()
    p = connect(cls, "10.0.0.1")
    assert cls.table.phase(p) is Phase.HEAD
    p.data_received(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
    assert cls.table.phase(p) is Phase.REQUEST
    await answered()
    assert cls.table.phase(p) is Phase.IDLE
    p.data_received(b"GE")
    assert cls.table.phase(p) is Phase.HEAD


async def test_an_answer_before_the_body_ended_waits_idle_once_the_body_has() -> None:
    cls = server()
    p = connect(cls, "10.0.0.1")
    p.data_received(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\n\r\nab")
    await answered()
    assert p.transport.written.startswith(b"HTTP/1.1 200")  # type: ignore[attr-defined]
    assert cls.table.phase(p) is Phase.REQUEST  # its body is still coming
    p.data_received(b"cd")
    assert cls.table.phase(p) is Phase.IDLE


async def test_the_connection_closed_to_make_room_is_aborted_and_forgotten() -> None:
    cls = server(capacity=2)
    first, second = connect(cls, "10.0.0.1"), connect(cls, "10.0.0.2")
    second.data_received(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")  # in a request: stays
    third = connect(cls, "10.0.0.3")
    assert first.transport.state == "aborted"  # type: ignore[attr-defined]
    assert cls.table.phase(first) is None and cls.table.phase(third) is Phase.HEAD
    fourth = connect(cls, "10.0.0.4")  # room made from the third, the longest waiting now
    assert third.transport.state == "aborted"  # type: ignore[attr-defined]
    await answered()
    assert cls.table.stats().made_room == 2 and cls.table.open == 2
    assert fourth.transport.state == "open"  # type: ignore[attr-defined]
