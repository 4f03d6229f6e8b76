"""Every error is RFC 9457 problem JSON with a 4xx (or 503): bad bodies, bad parameters, bad
tokens, unknown routes, and failures nobody expected (never a 500, never a traceback)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.server.conftest import Serve
from yoke.errors import StoreError


def assert_problem(r: httpx.Response, *statuses: int) -> dict[str, Any]:
    assert r.status_code in statuses, (r.status_code, r.text)
    assert r.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = r.json()
    assert body["status"] == r.status_code and body["title"] and body["type"]
    assert "Traceback" not in r.text and 'File "' not in r.text
    return body


BAD_BODIES: list[tuple[str, str, Any, int]] = [
    # (method, path, body, status); path "{s}" / "{e}" is a real start / execution
    ("POST", "/v1/starts", b"{", 400),
    ("POST", "/v1/starts", b"", 400),
    ("POST", "/v1/starts", [], 422),
    ("POST", "/v1/starts", {}, 422),
    ("POST", "/v1/starts", {"workflow": ""}, 422),
    ("POST", "/v1/starts", {"workflow": 3}, 422),
    ("POST", "/v1/starts", {"workflow": "x" * 300}, 422),
    ("POST", "/v1/starts", {"workflow": "echo\u0000"}, 422),
    ("POST", "/v1/starts", {"workflow": "echo", "session": ""}, 422),
    ("POST", "/v1/starts", {"workflow": "echo", "session": 5}, 422),
    ("POST", "/v1/starts", {"workflow": "echo", "priority": "1"}, 422),
    ("POST", "/v1/starts", {"workflow": "echo", "priority": 1.5}, 422),
    ("POST", "/v1/starts", {"workflow": "echo", "priority": True}, 422),
    ("POST", "/v1/starts", {"workflow": "echo", "priority": 2**70}, 422),
    ("POST", "/v1/starts", {"workflow": "echo", "extra": 1}, 422),
    ("POST", "/v1/starts", b'{"workflow": "echo", "input": 1e999}', 422),
    ("POST", "/v1/starts", b'{"workflow": "echo", "session": "\\ud800"}', 400),
    ("PATCH", "/v1/starts/{s}", {}, 422),
    ("PATCH", "/v1/starts/{s}", {"priority": "high"}, 422),
    ("PATCH", "/v1/starts/{s}", b"not json", 400),
    ("PATCH", "/v1/starts/no-such-start", {"priority": 1}, 404),
    ("POST", "/v1/executions/{e}/restart", {"from_step": 1}, 422),
    ("POST", "/v1/executions/{e}/restart", {"from_step": "a", "x": 1}, 422),
    ("POST", "/v1/executions/{e}/restart", b"[", 400),
    ("POST", "/v1/executions/{e}/resume", {"x": 1}, 422),
    ("PUT", "/v1/limits", {"max_running": -1}, 422),
    ("PUT", "/v1/limits", {"max_running": "2"}, 422),
    ("PUT", "/v1/limits", {"on_limit": "drop"}, 422),
    ("PUT", "/v1/limits", {"max_running_per_workflow": {"echo": -1}}, 422),
    ("PUT", "/v1/limits", {"max_queued": 2**40}, 422),
    ("PUT", "/v1/limits", {"surprise": 1}, 422),
    ("PUT", "/v1/limits", b"", 400),
    ("POST", "/v1/streams/carts/events", [1, 2], 422),
]

BAD_PARAMS: list[tuple[str, str, int]] = [
    ("POST", "/v1/starts?wait=soon", 422),
    ("POST", "/v1/starts?wait=-1", 422),
    ("POST", "/v1/starts?wait=61", 422),
    ("POST", "/v1/starts?wait=nan", 422),
    ("GET", "/v1/starts/{s}?wait=x", 422),
    ("GET", "/v1/starts/no-such-start", 404),
    ("GET", "/v1/starts/%00", 422),
    ("GET", "/v1/starts/no-such-start/why", 404),
    ("PATCH", "/v1/starts/{s}", 400),
    ("DELETE", "/v1/starts/no-such-start", 404),
    ("GET", "/v1/executions?status=DONE", 422),
    ("GET", "/v1/executions?limit=0", 422),
    ("GET", "/v1/executions?limit=x", 422),
    ("GET", "/v1/executions?cursor=abc", 422),
    ("GET", "/v1/executions?session=%00", 422),
    ("GET", "/v1/executions?workflow=", 422),
    ("GET", "/v1/executions/no-such-execution", 404),
    ("POST", "/v1/executions/no-such-execution/restart", 404),
    ("POST", "/v1/executions/no-such-execution/resume", 404),
    ("POST", "/v1/executions/no-such-execution/cancel", 404),
    ("POST", "/v1/executions/{e}/restart?wait=100", 422),
    ("GET", "/v1/audit?limit=5000", 422),
    ("GET", "/v1/audit?offset=-1", 422),
    ("POST", "/v1/streams/%00/events", 422),
    ("POST", "/v1/streams/carts/events", 400),
    ("GET", "/v1/nowhere", 404),
    ("DELETE", "/v1/limits", 405),
]


@pytest.fixture
async def ids(serve: Serve) -> tuple[httpx.AsyncClient, str, str]:
    _, client = await serve()
    c = client("admin")
    s = (await c.post("/v1/starts", json={"workflow": "hold"})).json()
    return c, s["start_id"], s["execution_id"]


@pytest.mark.parametrize(("method", "path", "body", "status"), BAD_BODIES)
async def test_a_bad_body_is_a_problem(
    ids: tuple[httpx.AsyncClient, str, str], method: str, path: str, body: Any, status: int
) -> None:
    c, s, e = ids
    content = body if isinstance(body, bytes) else httpx.Request("POST", "/", json=body).content
    r = await c.request(method, path.format(s=s, e=e), content=content)
    problem = assert_problem(r, status)
    if status == 422 and path == "/v1/starts" and isinstance(body, dict) and body:
        assert problem.get("errors") or problem["detail"]


@pytest.mark.parametrize(("method", "path", "status"), BAD_PARAMS)
async def test_a_bad_parameter_is_a_problem(
    ids: tuple[httpx.AsyncClient, str, str], method: str, path: str, status: int
) -> None:
    c, s, e = ids
    assert_problem(await c.request(method, path.format(s=s, e=e)), status)


async def test_bad_idempotency_key_is_422(ids: tuple[httpx.AsyncClient, str, str]) -> None:
    c, _, _ = ids
    r = await c.post(
        "/v1/starts", json={"workflow": "echo"}, headers={"Idempotency-Key": "x" * 300}
    )
    assert_problem(r, 422)


async def test_a_body_too_large_is_413(ids: tuple[httpx.AsyncClient, str, str]) -> None:
    c, _, _ = ids
    r = await c.post(
        "/v1/starts", content=b'{"workflow": "echo", "input": "' + b"x" * (2 << 20) + b'"}'
    )
    assert_problem(r, 413)


@pytest.mark.parametrize("header", [None, "Bearer wrong", "Basic dXNlcjpwdw==", "Bearer "])
async def test_missing_or_unknown_token_is_401(serve: Serve, header: str | None) -> None:
    _server, client = await serve()
    c = client("anonymous")
    headers = {"Authorization": header} if header else {}
    r = await c.get("/v1/limits", headers=headers)
    assert_problem(r, 401)
    assert r.headers["www-authenticate"].startswith("Bearer")
    for open_path in ("/healthz", "/readyz", "/openapi.json", "/docs", "/docs/init.js"):
        assert (await c.get(open_path)).status_code == 200
    # With a tokens file, metrics are for a token with a role that may read them.
    assert_problem(await c.get("/metrics"), 401)


async def test_an_unexpected_failure_is_503_problem_without_traceback(
    serve: Serve, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server, client = await serve()
    ex = server.app.executions

    async def boom(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("secret internals")

    monkeypatch.setattr(ex, "limits", boom)
    r = await client("acme").get("/v1/limits")
    body = assert_problem(r, 503)
    assert "secret" not in r.text and body["title"] == "Unexpected failure"
    assert "ZeroDivisionError" in caplog.text  # logged for the operator, not sent
    monkeypatch.setattr(ex, "limits", _raiser(StoreError("disk on fire")))
    assert_problem(await client("acme").get("/v1/limits"), 503)


def _raiser(exc: Exception) -> Any:
    async def raise_it(*args: object, **kwargs: object) -> None:
        raise exc

    return raise_it
