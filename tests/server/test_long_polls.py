"""`?wait=` long-polls are capped per tenant (`YOKE_MAX_LONG_POLLS_PER_TENANT`): past the cap a
request is refused (429 problem JSON with Retry-After) before it writes anything, and other
tenants keep theirs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.actors.executors import until
from tests.server.conftest import TOKENS, Client, make_app, running
from tests.server.test_errors import assert_problem
from yoke.executions import Limits
from yoke.server import Server, TokenBook

CAP = 3


@pytest.fixture
async def served(db_url: str, tokens_file: Path) -> AsyncIterator[tuple[Server, Client]]:
    app = make_app(db_url, Limits(max_running=0))  # every start queues
    app.settings = app.settings.with_(max_long_polls_per_tenant=CAP)
    server = Server(app, tokens=TokenBook.from_file(tokens_file))
    async with contextlib.AsyncExitStack() as stack:
        yield server, await stack.enter_async_context(running(server))


async def test_racing_long_polls_past_the_cap_are_refused_and_write_nothing(
    served: tuple[Server, Client],
) -> None:
    server, client = served
    acme = client("acme")
    kernel = server.app.executions.kernel

    async def poll() -> httpx.Response:
        return await acme.post("/v1/starts?wait=30", json={"workflow": "echo"})

    tasks = [asyncio.create_task(poll()) for _ in range(20)]
    await until(lambda: server.state.long_polls.held("acme") == CAP)
    await until(lambda: sum(t.done() for t in tasks) == 20 - CAP)  # the rest answer at once
    refused = [t for t in tasks if t.done()]
    for t in refused:
        body = assert_problem(t.result(), 429)
        assert t.result().headers["Retry-After"] == "1" and "long-polls" in body["detail"]
    await until(lambda: kernel.queued >= CAP)  # the held ones' starts, written
    await asyncio.sleep(0.2)
    assert kernel.queued == CAP  # a refused long-poll made no start
    assert server.state.long_polls.held("acme") == CAP

    # Without ?wait= acme still starts; another tenant still long-polls.
    assert (await acme.post("/v1/starts", json={"workflow": "echo"})).status_code == 202
    other = await client("globex").post("/v1/starts?wait=0.2", json={"workflow": "echo"})
    assert other.status_code == 202
    queued = (await acme.post("/v1/starts", json={"workflow": "echo"})).json()["start_id"]
    assert_problem(await acme.get(f"/v1/starts/{queued}?wait=5"), 429)
    assert (await acme.get(f"/v1/starts/{queued}")).status_code == 200

    # An answered long-poll gives its place back.
    waiting = [t for t in tasks if not t.done()]
    assert len(waiting) == CAP
    await server.app.executions.set_limits(Limits(), principal=TOKENS["admin"][1])
    for r in await asyncio.gather(*waiting):
        assert r.status_code == 201
    assert server.state.long_polls.held("acme") == 0
    follow = await acme.get(f"/v1/starts/{queued}?wait=5")
    assert follow.status_code == 200 and follow.json()["status"] == "GRANTED"
