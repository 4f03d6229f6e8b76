"""`GET /v1/executors` and the executor metrics of a server whose worker runs `process()` in
executor processes (SQLite and PostgreSQL, real processes): one entry per tenant's executor,
`?tenant=` to narrow it, OPERATOR or ADMIN only, problem JSON for bad parameters."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

import yoke
from tests.actors import exec_app
from tests.actors.conftest import truncate_actor_tables
from tests.server.conftest import running
from tests.server.test_actor_routes import append, until
from tests.server.test_errors import assert_problem
from tests.server.test_metrics_auth import _sample
from tests.server.test_openapi import _validator
from yoke.actors import ActorSettings
from yoke.server import Server, TokenBook

Client = Callable[[str], httpx.AsyncClient]


def executor_app(database_url: str) -> yoke.App:
    """The counting actor of `exec_app`, run in executors that import it from there."""
    app = yoke.App(
        database_url,
        actor_settings=ActorSettings(worker_id="exec-worker", shutdown_timeout=5.0),
        executors="process",
    )
    app.actors.app_spec = exec_app.SPEC
    app.gate = asyncio.Event()  # type: ignore[attr-defined]  # what `running` sets at the end
    app.actor(subscribe=["counts"], key="k", queue=yoke.Queue(concurrency=100))(exec_app.count)
    return app


@pytest.fixture
async def served(database_url: str, tokens_file: Path) -> AsyncIterator[Client]:
    if database_url.startswith("postgres"):
        truncate_actor_tables(database_url)
    server = Server(executor_app(database_url), tokens=TokenBook.from_file(tokens_file))
    async with contextlib.AsyncExitStack() as stack:
        yield await stack.enter_async_context(running(server))


async def test_executors_are_listed_per_tenant_for_operators(served: Client) -> None:
    op, acme, globex = served("operator"), served("acme"), served("globex")
    await append(acme, "counts", *({"k": "a"} for _ in range(3)))
    await append(globex, "counts", {"k": "a"})
    await until(acme, "/v1/actors/count/instances/a", lambda b: b["state"].get("n") == 3)
    await until(globex, "/v1/actors/count/instances/a", lambda b: b["state"].get("n") == 1)

    def both_recorded(body: dict[str, object]) -> bool:
        items = body["items"]
        assert isinstance(items, list)
        items = [i for i in items if i["tenant"] is not None]
        return {(i["tenant"], i["state"]) for i in items} == {
            ("acme", "READY"),
            ("globex", "READY"),
        } and all(i["dispatches"] >= 1 for i in items)

    def spare_recorded(body: dict[str, object]) -> bool:
        items = body["items"]
        assert isinstance(items, list)
        spares = [i for i in items if i["tenant"] is None and i["state"] == "SPARE"]
        return len(spares) == 1 and spares[0]["boot_ms"] is not None  # booted

    await until(op, "/v1/executors", both_recorded)
    body = await until(op, "/v1/executors", spare_recorded)
    assert body["tenant"] is None
    (spare,) = [i for i in body["items"] if i["state"] == "SPARE"]
    assert spare["worker_id"] == "exec-worker" and isinstance(spare["pid"], int)
    assert spare["boot_ms"] > 0 and spare["dispatches"] == 0  # a warm spare: booted, bound to none
    for item in [i for i in body["items"] if i["tenant"] is not None]:
        assert item["worker_id"] == "exec-worker" and item["worker_status"] == "live"
        assert isinstance(item["pid"], int) and item["boot_ms"] > 0
        assert item["isolation"].startswith("process") and item["crashes"] == 0
    mine = (await served("admin").get("/v1/executors?tenant=acme")).json()
    assert [i["tenant"] for i in mine["items"]] == ["acme"] and mine["tenant"] == "acme"
    assert (await op.get("/v1/executors?tenant=nobody")).json()["items"] == []
    doc = (await op.get("/openapi.json")).json()
    for r in (await op.get("/v1/executors"), await acme.get("/v1/executors")):
        assert _validator(doc, "/v1/executors", "get", r.status_code).is_valid(r.json())
    # The metrics of this worker's executors, on the server's one exposition.
    text = (await served("admin").get("/metrics")).text
    ready = [line for line in text.splitlines() if line.startswith('yoke_executors{state="READY"}')]
    assert ready and float(ready[0].rsplit(" ", 1)[1]) == 2.0
    spare = [line for line in text.splitlines() if line.startswith('yoke_executors{state="SPARE"}')]
    assert spare and float(spare[0].rsplit(" ", 1)[1]) == 1.0  # the warm spare (the default)
    phases = {
        line.split('phase="')[1].split('"')[0]
        for line in text.splitlines()
        if line.startswith("yoke_executor_boot_phase_seconds_count")
    }
    assert phases == {
        "queue",
        "spawn",
        "interpreter",
        "sandbox",
        "runtime",
        "app",
        "handshake",
        "first_dispatch",
    }
    assert _sample(text, "yoke_executor_crashes_total") == 0.0


@pytest.mark.parametrize(
    ("who", "path", "status"),
    [
        ("acme", "/v1/executors", 403),
        ("acme", "/v1/executors?tenant=acme", 403),  # not even its own: this is operations
        ("anonymous", "/v1/executors", 401),
        ("operator", "/v1/executors?tenant=", 422),
        ("operator", "/v1/executors?tenant=%00", 422),
        ("operator", "/v1/executors?limit=0", 422),
        ("operator", "/v1/executors?limit=x", 422),
    ],
)
async def test_every_error_is_a_problem(served: Client, who: str, path: str, status: int) -> None:
    assert_problem(await served(who).get(path), status)
