"""A TCP proxy in front of PostgreSQL that a test can cut and restore: a real outage.

`async with PgProxy(url) as proxy:` listens on 127.0.0.1 (an ephemeral port) and forwards each
connection to the server of `url`; `proxy.url` is `url` through the proxy. `cut()` aborts every
open connection (both ends see a reset, as when a server or a network goes away) and refuses
new ones (accepted, then reset at once, so a client fails fast instead of timing out);
`restore()` lets connections through again. A mock that raises `StoreUnavailable` shows what the
runtime does with an error; this shows what the driver and its pool do with a dead socket.

Each connection is served by the task asyncio's server gives it, with its two pumps in a
TaskGroup, so no pump outlives its connection; the proxy never reads what it forwards.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

_CHUNK = 65_536


class PgProxy:
    def __init__(self, upstream_url: str) -> None:
        parts = urlsplit(upstream_url)
        self._upstream = parts
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 5432
        self._server: asyncio.Server | None = None
        self._links: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._serving: set[asyncio.Task[None]] = set()  # asyncio's task per connection
        self._up = True
        self.port = 0
        self.accepted = 0  # connections forwarded
        self.refused = 0  # connections reset because the proxy was cut

    def __repr__(self) -> str:
        state = "up" if self._up else "cut"
        return (
            f"PgProxy({state}, port={self.port}, open={len(self._links)}, "
            f"accepted={self.accepted}, refused={self.refused})"
        )

    @property
    def url(self) -> str:
        """The upstream URL, with its host and port replaced by the proxy's."""
        p = self._upstream
        user = p.netloc.rpartition("@")[0]
        netloc = f"{user}@127.0.0.1:{self.port}" if user else f"127.0.0.1:{self.port}"
        return urlunsplit(p._replace(netloc=netloc))

    async def __aenter__(self) -> PgProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        self.cut()
        if server is not None:
            await server.wait_closed()
        # Python 3.11's wait_closed() does not wait for the connections: a task still serving
        # one when the loop closes would be cancelled, and asyncio logs that as an error.
        if self._serving:
            await asyncio.wait(self._serving)

    def cut(self) -> None:
        """Abort every open connection and reset new ones until `restore()`."""
        self._up = False
        for client, upstream in list(self._links):
            client.transport.abort()
            upstream.transport.abort()

    def restore(self) -> None:
        self._up = True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._serving.add(task)
        try:
            await self._forward(reader, writer)
        finally:
            self._serving.discard(task)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._up:
            self.refused += 1
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(self._host, self._port)
        except OSError:
            writer.transport.abort()
            return
        if not self._up:  # cut while connecting upstream
            self.refused += 1
            writer.transport.abort()
            up_writer.transport.abort()
            return
        self.accepted += 1
        link = (writer, up_writer)
        self._links.add(link)
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(_pump(reader, up_writer, link))
                tg.create_task(_pump(up_reader, writer, link))
        finally:
            self._links.discard(link)


async def _pump(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    link: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
) -> None:
    """Copy one direction until either side ends; then end both (the other pump follows)."""
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
    for w in link:
        w.transport.abort()
