"""A server without tokens (every local caller is the admin) cannot be driven by a web page:
against a real `yoke serve`, a foreign `Host` is 421 (DNS rebinding), a state-changing request
from a foreign `Origin` is 403, a body not sent as `application/json` is 415 (a cross-site
`text/plain` POST), and none of them changes anything; local callers are served as before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server.e2e import Running, yoke_serve
from tests.server.test_errors import assert_problem

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("local")
    with yoke_serve(f"sqlite:///{tmp}/local.db", tmp, env={"YOKE_TOKENS_FILE": ""}) as srv:
        yield srv


def _limits(srv: Running) -> dict[str, object]:
    body: dict[str, object] = httpx.get(srv.url + "/v1/limits", timeout=10).json()
    return body


def test_the_cross_site_post_of_the_report_is_refused(local: Running) -> None:
    before = _limits(local)
    # A page on evil.example, the browser sending what a form or fetch() without preflight can.
    r = httpx.post(
        local.url + "/v1/starts",
        content=b'{"workflow": "echo"}',
        headers={
            "Content-Type": "text/plain",
            "Origin": "http://evil.example",
            "Host": "evil.example",
        },
        timeout=10,
    )
    assert_problem(r, 421)
    r = httpx.put(
        local.url + "/v1/limits",
        content=b'{"max_running": 0}',
        headers={"Content-Type": "text/plain", "Origin": "http://evil.example"},
        timeout=10,
    )
    assert_problem(r, 403)
    r = httpx.put(
        local.url + "/v1/limits",
        content=b'{"max_running": 0}',
        headers={"Content-Type": "text/plain"},
        timeout=10,
    )
    assert_problem(r, 415)
    assert _limits(local) == before


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:8000",
        "10.0.0.1",
        "localhost.evil.example",
        "[::2]",
        "x" * 300 + ".localhost",  # no name is that long: refused, and not kept in the cache
    ],
)
def test_a_foreign_host_is_421_even_for_a_read(local: Running, host: str) -> None:
    r = httpx.get(local.url + "/v1/scheduler", headers={"Host": host}, timeout=10)
    assert_problem(r, 421)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost:8000", "[::1]:8000", "127.0.0.2"])
def test_loopback_hosts_are_served(local: Running, host: str) -> None:
    r = httpx.get(local.url + "/v1/limits", headers={"Host": host}, timeout=10)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "file://", "http://10.1.1.1"])
def test_a_foreign_origin_may_read_nothing_new_and_change_nothing(
    local: Running, origin: str
) -> None:
    r = httpx.post(
        local.url + "/v1/starts", json={"workflow": "echo"}, headers={"Origin": origin}, timeout=10
    )
    assert_problem(r, 403)


def test_local_origins_and_json_are_served(local: Running) -> None:
    r = httpx.post(
        local.url + "/v1/starts",
        json={"workflow": "echo"},
        headers={"Origin": f"http://127.0.0.1:{local.url.rsplit(':', 1)[1]}"},
        timeout=10,
    )
    assert r.status_code == 201, r.text
    r = httpx.post(
        local.url + "/v1/starts",
        content=b'{"workflow": "echo"}',
        headers={"Content-Type": "application/json; charset=utf-8"},
        timeout=10,
    )
    assert r.status_code == 201, r.text
    # A restart without a body needs no Content-Type.
    eid = r.json()["execution_id"]
    assert httpx.post(f"{local.url}/v1/executions/{eid}/restart", timeout=10).status_code == 201


async def test_with_tokens_a_non_json_body_is_415_too(tmp_path: Path) -> None:
    from tests.server.conftest import TOKENS, make_app
    from yoke.server import Server, TokenBook

    path = tmp_path / "tokens.toml"
    from tests.server.conftest import TOKENS_TOML

    path.write_text(TOKENS_TOML)
    server = Server(make_app(f"sqlite:///{tmp_path}/t.db"), tokens=TokenBook.from_file(path))
    async with server.lifespan():
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=server),
            base_url="http://yoke.example",  # any Host: tokens are the gate here
            headers={"Authorization": f"Bearer {TOKENS['acme'][0]}"},
        ) as c:
            r = await c.post(
                "/v1/starts",
                content=b'{"workflow": "echo"}',
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
            assert_problem(r, 415)
            r = await c.post("/v1/starts", json={"workflow": "echo"})
            assert r.status_code == 201
        server.app.gate.set()  # type: ignore[attr-defined]
