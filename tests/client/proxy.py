"""A TCP proxy in front of a real server, for the client's retry tests: it forwards each request
on a connection of its own, and can lose an answer (read it from the server, then close the
client's connection without it) or answer in the server's place (a 503 as a standby gives).
It records what each request carried. It runs its own event loop in a thread, so sync and
async clients both use it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

# What to do with the request of a given number (0 = the first): forward, lose, or 503.
Plan = Callable[[int], str]
STANDBY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\n"
    b"retry-after: 1\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
)
NOT_LEADER = (
    b'{"type":"https://yoke.dev/problems/not-leader","title":"Not the leader",'
    b'"status":503,"detail":"a standby","leader":"elsewhere"}'
)


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    at: float


@dataclass
class Proxy:
    upstream_port: int
    plan: Plan
    port: int = 0
    seen: list[Seen] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {
                k.strip().lower(): v.strip()
                for k, _, v in (line.partition(":") for line in lines[1:] if line)
            }
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            number = len(self.seen)
            self.seen.append(Seen(method, path, headers, asyncio.get_running_loop().time()))
            action = self.plan(number)
            if action == "503":
                writer.write(STANDBY % (len(NOT_LEADER), NOT_LEADER))
                await writer.drain()
                return
            answer = await self._forward(head, body)
            if action == "forward":
                status_line, rest = answer.split(b"\r\n", 1)
                writer.write(status_line + b"\r\nconnection: close\r\n" + rest)
                await writer.drain()
            # "lose": the server acted and answered; the client hears nothing.
        finally:
            writer.close()

    async def _forward(self, head: bytes, body: bytes) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        try:
            writer.write(head + body)
            await writer.drain()
            answer_head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in answer_head.decode("latin-1").split("\r\n"):
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            return answer_head + await reader.readexactly(length)
        finally:
            writer.close()


@contextmanager
def proxy(upstream_port: int, plan: Plan) -> Iterator[Proxy]:
    p = Proxy(upstream_port, plan)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop: asyncio.Event | None = None

    async def main() -> None:
        nonlocal stop
        stop = asyncio.Event()
        server = await asyncio.start_server(p._handle, "127.0.0.1", 0)
        p.port = server.sockets[0].getsockname()[1]
        ready.set()
        async with server:
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield p
    finally:
        assert stop is not None
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()
