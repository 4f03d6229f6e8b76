"""The dashboard's browser sessions are bounded without letting one tenant log the others out:
a principal logging in by the thousand only drops its own oldest sessions, expired sessions
are dropped as new ones are made, and only a page (the answer that hands out the cookie)
makes a session for the local admin."""

from __future__ import annotations

import httpx

from tests.server.conftest import TOKENS, Client, Serve
from yoke.clock import ManualClock
from yoke.executions import Principal
from yoke.server.ui.sessions import PER_PRINCIPAL, Sessions


async def login(client: Client, who: str) -> httpx.AsyncClient:
    browser = client("nobody")
    assert (await browser.post("/ui/login", data={"token": TOKENS[who][0]})).status_code == 303
    return browser


async def whoami(browser: httpx.AsyncClient) -> str | None:
    r = await browser.get("/v1/overview")
    return r.json()["principal"] if r.status_code == 200 else None


async def test_a_login_flood_logs_out_only_the_flooding_principal(serve: Serve) -> None:
    server, client = await serve()
    sessions = server.dashboard.sessions
    sessions.max_sessions = 4 * PER_PRINCIPAL  # the bound in all, small enough to pass here
    theirs = await login(client, "globex")
    first = await login(client, "acme")
    flood = client("nobody")
    for _ in range(sessions.max_sessions + 10):
        r = await flood.post("/ui/login", data={"token": TOKENS["acme"][0]})
        assert r.status_code == 303
    assert await whoami(theirs) == "globex-ci", "another tenant's session was dropped"
    assert await whoami(flood) == "acme-ci"  # the newest of the flood still works
    assert await whoami(first) is None  # the flooder's own oldest went first
    acme = TOKENS["acme"][1]
    assert sessions.of_principal(acme) == PER_PRINCIPAL
    assert len(sessions) == PER_PRINCIPAL + 1


def test_expired_sessions_are_dropped_as_new_ones_are_made() -> None:
    clock = ManualClock()
    sessions = Sessions(ttl=10.0, clock=clock.monotonic)
    old = [sessions.create(Principal(f"p{i}", tenant=f"t{i}")) for i in range(50)]
    clock.advance(5.0)
    kept = sessions.create(Principal("p0", tenant="t0"))
    assert len(sessions) == 51
    clock.advance(6.0)  # the 50 first are past their TTL, `kept` is not
    fresh = sessions.create(Principal("q", tenant="u"))
    assert len(sessions) == 2
    assert sessions.get(old[0].sid) is None and sessions.get(kept.sid) == kept
    assert sessions.get(fresh.sid) == fresh
    assert sessions.of_principal(Principal("p1", tenant="t1")) == 0


def test_the_bound_in_all_still_holds_across_principals() -> None:
    sessions = Sessions(max_sessions=100, per_principal=3)
    made = [sessions.create(Principal(f"p{i}", tenant="t")) for i in range(150)]
    assert len(sessions) == 100
    assert sessions.get(made[0].sid) is None and sessions.get(made[-1].sid) is not None


async def test_without_tokens_only_a_page_makes_a_session(serve: Serve) -> None:
    server, client = await serve(tokens=False)
    local = client("nobody")
    for _ in range(20):
        assert (await local.get("/ui/f/overview")).status_code == 200
        r = await local.post("/ui/actions/limits", data={"max_running": "1"})
        assert r.status_code == 403  # no CSRF token: and no session made for it either
    assert len(server.dashboard.sessions) == 0
    page = await local.get("/ui/")
    assert "yoke_session=" in page.headers["set-cookie"]
    assert len(server.dashboard.sessions) == 1
