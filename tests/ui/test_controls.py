"""The dashboard's controls (`POST /ui/actions/...`) answer as the API's rows do: the role
before the form is judged (a plain tenant with a bad field gets 403, not 422), another
tenant's start as absent, and a refused control changes nothing."""

from __future__ import annotations

import httpx

from tests.server.conftest import TOKENS, Client, Serve
from yoke.executions import Limits


async def logged_in(client: Client, who: str) -> tuple[httpx.AsyncClient, str]:
    """A browser-like client with `who`'s session cookie, and its CSRF token."""
    browser = client("nobody")
    assert (await browser.post("/ui/login", data={"token": TOKENS[who][0]})).status_code == 303
    page = (await browser.get("/ui/")).text
    return browser, page.split('name="csrf" value="')[1].split('"')[0]


async def _state(client: Client) -> tuple[object, object, object]:
    admin = client("admin")
    return (
        (await admin.get("/v1/limits")).json(),
        (await admin.get("/v1/audit")).json(),
        [(i["start_id"], i["priority"]) for i in (await admin.get("/v1/queue")).json()["items"]],
    )


async def test_a_control_answers_its_role_before_judging_the_form(serve: Serve) -> None:
    _, client = await serve(Limits(max_running=0))
    queued = await client("acme").post("/v1/starts", json={"workflow": "echo", "input": 1})
    start_id = queued.json()["start_id"]
    before = await _state(client)
    for who in ("acme", "globex"):
        browser, csrf = await logged_in(client, who)
        for action, form in (
            ("limits", {"max_running": "many", "max_queued": "-"}),
            ("limits", {"max_running": "5"}),
            ("priority", {"start_id": start_id, "priority": "very high"}),
            ("priority", {"start_id": "", "priority": "1"}),
            ("priority", {"start_id": start_id, "priority": "7"}),
        ):
            r = await browser.post(f"/ui/actions/{action}", data={**form, "csrf": csrf})
            assert r.status_code == 403, (who, action, form, r.text)
            assert "lacks role" in r.text
    assert await _state(client) == before


async def test_a_role_holder_still_gets_the_form_judged(serve: Serve) -> None:
    """The other side: the role check is not a blanket refusal."""
    _, client = await serve(Limits(max_running=0))
    browser, csrf = await logged_in(client, "admin")
    r = await browser.post("/ui/actions/limits", data={"max_running": "many", "csrf": csrf})
    assert r.status_code == 422
    r = await browser.post("/ui/actions/priority", data={"start_id": "x", "priority": "very"})
    assert r.status_code == 403  # no CSRF token: refused before anything else
    r = await browser.post(
        "/ui/actions/priority", data={"start_id": "x", "priority": "very", "csrf": csrf}
    )
    assert r.status_code == 422
    assert (await browser.post("/ui/actions/nothing", data={"csrf": csrf})).status_code == 404


async def test_a_tenant_cannot_cancel_another_tenants_start_from_the_dashboard(
    serve: Serve,
) -> None:
    _, client = await serve(Limits(max_running=0))
    theirs = await client("globex").post("/v1/starts", json={"workflow": "echo", "input": 1})
    start_id = theirs.json()["start_id"]
    browser, csrf = await logged_in(client, "acme")
    r = await browser.post("/ui/actions/cancel", data={"start_id": start_id, "csrf": csrf})
    assert r.status_code == 404
    assert (await client("globex").get(f"/v1/starts/{start_id}")).json()["status"] == "QUEUED"
    mine = await client("acme").post("/v1/starts", json={"workflow": "echo", "input": 1})
    r = await browser.post(
        "/ui/actions/cancel", data={"start_id": mine.json()["start_id"], "csrf": csrf}
    )
    assert r.status_code == 303
