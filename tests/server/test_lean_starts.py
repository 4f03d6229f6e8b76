"""`POST /v1/starts` answers alike on its lean dispatch and through Starlette's router.

The lean row (`routing.LeanRoutes`) reads the request from the ASGI scope and answers without
Starlette's router and request objects; nothing a client sees may differ for it. The same
requests (201, 202 with Location, idempotent replay and conflict, 401, 403 for a role, a
priority and a session, 415, 400, 422, 404, 413 of a chunked body, a bad `?wait=`) are sent to
a server with the lean dispatch and to one without it, and every answer's status, header list
(names, order and values) and body must be equal, ids and times aside; so must the outcome
counts of `/metrics`. The exact headers of a 201 and of a problem answer are pinned too.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.routing import Router
from starlette.types import Receive, Scope, Send

from tests.server.conftest import Client, make_app, running
from yoke.executions import Limits
from yoke.server import Server, TokenBook
from yoke.server import asgi as asgi_module
from yoke.server.guards import CSP

_VOLATILE = ("start_id", "execution_id", "created_at", "decided_at")


async def _chunks(size: int) -> AsyncIterator[bytes]:
    for _ in range(2):
        yield b" " * size


def _requests() -> list[tuple[str, str, dict[str, Any]]]:
    """(who, path, httpx request arguments), sent in this order to a server with one slot."""
    json_type = {"Content-Type": "application/json"}
    key = {"Idempotency-Key": "k"}
    return [
        ("acme", "/v1/starts", {"json": {"workflow": "hold"}}),
        ("acme", "/v1/starts", {"json": {"workflow": "echo", "input": 1}}),
        ("acme", "/v1/starts?wait=0", {"json": {"workflow": "echo", "input": 2}}),
        ("acme", "/v1/starts", {"json": {"workflow": "echo"}, "headers": key}),
        ("acme", "/v1/starts", {"json": {"workflow": "echo"}, "headers": key}),
        (
            "acme",
            "/v1/starts",
            {"json": {"workflow": "steps"}, "headers": key},
        ),
        ("nobody", "/v1/starts", {"json": {"workflow": "echo"}}),
        ("scraper", "/v1/starts", {"json": {"workflow": "echo"}}),
        ("globex", "/v1/starts", {"json": {"workflow": "echo", "priority": 5}}),
        ("acme", "/v1/starts", {"json": {"workflow": "echo", "session": "globex"}}),
        ("acme", "/v1/starts", {"content": b"{}", "headers": {"Content-Type": "text/plain"}}),
        ("acme", "/v1/starts", {"content": b"{not json"}),
        ("acme", "/v1/starts", {"json": {"workflow": 1}}),
        ("acme", "/v1/starts", {"json": {"workflow": "nope"}}),
        ("acme", "/v1/starts?wait=abc", {"json": {"workflow": "echo"}}),
        ("acme", "/v1/starts", {"content": _chunks(600 << 10), "headers": json_type}),
    ]


def _normalised(r: httpx.Response) -> tuple[int, list[tuple[bytes, bytes]], Any]:
    headers = []
    for name, value in r.headers.raw:
        if name.lower() == b"content-length":
            value = b"..."  # ids and times may differ in length
        elif name.lower() == b"location":
            value = re.sub(rb"/[^/]+$", b"/<id>", value)
        headers.append((name, value))
    body = r.json()
    for key in _VOLATILE:
        if key in body:
            body[key] = "<volatile>"
    return r.status_code, headers, body


async def _answers(client: Client) -> list[tuple[int, list[tuple[bytes, bytes]], Any]]:
    out = []
    for who, path, kwargs in _requests():
        out.append(_normalised(await client(who).post(path, **kwargs)))
    text = (await client("scraper").get("/metrics")).text
    counts = re.findall(r'^yoke_starts_total\{outcome="(\w+)"\} (\S+)$', text, re.M)
    out.append((0, [], sorted(counts)))
    return out


@pytest.fixture
def book(tmp_path: Path) -> TokenBook:
    from tests.server.conftest import TOKENS_TOML

    path = tmp_path / "tokens.toml"
    path.write_text(TOKENS_TOML)
    return TokenBook.from_file(path)


async def test_the_lean_dispatch_answers_as_the_router_does(
    tmp_path: Path, book: TokenBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    lean = Server(make_app(f"sqlite:///{tmp_path}/lean.db", Limits(max_running=1)), tokens=book)
    async with running(lean) as client:
        lean_answers = await _answers(client)

    routed_paths: list[str] = []
    real = Router.__call__

    async def counted(self: Router, scope: Scope, receive: Receive, send: Send) -> None:
        routed_paths.append(scope["path"])
        await real(self, scope, receive, send)

    monkeypatch.setattr(Router, "__call__", counted)
    monkeypatch.setattr(asgi_module, "lean_routes", lambda ops: {})
    routed = Server(make_app(f"sqlite:///{tmp_path}/routed.db", Limits(max_running=1)), tokens=book)
    async with running(routed) as client:
        routed_answers = await _answers(client)
    assert routed_paths.count("/v1/starts") == len(_requests())  # the router answered these

    assert [a[0] for a in lean_answers[:-1]] == [
        *(201, 202, 202, 202, 202, 422),
        *(401, 403, 403, 403, 415, 400, 422, 404, 422, 413),
    ]
    for i, (mine, theirs) in enumerate(zip(lean_answers, routed_answers, strict=True)):
        assert mine == theirs, f"answer {i}: lean {mine} != routed {theirs}"


async def test_the_headers_of_a_201_and_of_a_problem_are_exact(
    tmp_path: Path, book: TokenBook
) -> None:
    server = Server(make_app(f"sqlite:///{tmp_path}/yoke.db"), tokens=book)
    async with running(server) as client:
        granted = await client("acme").post("/v1/starts", json={"workflow": "echo"})
        refused = await client("nobody").post("/v1/starts", json={"workflow": "echo"})
    security = [
        (b"content-security-policy", CSP.encode()),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
    ]
    assert granted.status_code == 201
    assert granted.headers.raw == [
        (b"content-length", str(len(granted.content)).encode()),
        (b"content-type", b"application/json"),
        *security,
    ]
    assert refused.status_code == 401
    assert refused.headers.raw == [
        (b"www-authenticate", b'Bearer realm="yoke"'),
        (b"content-length", str(len(refused.content)).encode()),
        (b"content-type", b"application/problem+json"),
        *security,
        (b"connection", b"close"),  # refused before its body was read
    ]
    assert refused.content == (
        b'{"type": "https://yoke.dev/problems/unauthorized", "title": "Unauthorized", '
        b'"status": 401, "detail": "a valid bearer token is required", '
        b'"instance": "/v1/starts"}'
    )
