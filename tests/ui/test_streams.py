"""The dashboard's event streams (`GET /ui/events`) on a real `yoke serve`: one tenant cannot
take every stream the server allows and lock the others out of their live dashboards; a
stream closed by its client gives its place back."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

from tests.server.conftest import TOKENS
from tests.server.e2e import Running
from yoke.server.ui.sse import PER_VIEWER

ATTEMPTS = 1000  # the server's limit on streams in all (`Hub.max_streams`)

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def open_stream(url: str, who: str) -> tuple[int, Stream]:
    """Open `GET /ui/events` as `who` on a socket of its own: (status, the open socket)."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    writer.write(
        f"GET /ui/events HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        f"Authorization: Bearer {TOKENS[who][0]}\r\n\r\n".encode()
    )
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 30)
    return int(status_line.split()[1]), (reader, writer)


async def close_all(streams: list[Stream]) -> None:
    for _, writer in streams:
        writer.close()
    await asyncio.gather(*(w.wait_closed() for _, w in streams), return_exceptions=True)


async def test_one_tenant_cannot_take_every_stream(server: Running) -> None:
    opened = await asyncio.gather(*(open_stream(server.url, "acme") for _ in range(ATTEMPTS)))
    try:
        statuses = [status for status, _ in opened]
        assert statuses.count(200) == PER_VIEWER
        assert statuses.count(429) == ATTEMPTS - PER_VIEWER
        status, theirs = await open_stream(server.url, "globex")
        assert status == 200, "another tenant was locked out of its live dashboard"
        await close_all([theirs])
        status, ops = await open_stream(server.url, "operator")
        assert status == 200
        await close_all([ops])
    finally:
        await close_all([s for _, s in opened])
    # Closed streams give their places back: acme may open streams again.
    deadline = time.monotonic() + 20
    while True:
        status, again = await open_stream(server.url, "acme")
        await close_all([again])
        if status == 200 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)  # the server notices the disconnects at its own pace
    assert status == 200


async def test_a_scraper_opens_no_stream(server: Running) -> None:
    """A METRICS token reads /metrics alone: no dashboard, no stream."""
    status, stream = await open_stream(server.url, "scraper")
    await close_all([stream])
    assert status == 401
    status, stream = await open_stream(server.url, "acme")
    await close_all([stream])
    assert status == 200
