"""`/v1/executions` in process: list, show, restart, resume, cancel; tenant isolation."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.server.conftest import Serve
from yoke.executions import Limits


async def _finished(c: httpx.AsyncClient, execution_id: str) -> dict[str, Any]:
    for _ in range(200):
        body: dict[str, Any] = (await c.get(f"/v1/executions/{execution_id}")).json()
        if body["status"] != "RUNNING":
            return body
        await asyncio.sleep(0.02)  # polling the API, as a client would
    raise AssertionError("execution did not finish")


async def test_show_has_output_links_and_children(serve: Serve) -> None:
    _, client = await serve()
    c = client("acme")
    start = (await c.post("/v1/starts", json={"workflow": "steps", "input": {}})).json()
    ex = await _finished(c, start["execution_id"])
    assert ex["status"] == "SUCCEEDED" and ex["output"] == {"a": 1, "b": {"x": 1}}
    assert ex["links"]["restart"].endswith("/restart") and ex["links"]["resume"] is None
    page = (await c.get("/v1/executions", params={"workflow": "echo"})).json()
    (child,) = page["items"]
    assert child["parent_id"] == ex["execution_id"]
    assert child["links"]["parent"] == f"/v1/executions/{ex['execution_id']}"
    assert child["links"]["restart"] is None


async def test_list_filters_and_pages(serve: Serve) -> None:
    _, client = await serve()
    c = client("acme")
    ids = [
        (await c.post("/v1/starts", json={"workflow": "echo", "input": i})).json()["execution_id"]
        for i in range(3)
    ]
    for i in ids:
        await _finished(c, i)
    page = (await c.get("/v1/executions", params={"limit": 2})).json()
    assert [e["execution_id"] for e in page["items"]] == ids[::-1][:2]
    rest = (
        await c.get("/v1/executions", params={"limit": 2, "cursor": page["next_cursor"]})
    ).json()
    assert [e["execution_id"] for e in rest["items"]] == [ids[0]]
    assert rest["next_cursor"] is None
    ok = (await c.get("/v1/executions", params={"status": "succeeded"})).json()
    assert len(ok["items"]) == 3
    none = (await c.get("/v1/executions", params={"status": "FAILED"})).json()
    assert none["items"] == []


async def test_restart_and_resume_answer_like_a_start(serve: Serve) -> None:
    _, client = await serve()
    c = client("acme")
    failed = (
        await c.post("/v1/starts", json={"workflow": "steps", "input": {"fail": True}})
    ).json()
    ex = await _finished(c, failed["execution_id"])
    assert ex["status"] == "FAILED" and ex["links"]["resume"]
    r = await c.post(f"/v1/executions/{ex['execution_id']}/resume")
    assert r.status_code == 201 and r.json()["kind"] == "resume"
    resumed = await _finished(c, r.json()["execution_id"])
    assert resumed["resumed_from"] == ex["execution_id"]
    r = await c.post(f"/v1/executions/{ex['execution_id']}/restart", json={"from_step": "a"})
    assert r.status_code == 201 and r.json()["kind"] == "restart"
    r = await c.post(f"/v1/executions/{ex['execution_id']}/restart", json={"from_step": "nope"})
    assert r.status_code == 422
    ok = (await c.post("/v1/starts", json={"workflow": "echo"})).json()
    await _finished(c, ok["execution_id"])
    r = await c.post(f"/v1/executions/{ok['execution_id']}/resume")
    assert r.status_code == 409


async def test_restart_queues_behind_a_full_slot(serve: Serve) -> None:
    _, client = await serve(Limits(max_running=1))
    c = client("acme")
    held = (await c.post("/v1/starts", json={"workflow": "hold"})).json()
    r = await c.post(f"/v1/executions/{held['execution_id']}/restart")
    assert r.status_code == 202 and r.headers["location"].startswith("/v1/starts/")


async def test_cancel_a_running_execution(serve: Serve) -> None:
    _, client = await serve()
    c = client("acme")
    held = (await c.post("/v1/starts", json={"workflow": "hold"})).json()
    r = await c.post(f"/v1/executions/{held['execution_id']}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "CANCELLED"
    assert (await c.post(f"/v1/executions/{held['execution_id']}/cancel")).status_code == 409


async def test_a_tenant_cannot_read_or_touch_anothers_execution(serve: Serve) -> None:
    _, client = await serve()
    acme, globex = client("acme"), client("globex")
    held = (await acme.post("/v1/starts", json={"workflow": "hold"})).json()
    eid = held["execution_id"]
    for method, path in [
        ("GET", f"/v1/executions/{eid}"),
        ("POST", f"/v1/executions/{eid}/cancel"),
        ("POST", f"/v1/executions/{eid}/restart"),
        ("POST", f"/v1/executions/{eid}/resume"),
    ]:
        r = await globex.request(method, path)
        assert r.status_code == 404, (method, path, r.text)
    assert (await globex.get("/v1/executions")).json()["items"] == []
    assert (await globex.get("/v1/executions", params={"session": "acme"})).json() == {
        "items": [],
        "next_cursor": None,
    }
    assert len((await acme.get("/v1/executions")).json()["items"]) == 1
    ops = client("operator")
    assert (await ops.get(f"/v1/executions/{eid}")).status_code == 200
    assert (await ops.post(f"/v1/executions/{eid}/cancel")).status_code == 200


async def test_the_api_shows_the_error_object_and_the_failing_step(serve: Serve) -> None:
    _, client = await serve()
    c = client("acme")
    start = (await c.post("/v1/starts", json={"workflow": "steps", "input": {"fail": True}})).json()
    eid = start["execution_id"]
    for _ in range(200):
        ex = (await c.get(f"/v1/executions/{eid}")).json()
        if ex["status"] != "RUNNING":
            break
    assert ex["status"] == "FAILED" and ex["links"]["resume"] is not None
    error = ex["error"]
    assert set(error) == {"type", "message", "traceback", "step", "attempt"}
    assert (error["type"], error["message"], error["step"]) == (
        "RuntimeError",
        "asked to fail",
        None,
    )
    assert "RuntimeError: asked to fail" in error["traceback"]
    steps = (await c.get(f"/v1/executions/{eid}/steps")).json()["steps"]
    assert [(s["name"], s["status"], s["attempts"], s["error"]) for s in steps] == [
        ("a", "SUCCEEDED", 1, None),
        ("child:echo", "SUCCEEDED", 1, None),
    ]
