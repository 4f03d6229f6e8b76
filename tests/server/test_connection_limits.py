"""What one client's connections can do to another's, against a real `yoke serve` over raw
sockets: 1,200 slow-loris connections at an open-file limit of 1,024 (hard limit too, so only
the reserve and making room can hold) leave another client's 100 requests all answered; a head
not finished in `YOKE_HEADER_TIMEOUT_SECS` is answered 408 and closed, while an idle kept-alive
connection and a long-poll in progress are not; the 257th connection of one address is refused
at once while another address is served, and a trusted proxy is not capped as one client; the
server raises its soft open-file limit to the hard limit.

Loopback routes all of 127.0.0.0/8, so a socket bound to 127.0.0.2 (or 127.0.1.x) before it
connects is another client address to the server.
"""

from __future__ import annotations

import contextlib
import resource
import select
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.server.e2e import Running, yoke_serve
from tests.server.slowloris import SLOW_HEAD, SlowLoris

pytestmark = pytest.mark.slow

ANOTHER_CLIENT = "127.0.0.2"


@pytest.fixture(autouse=True)
def enough_descriptors_here() -> None:
    """This process opens 1,200 sockets and more: its soft limit up to its hard limit."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard < 2048:
        pytest.skip(f"the hard open-file limit here is {hard}: too few to open 1,200 sockets")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def connect(srv: Running, source: str) -> socket.socket:
    s = socket.socket()
    s.bind((source, 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", srv.port))
    return s


def read_all(s: socket.socket, timeout: float) -> bytes:
    """What the server sends until it closes (b"" if it only closed), or TimeoutError."""
    s.settimeout(timeout)
    got = b""
    try:
        while chunk := s.recv(65536):
            got += chunk
    except ConnectionResetError:
        pass
    return got


def still_open(*socks: socket.socket) -> bool:
    """Nothing to read from any of them (no answer, no end of stream) within a short look."""
    poll = select.poll()
    for s in socks:
        poll.register(s, select.POLLIN)
    return poll.poll(300) == []


def test_1200_slow_connections_at_1024_descriptors_leave_another_client_served(
    database_url: str, tmp_path: Path
) -> None:
    attackers = [f"127.0.1.{n}" for n in range(1, 7)]  # 200 each: under the per-client cap
    with (
        yoke_serve(database_url, tmp_path, nofile=(1024, 1024)) as srv,
        SlowLoris(srv.port, 1200, attackers) as flood,
    ):
        flood.wait_ticks(3)  # every connection opened and trickling for two ticks
        transport = httpx.HTTPTransport(local_address=ANOTHER_CLIENT)
        answers: list[int | str] = []
        slowest = 0.0
        with httpx.Client(
            base_url=srv.url, transport=transport, timeout=10, headers={"connection": "close"}
        ) as client:
            for n in range(100):
                t = time.monotonic()
                try:
                    if n % 2:
                        r = client.post("/v1/starts", json={"workflow": "echo", "input": n})
                    else:
                        r = client.get("/readyz")  # the store answers under the flood
                    answers.append(r.status_code)
                except httpx.TransportError as exc:
                    answers.append(type(exc).__name__)
                slowest = max(slowest, time.monotonic() - t)
        assert all(isinstance(a, int) and 200 <= a < 300 for a in answers), answers
        assert slowest < 3.0, slowest
        assert flood.opened >= 1200
    assert "Too many open files" not in srv.log.read_text()


def test_a_head_not_finished_in_time_is_answered_408_and_closed(tmp_path: Path) -> None:
    env = {"YOKE_HEADER_TIMEOUT_SECS": "1", "YOKE_MAX_RUNNING": "1"}
    with yoke_serve(f"sqlite:///{tmp_path}/t.db", tmp_path, env=env) as srv:
        with httpx.Client(base_url=srv.url, timeout=10) as client:
            client.post("/v1/starts", json={"workflow": "hold", "input": 60})
            queued = client.post("/v1/starts", json={"workflow": "hold"}).json()["start_id"]
        silent = connect(srv, ANOTHER_CLIENT)
        trickling = connect(srv, ANOTHER_CLIENT)
        kept_alive = connect(srv, ANOTHER_CLIENT)
        kept_trickling = connect(srv, ANOTHER_CLIENT)  # its second request's head trickles
        long_poll = connect(srv, ANOTHER_CLIENT)
        for s in (kept_alive, kept_trickling):
            s.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
            assert s.recv(65536).startswith(b"HTTP/1.1 200")
        long_poll.sendall(
            f"GET /v1/starts/{queued}?wait=3 HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n".encode()
        )
        t = time.monotonic()
        for byte in SLOW_HEAD[:20]:  # a byte every 0.1 s: 2 s, past the 1 s deadline
            for s in (trickling, kept_trickling):
                with contextlib.suppress(OSError):
                    s.send(bytes([byte]))
            time.sleep(0.1)  # the trickle is the test's input
        assert read_all(silent, 5) == b""  # not one byte came: just closed
        for s in (trickling, kept_trickling):
            late = read_all(s, 5)
            assert late.startswith(b"HTTP/1.1 408 "), late
            assert b"connection: close" in late
        assert time.monotonic() - t < 5
        # Idle between requests is uvicorn's keep-alive (30 s), and a request in progress has
        # no deadline: both outlived the head deadline.
        kept_alive.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        assert kept_alive.recv(65536).startswith(b"HTTP/1.1 200")
        answer = long_poll.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200"), answer
        assert time.monotonic() - t >= 2.5  # the long poll waited its 3 s
        for s in (silent, trickling, kept_alive, kept_trickling, long_poll):
            s.close()


def _soft_and_hard(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no open-file limit in /proc")


def test_the_257th_connection_of_one_address_is_refused_while_another_is_served(
    tmp_path: Path,
) -> None:
    hard = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 8192)
    env = {"YOKE_HEADER_TIMEOUT_SECS": "60"}  # the idle connections stay for the test
    with (
        yoke_serve(f"sqlite:///{tmp_path}/c.db", tmp_path, env=env, nofile=(1024, hard)) as srv,
        contextlib.ExitStack() as held,
    ):
        assert _soft_and_hard(srv.process.pid) == (hard, hard)  # raised at start
        one = [held.enter_context(connect(srv, "127.0.0.3")) for _ in range(256)]
        assert still_open(*one)
        refused = read_all(held.enter_context(connect(srv, "127.0.0.3")), 5)
        assert refused.startswith(b"HTTP/1.1 429 "), refused
        assert b"retry-after: 1" in refused
        with httpx.Client(
            base_url=srv.url,
            transport=httpx.HTTPTransport(local_address=ANOTHER_CLIENT),
            timeout=10,
        ) as client:
            assert client.get("/healthz").status_code == 200
        # A connection closed gives its place back.
        one.pop().close()
        deadline = time.monotonic() + 10
        while True:
            again = held.enter_context(connect(srv, "127.0.0.3"))
            if still_open(again):
                break
            assert time.monotonic() < deadline, "the closed connection's place never came back"
        # The default trusted proxy (127.0.0.1) carries many clients: not capped as one.
        proxied = [held.enter_context(connect(srv, "127.0.0.1")) for _ in range(300)]
        assert still_open(*proxied)
        proxied[-1].sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        assert proxied[-1].recv(65536).startswith(b"HTTP/1.1 200")
