"""`/v1/starts` in process: granted, queued, long-poll, 429, 503, re-prioritise, cancel, why."""

from __future__ import annotations

import asyncio

from tests.server.conftest import Serve
from yoke.executions import Limits
from yoke.server import Server


def _problem(r: object) -> dict[str, object]:
    import httpx

    assert isinstance(r, httpx.Response)
    assert r.headers["content-type"] == "application/problem+json", r.text
    body = r.json()
    assert body["status"] == r.status_code and body["title"]
    assert "Traceback" not in r.text
    return dict(body)


async def test_granted_start_answers_201_with_the_execution(serve: Serve) -> None:
    _, client = await serve()
    r = await client("acme").post("/v1/starts", json={"workflow": "echo", "input": {"a": 1}})
    assert r.status_code == 201
    body = r.json()
    assert body["status"] == "GRANTED" and body["execution_id"] and body["session"] == "acme"
    ex = await client("acme").get(f"/v1/executions/{body['execution_id']}")
    assert ex.status_code == 200 and ex.json()["workflow"] == "echo"


async def test_a_full_slot_queues_with_202_position_and_location(serve: Serve) -> None:
    _server, client = await serve(Limits(max_running=1))
    c = client("acme")
    assert (await c.post("/v1/starts", json={"workflow": "hold"})).status_code == 201
    r = await c.post("/v1/starts", json={"workflow": "echo", "input": 1})
    assert r.status_code == 202
    body = r.json()
    assert body["status"] == "QUEUED" and body["position"] == 1
    assert r.headers["location"] == f"/v1/starts/{body['start_id']}"
    second = (await c.post("/v1/starts", json={"workflow": "echo", "input": 2})).json()
    assert second["position"] == 2
    shown = await c.get(r.headers["location"])
    assert shown.status_code == 200 and shown.json()["status"] == "QUEUED"


async def test_wait_long_polls_until_the_grant(serve: Serve) -> None:
    server, client = await serve(Limits(max_running=1))
    c = client("acme")
    await c.post("/v1/starts", json={"workflow": "hold"})
    queued = (await c.post("/v1/starts", json={"workflow": "echo"})).json()

    async def release_soon() -> None:
        await asyncio.sleep(0.2)  # let the long-poll begin first
        server.app.gate.set()  # type: ignore[attr-defined]

    releaser = asyncio.create_task(release_soon())
    r = await c.get(f"/v1/starts/{queued['start_id']}", params={"wait": 10})
    await releaser
    assert r.status_code == 200 and r.json()["status"] == "GRANTED"
    assert r.json()["execution_id"]


async def test_post_with_wait_answers_201_once_granted_or_202_at_the_deadline(serve: Serve) -> None:
    server, client = await serve(Limits(max_running=1))
    c = client("acme")
    await c.post("/v1/starts", json={"workflow": "hold"})
    r = await c.post("/v1/starts", params={"wait": 0.1}, json={"workflow": "echo"})
    assert r.status_code == 202
    server.app.gate.set()  # type: ignore[attr-defined]
    r = await c.post("/v1/starts", params={"wait": 5}, json={"workflow": "echo"})
    assert r.status_code == 201


async def test_reject_mode_answers_429_with_retry_after(serve: Serve) -> None:
    _, client = await serve(Limits(max_running=1, on_limit="reject"))
    c = client("acme")
    await c.post("/v1/starts", json={"workflow": "hold"})
    r = await c.post("/v1/starts", json={"workflow": "echo"})
    assert r.status_code == 429
    assert int(r.headers["retry-after"]) >= 1
    assert _problem(r)["type"] == "https://yoke.dev/problems/limit-exceeded"


async def test_max_queued_refuses_past_the_queue_bound(serve: Serve) -> None:
    _, client = await serve(Limits(max_running=1, max_queued=1))
    c = client("acme")
    await c.post("/v1/starts", json={"workflow": "hold"})
    assert (await c.post("/v1/starts", json={"workflow": "echo"})).status_code == 202
    assert (await c.post("/v1/starts", json={"workflow": "echo"})).status_code == 429


async def test_shutting_down_answers_503_and_refuses_the_queued(serve: Serve) -> None:
    server, client = await serve(Limits(max_running=1))
    c = client("acme")
    await c.post("/v1/starts", json={"workflow": "hold"})
    queued = (await c.post("/v1/starts", json={"workflow": "echo"})).json()
    poll = asyncio.create_task(c.get(f"/v1/starts/{queued['start_id']}", params={"wait": 30}))
    await asyncio.sleep(0.05)  # the long-poll is waiting
    server.app.gate.set()  # type: ignore[attr-defined]
    server.state.begin_shutdown()
    r = await c.post("/v1/starts", json={"workflow": "echo"})
    assert r.status_code == 503 and r.headers["retry-after"]
    _problem(r)
    answered = await asyncio.wait_for(poll, 10)
    assert answered.json()["status"] in ("REFUSED", "GRANTED")
    assert (await client("x").get("/readyz")).status_code == 503


async def test_unknown_workflow_is_404(serve: Serve) -> None:
    _, client = await serve()
    r = await client("acme").post("/v1/starts", json={"workflow": "nope"})
    assert r.status_code == 404
    _problem(r)


async def test_session_defaults_to_the_tenant_and_may_not_leave_it(serve: Serve) -> None:
    _, client = await serve()
    c = client("acme")
    r = await c.post("/v1/starts", json={"workflow": "echo", "session": "acme/alice"})
    assert r.status_code == 201 and r.json()["session"] == "acme/alice"
    r = await c.post("/v1/starts", json={"workflow": "echo", "session": "globex"})
    assert r.status_code == 403
    r = await client("operator").post("/v1/starts", json={"workflow": "echo", "session": "globex"})
    assert r.status_code == 201


async def test_priority_change_needs_operator_and_a_queued_start(serve: Serve) -> None:
    _, client = await serve(Limits(max_running=1))
    acme, ops = client("acme"), client("operator")
    running = (await acme.post("/v1/starts", json={"workflow": "hold"})).json()
    a = (await acme.post("/v1/starts", json={"workflow": "echo"})).json()
    b = (await acme.post("/v1/starts", json={"workflow": "echo"})).json()
    r = await acme.patch(f"/v1/starts/{b['start_id']}", json={"priority": 5})
    assert r.status_code == 403
    r = await ops.patch(f"/v1/starts/{b['start_id']}", json={"priority": 5})
    assert r.status_code == 200 and r.json()["priority"] == 5 and r.json()["position"] == 1
    assert (await acme.get(f"/v1/starts/{a['start_id']}")).json()["position"] == 2
    r = await ops.patch(f"/v1/starts/{running['start_id']}", json={"priority": 1})
    assert r.status_code == 409
    _problem(r)
    audit = (await client("admin").get("/v1/audit")).json()["items"]
    assert audit[-1]["kind"] == "priority" and audit[-1]["principal"] == "ops"


async def test_delete_cancels_a_queued_start_and_409_after(serve: Serve) -> None:
    _, client = await serve(Limits(max_running=1))
    c = client("acme")
    await c.post("/v1/starts", json={"workflow": "hold"})
    q = (await c.post("/v1/starts", json={"workflow": "echo"})).json()
    r = await c.delete(f"/v1/starts/{q['start_id']}")
    assert r.status_code == 200 and r.json()["status"] == "CANCELLED"
    assert (await c.delete(f"/v1/starts/{q['start_id']}")).status_code == 409
    assert (await c.delete("/v1/starts/nope")).status_code == 404


async def test_why_names_the_limit_and_the_starts_ahead(serve: Serve) -> None:
    _, client = await serve(Limits(max_running=5, max_running_per_session=1))
    c = client("acme")
    await c.post("/v1/starts", json={"workflow": "hold"})
    first = (await c.post("/v1/starts", json={"workflow": "echo"})).json()
    second = (await c.post("/v1/starts", json={"workflow": "echo"})).json()
    why = (await c.get(f"/v1/starts/{second['start_id']}/why")).json()
    assert why["waiting"] and why["blocked_by"] == "max_running_per_session"
    assert why["limit"] == 1 and why["running"] == 1 and why["ahead"] == 1
    assert "max_running_per_session=1" in why["explanation"]
    done = await client("acme").post("/v1/starts", json={"workflow": "echo", "session": "acme/b"})
    why = (await c.get(f"/v1/starts/{done.json()['start_id']}/why")).json()
    assert not why["waiting"] and why["explanation"].startswith("granted")
    assert first["position"] == 1


async def test_why_suggests_raising_a_limit_only_in_proportion_to_the_starts_ahead(
    serve: Serve,
) -> None:
    _, client = await serve(Limits(max_running=4, max_running_per_session=2))
    admin = client("admin")

    async def raises(start_id: str) -> list[tuple[str, int]]:
        why = (await admin.get(f"/v1/starts/{start_id}/why")).json()
        return [(f["limit"], f["to"]) for f in why["fixes"] if f["action"] == "raise_limit"]

    for session in ("a", "b"):  # four running: the global cap is full
        for _ in range(2):
            r = await admin.post("/v1/starts", json={"workflow": "hold", "session": session})
            assert r.status_code == 201
    queued = []
    for n in range(12):  # twelve queued in sessions c..n, one each
        r = await admin.post("/v1/starts", json={"workflow": "echo", "session": f"s{n}"})
        queued.append(r.json()["start_id"])
    # The first needs one more slot; the fourth four (it and three ahead); the fifth would
    # need five, more than doubling the cap: no raise is suggested for it, nor after it.
    assert await raises(queued[0]) == [("max_running", 5)]
    assert await raises(queued[3]) == [("max_running", 8)]
    assert await raises(queued[4]) == []
    assert await raises(queued[11]) == []
    why = (await admin.get(f"/v1/starts/{queued[11]}/why")).json()
    assert why["ahead"] == 11  # what it would take instead: its priority above the others'
    assert [f["action"] for f in why["fixes"]] == ["set_priority"]
    # Held by its own session's cap: the starts ahead of it in its session count.
    await admin.put("/v1/limits", json={"max_running": 100, "max_running_per_session": 2})
    ours = []
    for _ in range(5):  # session a runs two (still held): these five wait for it
        r = await admin.post("/v1/starts", json={"workflow": "echo", "session": "a"})
        ours.append(r.json()["start_id"])
    assert await raises(ours[0]) == [("max_running_per_session", 3)]
    assert await raises(ours[1]) == [("max_running_per_session", 4)]
    assert await raises(ours[2]) == []


async def test_another_tenants_start_is_404_not_403(serve: Serve) -> None:
    _, client = await serve(Limits(max_running=1))
    acme, globex = client("acme"), client("globex")
    await acme.post("/v1/starts", json={"workflow": "hold"})
    q = (await acme.post("/v1/starts", json={"workflow": "echo"})).json()
    for method, path in [
        ("GET", f"/v1/starts/{q['start_id']}"),
        ("DELETE", f"/v1/starts/{q['start_id']}"),
        ("GET", f"/v1/starts/{q['start_id']}/why"),
    ]:
        r = await globex.request(method, path)
        assert r.status_code == 404, (method, path)
    assert (await client("operator").get(f"/v1/starts/{q['start_id']}")).status_code == 200


def test_server_repr_names_its_app() -> None:
    import yoke

    assert "Server(" in repr(Server(yoke.App("sqlite:///:memory:"), tokens=None))
