"""Reads are bounded however much a tenant stored: an execution's steps come in pages (a limit
with a default and a maximum, and a cursor), on both stores."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.server.conftest import Client, make_app, running
from tests.server.test_errors import assert_problem
from tests.store.grants import done_step
from yoke.server import Server, TokenBook
from yoke.server.ui.stored import MAX_STEPS_PAGE, STEPS_PAGE


@pytest.fixture
async def served(database_url: str, tokens_file: Path) -> AsyncIterator[tuple[Server, Client]]:
    server = Server(make_app(database_url), tokens=TokenBook.from_file(tokens_file))
    async with contextlib.AsyncExitStack() as stack:
        yield server, await stack.enter_async_context(running(server))


async def _execution(client: Client) -> str:
    r = await client("acme").post("/v1/starts?wait=10", json={"workflow": "echo", "input": 1})
    assert r.status_code in (200, 201), r.text
    execution_id: str = r.json()["execution_id"]
    return execution_id


async def test_an_executions_steps_come_in_bounded_pages(served: tuple[Server, Client]) -> None:
    server, client = served
    ex = await _execution(client)
    store = server.app.executions._s.require()
    total = STEPS_PAGE + 20
    for pos in range(total):
        await store.record_steps([done_step(ex, pos, f"s{pos}", str(pos))], now=pos)
    acme = client("acme")
    first = (await acme.get(f"/v1/executions/{ex}/steps")).json()
    assert [s["position"] for s in first["steps"]] == list(range(STEPS_PAGE))
    assert first["next_cursor"] == str(STEPS_PAGE - 1)
    rest = await acme.get(f"/v1/executions/{ex}/steps", params={"cursor": first["next_cursor"]})
    assert [s["result"] for s in rest.json()["steps"]] == list(range(STEPS_PAGE, total))
    assert rest.json()["next_cursor"] is None
    seen: list[int] = []
    cursor = None
    while True:
        params = {"limit": 7} | ({} if cursor is None else {"cursor": cursor})
        page = (await acme.get(f"/v1/executions/{ex}/steps", params=params)).json()
        assert len(page["steps"]) <= 7
        seen += [s["position"] for s in page["steps"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(range(total))
    for bad in ({"limit": MAX_STEPS_PAGE + 1}, {"limit": 0}, {"cursor": "x1"}, {"cursor": "-1"}):
        assert_problem(await acme.get(f"/v1/executions/{ex}/steps", params=bad), 422)
    assert_problem(await client("globex").get(f"/v1/executions/{ex}/steps"), 404)
    html = (await acme.get(f"/ui/executions/{ex}")).text
    assert f'href="/ui/executions/{ex}?cursor={STEPS_PAGE - 1}"' in html
    more = (await acme.get(f"/ui/executions/{ex}", params={"cursor": STEPS_PAGE - 1})).text
    assert f"<td>{total - 1}</td>" in more and "Next steps" not in more


async def test_a_tenants_listing_holds_all_its_sessions_and_no_others(
    served: tuple[Server, Client],
) -> None:
    _, client = served
    for who, session in (("acme", "acme"), ("globex", "globex"), ("acme", "acme/cart-1")):
        body = {"workflow": "echo", "session": session}
        assert (await client(who).post("/v1/starts?wait=10", json=body)).status_code == 201
    acme = client("acme")
    listed = (await acme.get("/v1/executions")).json()["items"]
    assert sorted(e["session"] for e in listed) == ["acme", "acme/cart-1"]
    one = (await acme.get("/v1/executions", params={"limit": 1})).json()
    assert [e["session"] for e in one["items"]] == ["acme/cart-1"] and one["next_cursor"]
    page = await acme.get("/v1/executions", params={"limit": 1, "cursor": one["next_cursor"]})
    assert [e["session"] for e in page.json()["items"]] == ["acme"]
    assert (await acme.get("/v1/executions?session=globex")).json()["items"] == []
    html = (await acme.get("/ui/executions")).text
    assert "acme/cart-1" in html and "globex" not in html
