"""HTTP: delayed starts (`at`, `delay`: 202 SCHEDULED, cancellable while SCHEDULED), signals
(`POST /v1/executions/{id}/signals/{name}`: 202, the execution's own tenant or OPERATOR, another
tenant's is 404, Idempotency-Key replays without sending twice), WAITING in the answers, and bad
input as problem JSON that changes nothing. Both stores."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx

import yoke
from tests.server.conftest import running
from tests.server.test_errors import assert_problem
from yoke.server import Server, TokenBook


def time_app(database_url: str) -> yoke.App:
    app = yoke.App(database_url)

    @app.workflow()
    async def echo(ctx: yoke.Context, input: Any) -> Any:
        return input

    @app.workflow()
    async def approval(ctx: yoke.Context, input: Any) -> Any:
        first = await ctx.wait_for("approve", timeout=30)
        second = await ctx.wait_for("approve", timeout=30)
        return [first, second]

    app.gate = asyncio.Event()  # type: ignore[attr-defined]  # what `running` releases
    return app


async def _until(c: httpx.AsyncClient, path: str, status: str) -> dict[str, Any]:
    for _ in range(500):
        body: dict[str, Any] = (await c.get(path)).json()
        if body["status"] == status:
            return body
        await asyncio.sleep(0.02)  # polling the API, as a client would
    raise AssertionError(f"{path} never became {status}")


async def test_delayed_starts_over_http(database_url: str, tokens_file: Path) -> None:
    server = Server(time_app(database_url), tokens=TokenBook.from_file(tokens_file))
    async with running(server) as client:
        acme, globex = client("acme"), client("globex")
        r = await acme.post("/v1/starts", json={"workflow": "echo", "input": 1, "delay": 0.3})
        assert r.status_code == 202, r.text
        body = r.json()
        assert body["status"] == "SCHEDULED" and body["due_at"] > time.time()
        assert r.headers["location"] == f"/v1/starts/{body['start_id']}"
        granted = await _until(acme, f"/v1/starts/{body['start_id']}", "GRANTED")
        done = await _until(acme, f"/v1/executions/{granted['execution_id']}", "SUCCEEDED")
        assert done["output"] == 1
        # Cancelled while SCHEDULED: by its own tenant only (another's is not there).
        at = time.time() + 30
        r = await acme.post("/v1/starts", json={"workflow": "echo", "at": at})
        start_id = r.json()["start_id"]
        assert (await globex.delete(f"/v1/starts/{start_id}")).status_code == 404
        r = await acme.delete(f"/v1/starts/{start_id}")
        assert r.status_code == 200 and r.json()["status"] == "CANCELLED"
        assert_problem(await acme.delete(f"/v1/starts/{start_id}"), 409)
        for bad in ({"delay": -1}, {"delay": "5"}, {"at": 1.0, "delay": 1.0}, {"delay": 1e12}):
            r = await acme.post("/v1/starts", json={"workflow": "echo", **bad})
            assert_problem(r, 422)
        listed = (await acme.get("/v1/executions")).json()["items"]
        assert len(listed) == 1  # the refused ones wrote nothing


async def test_signals_over_http(database_url: str, tokens_file: Path) -> None:
    server = Server(time_app(database_url), tokens=TokenBook.from_file(tokens_file))
    async with running(server) as client:
        acme, globex, ops = client("acme"), client("globex"), client("operator")
        r = await acme.post("/v1/starts", json={"workflow": "approval"})
        execution_id = r.json()["execution_id"]
        path = f"/v1/executions/{execution_id}"
        waiting = await _until(acme, path, "WAITING")
        assert waiting["waiting_for"] == "approve"
        listed = (await acme.get("/v1/executions", params={"status": "WAITING"})).json()
        assert [e["execution_id"] for e in listed["items"]] == [execution_id]
        # Another tenant: not there (404), and nothing was sent.
        r = await globex.post(f"{path}/signals/approve", json={"payload": "evil"})
        assert_problem(r, 404)
        # Bad input: a problem, nothing sent.
        assert_problem(await acme.post(f"{path}/signals/approve", json={"nope": 1}), 422)
        long_name = "x" * 201
        assert_problem(await acme.post(f"{path}/signals/{long_name}", json={}), 422)
        assert_problem(await acme.post("/v1/executions/nope/signals/approve", json={}), 404)
        # The same Idempotency-Key twice: one signal.
        key = {"Idempotency-Key": "sig-1"}
        r1 = await acme.post(f"{path}/signals/approve", json={"payload": "a"}, headers=key)
        r2 = await acme.post(f"{path}/signals/approve", json={"payload": "a"}, headers=key)
        assert r1.status_code == r2.status_code == 202, r1.text
        assert r1.json()["execution_id"] == execution_id
        r = await ops.post(f"{path}/signals/approve", json={"payload": "b"})
        assert r.status_code == 202
        done = await _until(acme, path, "SUCCEEDED")
        assert done["output"] == ["a", "b"]
        assert_problem(await acme.post(f"{path}/signals/approve", json={}), 409)
