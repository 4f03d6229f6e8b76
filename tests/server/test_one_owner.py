"""Each rule has one owner, and every path asks it: the default session of a start
(`tenant_settings.default_session`), the idempotency fingerprint (`executions.fingerprints`)
and the tenant visibility of a list of executions (`routes_executions.visible_executions`).
So a start by the API and by the Python call land in the same session, a key is judged alike
by the HTTP replay and by the service, and the dashboard shows a tenant the API's list."""

from __future__ import annotations

import pytest

from tests.server.conftest import TOKENS, Serve
from yoke.errors import IdempotencyConflict
from yoke.executions import Principal
from yoke.server.ui.regions import _executions

STARTERS = ("admin", "operator", "acme", "globex")  # the scraper may not start anything


@pytest.mark.parametrize("who", STARTERS)
async def test_a_start_without_a_session_gets_the_same_one_by_every_path(
    serve: Serve, who: str
) -> None:
    server, client = await serve()
    principal = TOKENS[who][1]
    by_api = await client(who).post("/v1/starts", json={"workflow": "echo", "input": 1})
    by_call = await server.state.executions.start("echo", 1, principal=principal)
    assert by_api.json()["session"] == by_call.session
    assert by_call.session == (principal.tenant or "default")


async def test_a_plain_principal_without_a_tenant_starts_in_its_own_session(serve: Serve) -> None:
    """Its tenant is its name (`start_tenant`), and so is its default session, as over HTTP."""
    server, _ = await serve()
    start = await server.state.executions.start("echo", 1, principal=Principal("solo"))
    assert (start.session, start.tenant) == ("solo", "solo")


async def test_a_key_is_judged_alike_whatever_the_order_of_the_inputs_keys(serve: Serve) -> None:
    server, _ = await serve()
    ex = server.state.executions
    acme = TOKENS["acme"][1]
    first = await ex.start("echo", {"a": 1, "b": 2}, idempotency_key="k", principal=acme)
    again = await ex.start("echo", {"b": 2, "a": 1}, idempotency_key="k", principal=acme)
    assert again.start_id == first.start_id  # the same request: the HTTP replay says so too
    with pytest.raises(IdempotencyConflict):  # another priority is another request, as in HTTP
        await ex.start("echo", {"a": 1, "b": 2}, priority=1, idempotency_key="k", principal=acme)


async def test_the_dashboard_lists_what_the_api_lists(serve: Serve) -> None:
    server, client = await serve()
    for who, own in (("acme", "acme/a"), ("globex", "globex"), ("admin", "other")):
        r = await client(who).post("/v1/starts", json={"workflow": "echo", "session": own})
        assert r.status_code == 201, r.text
    for who in ("acme", "globex", "operator", "admin"):
        for session in (None, "acme/a", "globex", "other"):
            query = "" if session is None else f"?session={session}"
            api = (await client(who).get(f"/v1/executions{query}")).json()
            ui = await _executions(server.state, TOKENS[who][1], {"session": session})
            assert [e["execution_id"] for e in api["items"]] == [
                e["execution_id"] for e in ui["items"]
            ], (who, session)
            if who in ("acme", "globex"):
                assert all(e["session"].split("/")[0] == who for e in ui["items"]), ui
