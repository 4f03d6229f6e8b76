"""Behind a TLS proxy (a real `yoke serve`): the session cookie is Secure when a proxy in
`YOKE_FORWARDED_ALLOW_IPS` says the request came over https, and only then; the login throttle
counts the client that proxy names. The proxies here are loopback addresses of their own
(127.0.0.2 is this machine too)."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.server.conftest import TOKENS, TOKENS_TOML
from tests.server.e2e import yoke_serve
from yoke.server.ui.throttle import FAILURES

HTTPS = {"X-Forwarded-Proto": "https"}


def _login(url: str, source: str, headers: dict[str, str]) -> httpx.Response:
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(transport=transport, base_url=url, timeout=10) as c:
        return c.post("/ui/login", data={"token": TOKENS["acme"][0]}, headers=headers)


def _secure(r: httpx.Response) -> bool:
    assert r.status_code == 303, r.text
    return "; Secure" in r.headers["set-cookie"]


def test_the_cookie_is_secure_only_when_a_trusted_proxy_says_https(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS_TOML)
    env = {"YOKE_TOKENS_FILE": str(tokens), "YOKE_FORWARDED_ALLOW_IPS": "127.0.0.2"}
    with yoke_serve(f"sqlite:///{tmp_path}/p.db", tmp_path, env=env) as running:
        assert _secure(_login(running.url, "127.0.0.2", HTTPS))
        assert not _secure(_login(running.url, "127.0.0.2", {}))
        assert not _secure(_login(running.url, "127.0.0.1", HTTPS))  # not a trusted proxy

        # The throttle counts the client the trusted proxy names, not the proxy.
        transport = httpx.HTTPTransport(local_address="127.0.0.2")
        with httpx.Client(transport=transport, base_url=running.url, timeout=10) as proxy:
            guesser = {**HTTPS, "X-Forwarded-For": "203.0.113.9"}
            for i in range(FAILURES):
                r = proxy.post("/ui/login", data={"token": f"guess-{i}"}, headers=guesser)
                assert r.status_code == 401
            assert proxy.post("/ui/login", data={"token": "x"}, headers=guesser).status_code == 429
            someone = {**HTTPS, "X-Forwarded-For": "203.0.113.10"}
            assert _secure(_login(running.url, "127.0.0.2", someone))
