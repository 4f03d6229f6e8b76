"""The dashboard's execution page: a failed execution shows its error (type, message, the step
and attempt), its traceback, its input and its steps with their statuses and attempts; Restart,
Resume and Cancel are offered as its status allows, and each is the API's call (the owner or an
OPERATOR, another tenant's as absent, a CSRF token required, nothing changed when refused)."""

from __future__ import annotations

import asyncio
import html
import json
import re
from typing import Any

import httpx

from tests.server.conftest import Client, Serve
from tests.ui.test_controls import logged_in


async def _finished(c: httpx.AsyncClient, execution_id: str) -> dict[str, Any]:
    for _ in range(500):
        body: dict[str, Any] = (await c.get(f"/v1/executions/{execution_id}")).json()
        if body["status"] != "RUNNING":
            return body
        await asyncio.sleep(0.01)  # polling the API, as a client would
    raise AssertionError("execution did not finish")


async def _failed(client: Client) -> str:
    acme = client("acme")
    start = await acme.post(
        "/v1/starts", json={"workflow": "steps", "input": {"fail": True, "card": "<b>4242</b>"}}
    )
    eid: str = start.json()["execution_id"]
    assert (await _finished(acme, eid))["status"] == "FAILED"
    return eid


async def test_a_failed_execution_shows_its_error_traceback_input_and_actions(
    serve: Serve,
) -> None:
    _, client = await serve()
    eid = await _failed(client)
    browser, _ = await logged_in(client, "acme")
    page = (await browser.get(f"/ui/executions/{eid}")).text
    error = page.split('id="error"')[1].split("</dd>")[0]
    assert "RuntimeError" in error and "asked to fail" in error
    traceback = html.unescape(page.split('id="traceback">')[1].split("</pre>")[0])
    assert 'raise RuntimeError("asked to fail")' in traceback
    shown_input = html.unescape(page.split('id="input">')[1].split("</pre>")[0])
    assert json.loads(shown_input)["card"] == "<b>4242</b>" and "<b>4242" not in page
    assert 'id="step-0"' in page and "SUCCEEDED" in page.split('id="step-0"')[1]
    assert 'id="do-resume"' in page and 'id="do-restart"' in page
    assert 'id="do-cancel"' not in page  # it has ended


async def test_resume_restart_and_cancel_from_the_page_are_the_api_s_calls(
    serve: Serve,
) -> None:
    _, client = await serve()
    eid = await _failed(client)
    acme, csrf = await logged_in(client, "acme")
    globex, globex_csrf = await logged_in(client, "globex")
    # Another tenant's execution is absent; without the session's CSRF token nothing happens.
    r = await globex.post("/ui/actions/resume", data={"execution_id": eid, "csrf": globex_csrf})
    assert r.status_code == 404
    assert (await acme.post("/ui/actions/resume", data={"execution_id": eid})).status_code == 403
    listed = (await client("admin").get("/v1/executions", params={"workflow": "steps"})).json()
    assert len(listed["items"]) == 1
    # The owner resumes it: the page goes to the new execution, which re-used the steps done.
    r = await acme.post("/ui/actions/resume", data={"execution_id": eid, "csrf": csrf})
    assert r.status_code == 303
    new = r.headers["location"].rsplit("/", 1)[1]
    resumed = await _finished(client("acme"), new)
    assert resumed["resumed_from"] == eid and resumed["status"] == "FAILED"
    r = await acme.post("/ui/actions/restart", data={"execution_id": eid, "csrf": csrf})
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/executions/")
    # A running one: Cancel is offered, and cancels it.
    held = (await client("acme").post("/v1/starts", json={"workflow": "hold"})).json()
    page = (await acme.get(f"/ui/executions/{held['execution_id']}")).text
    assert 'id="do-cancel"' in page and 'id="do-resume"' not in page
    r = await acme.post(
        "/ui/actions/cancel_execution", data={"execution_id": held["execution_id"], "csrf": csrf}
    )
    assert r.status_code == 303
    after = (await client("acme").get(f"/v1/executions/{held['execution_id']}")).json()
    assert after["status"] == "CANCELLED"
    r = await acme.post(
        "/ui/actions/cancel_execution", data={"execution_id": held["execution_id"], "csrf": csrf}
    )
    assert r.status_code == 409  # already CANCELLED: the API's answer, as an error page


async def _until_waiting(client: httpx.AsyncClient, execution_id: str) -> None:
    for _ in range(500):
        if (await client.get(f"/v1/executions/{execution_id}")).json()["status"] == "WAITING":
            return
        await asyncio.sleep(0.01)  # polling the API, as a client would
    raise AssertionError(f"{execution_id} never waited")


async def test_a_waiting_execution_shows_what_it_waits_for_and_can_be_cancelled(
    serve: Serve,
) -> None:
    _, client = await serve()
    acme = client("acme")
    eid = (await acme.post("/v1/starts", json={"workflow": "waiter"})).json()["execution_id"]
    await _until_waiting(acme, eid)
    browser, _ = await logged_in(client, "acme")
    page = (await browser.get(f"/ui/executions/{eid}")).text
    assert "s-waiting" in page and 'id="do-cancel"' in page
    waiting = page.split('id="waiting-for"')[1].split("</dd>")[0]
    assert "<code>go</code>" in waiting and "holds no slot" in waiting
    # Its wait's step reads as waiting (the API keeps it RETRYING until it ends), not a retry.
    step = page.split('id="step-waits"')[1].split("</tr>")[0]
    assert "for its signal" in step and "RETRYING" not in step
    listed = (await browser.get("/ui/executions?status=WAITING")).text
    assert eid in listed
    cancelled = await acme.post(f"/v1/executions/{eid}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "CANCELLED"


async def test_a_sleeping_executions_step_says_until_when_not_a_number(serve: Serve) -> None:
    _, client = await serve()
    acme = client("acme")
    eid = (await acme.post("/v1/starts", json={"workflow": "sleeper"})).json()["execution_id"]
    await _until_waiting(acme, eid)
    browser, _ = await logged_in(client, "acme")
    page = (await browser.get(f"/ui/executions/{eid}")).text
    step = page.split('id="step-sleeps-0"')[1].split("</tr>")[0]
    assert re.search(r"sleeps until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", step), step
    assert not re.search(r"\d{10}\.\d", step), "the wake-up shown as epoch seconds"
