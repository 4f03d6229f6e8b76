"""A TCP proxy in front of PostgreSQL that a test can cut and restore: a real outage.

`async with PgProxy(url) as proxy:` listens on 127.0.0.1 (an ephemeral port) and forwards each
connection to the server of `url`; `proxy.url` is `url` through the proxy. `cut()` aborts every
open connection (both ends see a reset, as when a server or a network goes away) and refuses
new ones (accepted, then reset at once, so a client fails fast instead of timing out);
`restore()` lets connections through again. A mock that raises `StoreUnavailable` shows what the
runtime does with an error; this shows what the driver and its pool do with a dead socket.

The chaos suite (tests/ha) also needs a network that goes silent: `blackhole()` keeps every
connection open and forwards nothing either way (new connections are accepted and held), as
when packets are dropped, until `restore()` lets what was held through, as TCP's retransmission
would. `reset()` aborts the open connections and lets new ones through. `drop_upstream()` closes
only the server's ends, as PostgreSQL does when its keepalive gives up on a silent client,
while the client's ends stay silent. `upstream_ports()` names this proxy's sessions in
`pg_stat_activity.client_port`, so a test can `pg_terminate_backend` them.

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
        self._flowing = asyncio.Event()  # cleared while blackholed
        self._flowing.set()
        self._held: set[asyncio.StreamWriter] = set()  # accepted while blackholed, not linked
        self.port = 0
        self.accepted = 0  # connections forwarded
        self.refused = 0  # connections reset because the proxy was cut

    def __repr__(self) -> str:
        state = "blackholed" if not self._flowing.is_set() else "up" if self._up else "cut"
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
        self._flowing.set()  # what waits on a blackhole sees its aborted sockets and ends
        if server is not None:
            await server.wait_closed()
        # Python 3.11's wait_closed() does not wait for the connections: a task still serving
        # one when the loop closes would be cancelled, and asyncio logs that as an error.
        if self._serving:
            await asyncio.wait(self._serving)

    def cut(self) -> None:
        """Abort every open connection and reset new ones until `restore()`."""
        self._up = False
        self.reset()

    def restore(self) -> None:
        self._up = True
        self._flowing.set()

    def blackhole(self) -> None:
        """Forward nothing, close nothing: every connection hangs until `restore()`."""
        self._flowing.clear()

    def reset(self) -> None:
        """Abort every open (or held) connection; new ones pass as before."""
        for client, upstream in list(self._links):
            client.transport.abort()
            upstream.transport.abort()
        for held in list(self._held):
            held.transport.abort()

    def drop_upstream(self) -> None:
        """Close the server's end of each connection only (its keepalive gave up on us)."""
        for _, upstream in list(self._links):
            upstream.transport.abort()

    def upstream_ports(self) -> set[int]:
        """The local ports of the connections to the server: its sessions' `client_port`."""
        ports = set()
        for _, upstream in list(self._links):
            sock = upstream.get_extra_info("sockname")
            if sock:
                ports.add(int(sock[1]))
        return ports

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._serving.add(task)
        try:
            await self._forward(reader, writer)
        finally:
            self._serving.discard(task)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._flowing.is_set():  # a silent network: the client waits, unanswered
            self._held.add(writer)
            try:
                await self._flowing.wait()
            finally:
                self._held.discard(writer)
            if writer.transport.is_closing():
                return
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
                tg.create_task(_pump(reader, up_writer, link, self._flowing))
                tg.create_task(_pump(up_reader, writer, link, self._flowing))
        finally:
            self._links.discard(link)


async def _pump(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    link: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
    flowing: asyncio.Event,
) -> None:
    """Copy one direction until either side ends; then end both (the other pump follows).
    While `flowing` is clear nothing is read or written: the socket buffers fill, as on a
    network that drops every packet."""
    with contextlib.suppress(ConnectionError, OSError):
        while True:
            await flowing.wait()
            data = await reader.read(_CHUNK)
            if not data:
                break
            await flowing.wait()
            writer.write(data)
            await writer.drain()
    await flowing.wait()  # a silent network does not carry the news of a close either
    for w in link:
        w.transport.abort()
