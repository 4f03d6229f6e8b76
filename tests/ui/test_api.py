"""The dashboard's `/v1` twins and its browser session, in process: a tenant sees only its own
sessions, the login trades a token for a cookie that only reads the API, controls need the
session's CSRF token and this origin, fragments render once per version for every viewer, and
the hub coalesces signals without dropping the last one."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.server.conftest import TOKENS, Client, Serve
from yoke.executions import Limits
from yoke.server import Server
from yoke.server.ui.hub import Hub


async def _queue_two_tenants(serve: Serve) -> tuple[Server, Client]:
    server, client = await serve(Limits(max_running=0))
    for who in ("acme", "globex"):
        r = await client(who).post("/v1/starts", json={"workflow": "echo", "input": 1})
        assert r.status_code == 202
    return server, client


async def test_a_tenant_sees_only_its_own_sessions_in_every_twin(serve: Serve) -> None:
    _, client = await _queue_two_tenants(serve)
    acme, admin = client("acme"), client("admin")
    queue = (await acme.get("/v1/queue")).json()
    assert [i["session"] for i in queue["items"]] == ["acme"] and queue["queued"] is None
    fair = (await acme.get("/v1/fairness")).json()
    assert [i["session"] for i in fair["items"]] == ["acme"]
    assert fair["sessions_with_work"] is None
    over = (await acme.get("/v1/overview")).json()
    assert over["queued"] == 1 and over["refused_last_minute"] is None
    assert "globex" not in (await acme.get("/ui/admission")).text
    assert sorted(i["session"] for i in (await admin.get("/v1/queue")).json()["items"]) == [
        "acme",
        "globex",
    ]
    assert (await admin.get("/v1/overview")).json()["queued"] == 2
    assert (await acme.get("/v1/audit/recent")).status_code == 403
    found = await admin.get("/ui/admission", params={"q": "glob"})
    assert "globex" in found.text and "acme</td>" not in found.text
    assert [i["session"] for i in (await admin.get("/v1/queue?q=ACM")).json()["items"]] == ["acme"]


async def test_delayed_starts_are_listed_as_scheduled_each_to_its_own_tenant(
    serve: Serve,
) -> None:
    _, client = await serve()
    acme, globex, admin = client("acme"), client("globex"), client("admin")
    ids = {}
    for who, c in (("acme", acme), ("globex", globex)):
        r = await c.post("/v1/starts", json={"workflow": "echo", "input": 1, "delay": 60})
        assert r.status_code == 202 and r.json()["status"] == "SCHEDULED"
        ids[who] = r.json()["start_id"]
    sleeping = (await acme.post("/v1/starts", json={"workflow": "sleeper"})).json()
    for _ in range(500):  # its wake-up is a SCHEDULED start too, but not a delayed one
        got = await acme.get(f"/v1/executions/{sleeping['execution_id']}")
        if got.json()["status"] == "WAITING":
            break
        await asyncio.sleep(0.01)
    mine = (await acme.get("/v1/queue")).json()["scheduled"]
    assert [s["start_id"] for s in mine] == [ids["acme"]] and mine[0]["tenant"] == "acme"
    all_of_them = (await admin.get("/v1/queue")).json()["scheduled"]
    assert sorted(s["start_id"] for s in all_of_them) == sorted(ids.values())
    page = (await acme.get("/ui/admission")).text
    assert f'id="s-{ids["acme"]}"' in page and ids["globex"] not in page
    assert "UTC" in page.split(f'id="s-{ids["acme"]}"')[1].split("</tr>")[0]
    found = (await admin.get("/v1/queue", params={"q": "GLOB"})).json()["scheduled"]
    assert [s["start_id"] for s in found] == [ids["globex"]]


async def test_a_tenant_gets_no_why_of_another_tenants_start(serve: Serve) -> None:
    _, client = await _queue_two_tenants(serve)
    admin, acme = client("admin"), client("acme")
    queued = {i["session"]: i["start_id"] for i in (await admin.get("/v1/queue")).json()["items"]}
    theirs, own = queued["globex"], queued["acme"]
    unknown = "00000000-0000-4000-8000-000000000000"

    async def seen(path: str, start_id: str) -> tuple[int, str]:
        r = await acme.get(path.format(start_id))
        return r.status_code, r.text.replace(start_id, "<id>")

    # Another tenant's start is absent, as one that never was: the same answer, word for word.
    for path in ("/ui/starts/{}", "/ui/f/why?id={}", "/v1/starts/{}/why"):
        status, text = await seen(path, theirs)
        assert (status, text) == await seen(path, unknown), path
        assert "globex" not in text and "no start <id>" in text, path
    for path in (f"/ui/starts/{own}", f"/ui/f/why?id={own}"):
        r = await acme.get(path)
        assert r.status_code == 200 and own in r.text, path
    assert (await admin.get(f"/ui/f/why?id={theirs}")).status_code == 200


async def test_login_trades_a_token_for_a_cookie_that_only_reads_the_api(serve: Serve) -> None:
    _, client = await serve()
    anon = client("nobody")
    page = await anon.get("/ui/admission")
    assert page.status_code == 303 and page.headers["location"].startswith("/ui/login")
    bad = await anon.post("/ui/login", data={"token": "wrong"})
    assert bad.status_code == 401 and "not valid" in bad.text
    ok = await anon.post("/ui/login", data={"token": TOKENS["acme"][0], "next": "/ui/fairness"})
    assert ok.status_code == 303 and ok.headers["location"] == "/ui/fairness"
    cookie = ok.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert (await anon.get("/ui/admission")).status_code == 200
    assert (await anon.get("/v1/overview")).json()["principal"] == "acme-ci"
    refused = await anon.post("/v1/starts", json={"workflow": "echo"})
    assert refused.status_code == 401  # the cookie never changes state through the API
    open_redirect = await anon.post(
        "/ui/login", data={"token": TOKENS["acme"][0], "next": "//evil.example/"}
    )
    assert open_redirect.headers["location"] == "/ui/"


async def test_a_control_needs_the_csrf_token_and_this_origin(serve: Serve) -> None:
    _, client = await serve(Limits(max_running=1))
    admin = client("nobody")
    await admin.post("/ui/login", data={"token": TOKENS["admin"][0]})
    page = (await admin.get("/ui/")).text
    csrf = page.split('name="csrf" value="')[1].split('"')[0]
    form = {"max_running": "3", "on_limit": "queue"}
    assert (await admin.post("/ui/actions/limits", data=form)).status_code == 403
    foreign = await admin.post(
        "/ui/actions/limits",
        data={**form, "csrf": csrf},
        headers={"Origin": "http://evil.example"},
    )
    assert foreign.status_code == 403
    assert (await client("admin").get("/v1/limits")).json()["max_running"] == 1
    done = await admin.post(
        "/ui/actions/limits", data={**form, "csrf": csrf, "next": "/ui/admission"}
    )
    assert done.status_code == 303 and done.headers["location"] == "/ui/admission"
    assert (await client("admin").get("/v1/limits")).json()["max_running"] == 3


async def test_a_fragment_is_rendered_once_per_version_for_every_viewer(serve: Serve) -> None:
    server, client = await _queue_two_tenants(serve)
    cache = server.dashboard.pages.cache
    before = cache.renders
    bodies = await asyncio.gather(*(client("admin").get("/ui/f/queue") for _ in range(5)))
    assert {b.status_code for b in bodies} == {200}
    assert cache.renders == before + 1
    await client("admin").get("/ui/f/queue")  # later, same version: from the cache
    assert cache.renders == before + 1
    server.dashboard.hub.bump()
    await client("operator").get("/ui/f/queue")  # another scope: its own render
    await client("admin").get("/ui/f/queue")
    assert cache.renders == before + 3


async def test_the_hub_coalesces_signals_and_never_drops_the_last() -> None:
    state = {"n": 0}
    hub = Hub(lambda: state["n"])
    hub.tick()
    first = hub.version
    for _ in range(10):  # a burst between two ticks is one signal
        state["n"] += 1
    hub.tick()
    assert hub.version == first + 1
    hub.tick()
    assert hub.version == first + 1  # nothing changed: no signal
    waiter = asyncio.ensure_future(hub.wait(hub.version, timeout=5))
    await asyncio.sleep(0)
    state["n"] += 1  # the last change of a burst
    hub.tick()
    assert await waiter == first + 2
    hub.close()
    assert await hub.wait(hub.version, timeout=5) == first + 2  # closed: no waiting


async def test_jain_is_sampled_over_every_session_with_work(serve: Serve) -> None:
    server, client = await serve(Limits(max_running=3, max_running_per_session=2))
    acme = client("acme")
    for _ in range(3):  # acme runs two and queues one; globex runs one
        await acme.post("/v1/starts", json={"workflow": "hold"})
    await client("globex").post("/v1/starts", json={"workflow": "hold"})
    server.dashboard._sampled_at = 0
    server.dashboard._sample()
    # running per session (2, 1): (2 + 1)^2 / (2 * (4 + 1)) = 0.9
    [jain] = [j for j in server.state.recorder.series(10, [])["jain"] if j is not None][-1:]
    assert jain == pytest.approx(0.9)
    assert (await client("admin").get("/v1/fairness")).json()["jain"] == pytest.approx(0.9)


async def test_the_fairness_view_reads_its_running_counts_from_one_snapshot(serve: Serve) -> None:
    # The Running card and the rows must be one reading: the rows never add up to more than
    # the card, nor their shares of it to more than 100%, even while a grant is in flight
    # (the scheduler has picked it; the store has not counted it yet).
    server, client = await serve(Limits(max_running=4, max_running_per_session=1))
    admin = client("admin")
    store = server.app.store
    assert store is not None

    async def start(workflow: str, session: str) -> int:
        r = await admin.post("/v1/starts", json={"workflow": workflow, "session": session})
        return r.status_code

    assert await start("hold", "s") == 201  # runs, counted in the store
    assert await start("echo", "s") == 202  # queued behind it (one per session)
    real, in_store, let_go = store.grant_starts, asyncio.Event(), asyncio.Event()

    async def held_grants(requests: Any, *, now: float) -> Any:
        in_store.set()
        await let_go.wait()
        return await real(requests, now=now)

    store.grant_starts = held_grants  # type: ignore[method-assign]
    granting = asyncio.create_task(start("hold", "t"))  # picked; its grant waits
    await asyncio.wait_for(in_store.wait(), 10)
    assert await start("echo", "t") == 202
    try:
        body = (await admin.get("/v1/fairness")).json()
        running = {r["session"]: r["running"] for r in body["items"]}
        assert running == {"s": 1, "t": 1}
        assert body["running"] == 2, body
        assert sum(r["share_running"] for r in body["items"]) == pytest.approx(1.0)
    finally:
        let_go.set()
        assert await granting == 201
        server.app.gate.set()  # type: ignore[attr-defined]


async def test_the_fairness_view_puts_tenants_first_and_counts_their_refusals(
    serve: Serve,
) -> None:
    """Tenants first: each with its weight, queued and running starts, its share against its
    target (operators only) and its refusals of the last minute by cause; a plain tenant gets
    its own row alone."""
    server, client = await serve(Limits(max_running=1))
    admin, acme = client("admin"), client("acme")
    r = await admin.put("/v1/tenants/globex", json={"weight": 3, "executions": {"max_queued": 1}})
    assert r.status_code == 200, r.text
    assert (await acme.post("/v1/starts", json={"workflow": "hold"})).status_code == 201
    assert (await acme.post("/v1/starts", json={"workflow": "echo"})).status_code == 202
    globex = client("globex")
    assert (await globex.post("/v1/starts", json={"workflow": "echo"})).status_code == 202
    for _ in range(2):  # past its queue bound: refused, it alone
        assert (await globex.post("/v1/starts", json={"workflow": "echo"})).status_code == 429
    try:
        rows = {r["tenant"]: r for r in (await admin.get("/v1/fairness")).json()["tenants"]}
        assert set(rows) == {"acme", "globex"}
        assert (rows["acme"]["running"], rows["acme"]["queued"]) == (1, 1)
        assert (rows["globex"]["weight"], rows["globex"]["queued"]) == (3.0, 1)
        assert rows["globex"]["target_share"] == 0.75 and rows["acme"]["share_running"] == 1.0
        assert rows["globex"]["refused_last_minute"] == {"rate": 0, "queue_bound": 2, "limit": 0}
        mine = (await acme.get("/v1/fairness")).json()["tenants"]
        assert [r["tenant"] for r in mine] == ["acme"]
        assert mine[0]["target_share"] is None and mine[0]["share_running"] is None
        metrics = (await client("scraper").get("/metrics")).text
        assert 'yoke_tenant_starts_refused_total{cause="tenant_queue",tenant="globex"} 2.0' in (
            metrics
        )
    finally:
        server.app.gate.set()  # type: ignore[attr-defined]
