"""The dashboard's memory of the recent past keeps each tenant's figures its own: a tenant that
opens thousands of sessions a second folds its own excess into its own aggregate, never another
tenant's grants into a shared row, and no session name can pass for an aggregate."""

from __future__ import annotations

import time

import pytest

from tests.server.conftest import Serve
from yoke.executions import Start
from yoke.server import recorder
from yoke.server.recorder import Recorder
from yoke.store.records import StartKind, StartStatus

NOW = 1_000_000.0


def _start(session: str, wait: float = 0.5) -> Start:
    return Start(
        start_id=f"s-{session}",
        status=StartStatus.GRANTED,
        workflow="echo",
        session=session,
        tenant=session.split("/")[0],
        priority=0,
        kind=StartKind.START,
        created_at=NOW - wait,
        decided_at=NOW,
    )


def _flood(rec: Recorder, tenant: str, sessions: int) -> None:
    for i in range(sessions):
        rec.granted(_start(f"{tenant}/s{i}"))


def test_a_flood_of_sessions_folds_into_its_own_tenants_aggregate() -> None:
    rec = Recorder(lambda: NOW)
    _flood(rec, "globex", recorder.MAX_SESSIONS + 500)
    rec.granted(_start("acme/cart", wait=2.0))
    rec.granted(_start("acme"))
    named = rec.sessions(10)
    assert named["acme/cart"].starts == 1 and named["acme/cart"].waits == (2.0,)
    assert named["acme"].starts == 1
    assert sum(1 for n in named if n.startswith("globex/")) == recorder.MAX_PER_TENANT
    folded = rec.folded(10)
    assert list(folded) == ["globex"]
    assert folded["globex"].starts == recorder.MAX_SESSIONS + 500 - recorder.MAX_PER_TENANT
    assert rec.totals(10)[0] == recorder.MAX_SESSIONS + 502
    acme = rec.starts_where(10, lambda n: n == "acme" or n.startswith("acme/"))
    assert sum(acme) == 2


def test_when_every_name_is_taken_a_tenants_sessions_still_count_as_its_own() -> None:
    rec = Recorder(lambda: NOW)
    tenants = recorder.MAX_SESSIONS // recorder.MAX_PER_TENANT
    for t in range(tenants):  # every named slot of the second is taken
        _flood(rec, f"t{t}", recorder.MAX_PER_TENANT)
    rec.granted(_start("acme/cart"))
    rec.granted(_start("acme/cart"))
    assert "acme/cart" not in rec.sessions(10)
    assert rec.folded(10)["acme"].starts == 2
    assert sum(rec.starts_where(10, lambda n: n.partition("/")[0] == "acme")) == 2


def test_a_session_named_like_an_aggregate_is_only_a_session() -> None:
    rec = Recorder(lambda: NOW)
    _flood(rec, "globex", recorder.MAX_PER_TENANT + 10)
    rec.granted(_start("_other"))
    assert rec.sessions(10)["_other"].starts == 1
    assert "_other" not in rec.folded(10)
    assert sum(rec.starts_where(10, lambda n: n == "_other")) == 1


async def test_a_tenants_views_keep_its_grants_under_another_tenants_flood(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, client = await serve()
    rec = server.state.recorder
    # One second for the whole test: the limit on named sessions is per second, so a flood fed
    # across a second's boundary names up to twice as many (seen under load: 1,765 folded).
    frozen = float(int(time.time()))
    monkeypatch.setattr(rec, "_wall", lambda: frozen)
    for i in range(recorder.MAX_SESSIONS + 100):
        rec.granted(_start(f"globex/s{i}"))
    for _ in range(20):
        rec.granted(_start("acme/cart"))
    acme = client("acme")
    over = (await acme.get("/v1/overview")).json()
    assert over["starts_per_second"] == 2.0  # 20 starts over the 10 s window
    fair = (await acme.get("/v1/fairness")).json()
    assert fair["folded"] == []  # globex's aggregate is not acme's to see
    series = (await acme.get("/v1/series", params={"seconds": 60})).json()
    assert sum(series["starts"]) == 20 and series["sessions"] == ["acme/cart"]
    mine = (await client("globex").get("/v1/fairness")).json()["folded"]
    assert [f["tenant"] for f in mine] == ["globex"]
    assert mine[0]["starts"] == recorder.MAX_SESSIONS + 100 - recorder.MAX_PER_TENANT
