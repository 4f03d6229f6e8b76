"""The dashboard's login form limits failures per client address: past the limit it answers 429
with Retry-After before it looks at the token (so no guess is judged), other clients log in as
before, and the memory of failures is bounded."""

from __future__ import annotations

import httpx

from tests.server.conftest import TOKENS, Serve
from yoke.server import Server
from yoke.server.ui.throttle import FAILURES, LoginThrottle, client_key


def _from(server: Server, host: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=server, client=(host, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://localhost")


async def test_a_client_past_its_failures_is_refused_before_its_token_is_judged(
    serve: Serve,
) -> None:
    server, _ = await serve()
    async with _from(server, "203.0.113.7") as guesser, _from(server, "198.51.100.2") as other:
        for i in range(FAILURES):
            bad = await guesser.post("/ui/login", data={"token": f"guess-{i}"})
            assert bad.status_code == 401
        good = {"token": TOKENS["acme"][0]}
        refused = await guesser.post("/ui/login", data=good)  # even a valid token, now
        assert refused.status_code == 429 and "too many failed logins" in refused.text
        assert 1 <= int(refused.headers["Retry-After"]) <= 300
        assert "set-cookie" not in refused.headers
        ok = await other.post("/ui/login", data=good)
        assert ok.status_code == 303 and "yoke_session=" in ok.headers["set-cookie"]


def test_failures_leave_the_window_and_memory_stays_bounded() -> None:
    now = [0.0]
    throttle = LoginThrottle(failures=3, window=60.0, max_clients=2, clock=lambda: now[0])
    for _ in range(3):
        assert throttle.retry_after("a") is None
        throttle.failed("a")
        now[0] += 1.0
    assert throttle.retry_after("a") == 57.0  # the first failure leaves the window at 60
    now[0] = 60.5
    assert throttle.retry_after("a") is None
    throttle.failed("a")  # one failure in the window again: 3 in the deque, the first at 1.0
    assert throttle.retry_after("a") == 0.5
    throttle.failed("b")
    throttle.failed("c")  # a third client: the one failed least lately ("a") is forgotten
    assert len(throttle) == 2 and throttle.retry_after("a") is None


def test_an_ipv6_client_is_counted_by_its_64() -> None:
    assert client_key("2001:db8:1:2::1") == client_key("2001:db8:1:2:ffff::9")
    assert client_key("2001:db8:1:3::1") != client_key("2001:db8:1:2::1")
    assert client_key("::ffff:192.0.2.1") == client_key("192.0.2.1") == "192.0.2.1"
    assert client_key(None) == "?"
