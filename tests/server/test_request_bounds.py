"""Request lines, headers and bodies are bounded before they are held, against a real
`yoke serve`, over raw sockets: a 100 MiB chunked body is refused with 413 after the 1 MiB
bound, a 50 MiB header with 431 after 64 KiB, a long request target with 414, and the server's
peak memory (VmHWM) grows by less than 20 MB through all of it."""

from __future__ import annotations

import select
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server.conftest import TOKENS, TOKENS_TOML
from tests.server.e2e import Running, yoke_serve

pytestmark = pytest.mark.slow

MiB = 1 << 20
CHUNK = b"x" * (64 << 10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("bounds")
    tokens = tmp / "tokens.toml"
    tokens.write_text(TOKENS_TOML)
    with yoke_serve(
        f"sqlite:///{tmp}/bounds.db", tmp, env={"YOKE_TOKENS_FILE": str(tokens)}
    ) as srv:
        yield srv


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def _connect(srv: Running) -> socket.socket:
    port = int(srv.url.rsplit(":", 1)[1])
    return socket.create_connection(("127.0.0.1", port), timeout=30)


def stream(srv: Running, head: bytes, chunks: Iterator[bytes], limit: int) -> tuple[bytes, int]:
    """Send `head`, then `chunks` until the server answers (or `limit` bytes were sent);
    return the answer's first bytes and how many bytes were sent."""
    sent = 0
    with _connect(srv) as s:
        s.sendall(head)
        try:
            for chunk in chunks:
                readable, _, _ = select.select([s], [], [], 0)
                if readable or sent >= limit:
                    break
                s.sendall(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed while we were still sending
        s.settimeout(10)
        try:
            answer = s.recv(4096)
        except ConnectionResetError:
            answer = b""
    return answer, sent


def forever(chunk: bytes) -> Iterator[bytes]:
    while True:
        yield chunk


def chunked(chunk: bytes) -> Iterator[bytes]:
    framed = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
    while True:
        yield framed


def auth() -> bytes:
    return f"Authorization: Bearer {TOKENS['acme'][0]}\r\n".encode()


def healthy(srv: Running) -> None:
    r = httpx.get(srv.url + "/healthz", timeout=5)
    assert r.status_code == 200


def test_a_chunked_body_is_refused_past_the_bound_without_being_held(server: Running) -> None:
    before = peak_rss_mb(server.process.pid)
    head = (
        b"POST /v1/starts HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth() + b"Content-Type: "
        b"application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    answer, sent = stream(server, head, chunked(CHUNK), limit=100 * MiB)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert sent < 20 * MiB, sent  # refused near the bound, not at the end
    healthy(server)
    assert peak_rss_mb(server.process.pid) - before < 20


def test_a_declared_length_past_the_bound_is_refused_unread(server: Running) -> None:
    head = (
        b"POST /v1/starts HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth() + b"Content-Type: "
        b"application/json\r\nContent-Length: %d\r\n\r\n" % (1000 * MiB)
    )
    answer, sent = stream(server, head, forever(CHUNK), limit=100 * MiB)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"connection: close" in answer.lower()
    assert sent < 20 * MiB, sent  # answered without waiting for the body
    healthy(server)


def test_a_huge_header_is_refused_after_the_head_bound(server: Running) -> None:
    before = peak_rss_mb(server.process.pid)
    head = b"GET /v1/limits HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
    answer, sent = stream(server, head, forever(b"a" * (64 << 10)), limit=50 * MiB)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    assert sent < 10 * MiB, sent
    # Many headers, each within the line bound, past the bound in all.
    many = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"p" * 8000) for i in range(12))
    answer, _ = stream(server, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + many, iter(()), 0)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    healthy(server)
    assert peak_rss_mb(server.process.pid) - before < 20


def test_one_long_header_line_is_431_and_a_long_target_is_414(server: Running) -> None:
    line = b"X-Big: " + b"b" * (17 << 10) + b"\r\n"
    answer, _ = stream(
        server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + line + b"\r\n", iter(()), 0
    )
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    target = b"/healthz?" + b"q" * (17 << 10)
    answer, _ = stream(server, b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n", iter(()), 0)
    assert answer.startswith(b"HTTP/1.1 414"), answer[:200]


def test_heads_and_bodies_within_the_bounds_are_served(server: Running) -> None:
    pad = {f"X-Pad-{i}": "p" * 12000 for i in range(4)}  # 48 KiB of headers, 12 KiB each
    r = httpx.get(server.url + "/healthz", headers=pad, timeout=10)
    assert r.status_code == 200
    big_input = "i" * (MiB - 1000)  # a body just under 1 MiB
    r = httpx.post(
        server.url + "/v1/starts",
        json={"workflow": "echo", "input": big_input},
        headers={"Authorization": f"Bearer {TOKENS['acme'][0]}"},
        timeout=30,
    )
    assert r.status_code == 201, r.text[:300]
