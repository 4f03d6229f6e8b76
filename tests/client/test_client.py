"""`yoke.client` against a real `yoke serve` on SQLite and PostgreSQL: every group of the v1 API
(starts with their waits, executions, limits, tenants, the scheduler's and the dashboard's
reads, events and the actor reads, workers and executors) comes back as yoke's typed values,
through the sync client and the async one; the token and the URL come from the environment."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from yoke.client import (
    ActorList,
    AsyncClient,
    Client,
    Executors,
    Fairness,
    Overview,
    QueueView,
    Scheduler,
    Workers,
)
from yoke.client.calls import DEFAULT_URL
from yoke.executions import ExecutionStatus, Limits, StartKind, StartStatus

Make = Callable[[str], Client]


def test_a_start_waits_for_its_grant_and_its_result(client: Make) -> None:
    c = client("acme")
    start = c.start("echo", {"n": 1}, wait=5)
    assert start.status is StartStatus.GRANTED and start.execution_id is not None
    assert start.session == "acme"  # a tenant's start lands in its tenant
    done = c.wait(start.execution_id, timeout=10)
    assert done.status is ExecutionStatus.SUCCEEDED and done.output == {"n": 1}
    ran = c.run("steps", None, session="acme/run", timeout=10)
    assert ran.status is ExecutionStatus.SUCCEEDED and ran.output == {"a": 1, "b": {"x": 1}}
    failed = c.run("fail", "x", timeout=10)
    assert failed.status is ExecutionStatus.FAILED and failed.error is not None
    assert "asked to fail: x" in failed.error.message


def test_a_delayed_start_and_a_signal(client: Make) -> None:
    c = client("acme")
    start = c.start("echo", "later", delay=0.3)
    assert start.status is StartStatus.SCHEDULED and start.due_at is not None
    granted = c.wait_granted(start.start_id, timeout=10)
    assert granted.status is StartStatus.GRANTED and granted.execution_id is not None
    assert c.wait(granted.execution_id, timeout=10).output == "later"
    cancelled = c.cancel_start(c.start("echo", at=time.time() + 60).start_id)
    assert cancelled.status is StartStatus.CANCELLED
    waiter = c.start("approval", wait=5)
    assert waiter.execution_id is not None
    deadline = time.monotonic() + 10
    while c.execution(waiter.execution_id).status is not ExecutionStatus.WAITING:
        assert time.monotonic() < deadline
        time.sleep(0.02)  # polling the API, as a client would
    sent = c.signal(waiter.execution_id, "approve", {"ok": True})
    assert sent.execution_id == waiter.execution_id
    assert c.wait(waiter.execution_id, timeout=10).output == {"ok": True}


def test_a_wait_ends_when_the_execution_ends_not_at_its_bound(client: Make) -> None:
    c = client("acme")
    start = c.start("hold", 0.5, wait=5)
    assert start.execution_id is not None
    t0 = time.monotonic()
    done = c.wait(start.execution_id, timeout=30)
    took = time.monotonic() - t0
    assert done.status is ExecutionStatus.SUCCEEDED and done.output == {"slept": 0.5}
    assert took < 10, took  # the long-poll answered at the end, not at the 30 s bound
    running = c.start("hold", 30, wait=5)
    assert running.execution_id is not None
    seen = c.wait(running.execution_id, timeout=0.5)  # the bound: returned as it is
    assert seen.status is ExecutionStatus.RUNNING
    c.cancel(running.execution_id)


def test_executions_list_show_steps_restart_resume_cancel(client: Make) -> None:
    c = client("acme")
    ran = c.run("steps", None, session="acme/lineage", timeout=10)
    page = c.executions(session="acme/lineage", workflow="steps")
    assert [e.execution_id for e in page.items] == [ran.execution_id]
    assert c.execution(ran.execution_id) == ran
    detail = c.steps(ran.execution_id)
    assert detail.execution == ran
    assert [s.name for s in detail.steps] == ["a", "child:echo"]
    assert [k.workflow for k in detail.children] == ["echo"]
    again = c.restart(ran.execution_id, from_step="a", wait=5)
    assert again.kind is StartKind.RESTART and again.source_execution_id == ran.execution_id
    held = c.start("hold", 30, session="acme/lineage", wait=5)
    assert held.execution_id is not None
    cancelled = c.cancel(held.execution_id)
    assert cancelled.status is ExecutionStatus.CANCELLED
    resumed = c.resume(held.execution_id, wait=5)
    assert resumed.kind is StartKind.RESUME and resumed.execution_id is not None
    c.cancel(resumed.execution_id)
    first = c.executions(session="acme/lineage", limit=1)
    assert len(first.items) == 1 and first.next_cursor is not None
    rest = c.executions(session="acme/lineage", limit=100, cursor=first.next_cursor)
    assert first.items[0].execution_id not in {e.execution_id for e in rest.items}


def test_a_queued_start_why_priority_and_cancel(client: Make) -> None:
    admin, ops, acme = client("admin"), client("operator"), client("acme")
    before = admin.limits()
    admin.set_limits(Limits(max_running_per_workflow={"hold": 1}))
    try:
        assert admin.limits().max_running_per_workflow == {"hold": 1}
        first = acme.start("hold", 30, session="acme/q", wait=5)
        assert first.status is StartStatus.GRANTED and first.execution_id is not None
        queued = acme.start("hold", 1, session="acme/q")
        assert queued.status is StartStatus.QUEUED and queued.position == 1
        why = acme.why(queued.start_id)
        assert why.waiting and why.blocked_by == "max_running_per_workflow" and why.ahead == 0
        assert ops.set_priority(queued.start_id, 5).priority == 5
        assert acme.get_start(queued.start_id).priority == 5
        cancelled = acme.cancel_start(queued.start_id)
        assert cancelled.status is StartStatus.CANCELLED
        acme.cancel(first.execution_id)
    finally:
        admin.set_limits(before)
    assert admin.limits() == before


def test_tenants_the_scheduler_and_the_dashboard_reads(client: Make) -> None:
    admin, acme = client("admin"), client("acme")
    set_to = admin.set_tenant("acme", weight=2.0, executions={"max_running": 50})
    assert (set_to.tenant, set_to.weight, set_to.executions.max_running) == ("acme", 2.0, 50)
    admin.set_tenant("*", actors={"max_timers": 1000})
    cleared = admin.set_tenant("acme", executions={"max_running": None})
    assert (cleared.weight, cleared.executions.max_running) == (2.0, None)  # the rest stays
    assert cleared.effective is not None and cleared.effective.actors.max_timers == 1000
    assert {t.tenant for t in acme.tenants()} == {"acme", "*"}  # its own, and the defaults
    assert "acme" in {t.tenant for t in admin.tenants()}
    assert isinstance(acme.scheduler(), Scheduler)
    overview = admin.overview()
    assert isinstance(overview, Overview) and overview.principal == "root"
    later = acme.start("echo", {"x": 1}, delay=600)  # a delayed start: listed as scheduled
    queue = admin.queue(limit=5)
    assert isinstance(queue, QueueView)
    assert later.start_id in {s.start_id for s in queue.scheduled}
    acme.cancel_start(later.start_id)
    fairness = admin.fairness(window=60)
    assert isinstance(fairness, Fairness) and fairness.window_seconds == 60
    assert admin.series(seconds=10).seconds == 10
    assert isinstance(admin.timers(), tuple)
    assert any(e.kind == "tenant" for e in admin.audit(limit=1000))
    assert any(e.kind == "tenant" for e in admin.recent_audit(limit=50).items)
    assert admin.ha().role == "solo"
    assert "yoke_starts_total" in client("scraper").metrics()


def test_events_and_the_actor_reads(client: Make) -> None:
    ops, acme, globex = client("operator"), client("acme"), client("globex")
    mine = acme.append("ticks", {"id": "t1"})
    assert (mine.stream, mine.tenant) == ("ticks", "acme") and mine.event_id > 0
    theirs = ops.append("ticks", {"id": "t1"}, tenant="globex")
    assert theirs.tenant == "globex"
    deadline = time.monotonic() + 30
    while acme.instance("counter", "t1").state != {"n": 1}:
        assert time.monotonic() < deadline, acme.instance("counter", "t1")
        time.sleep(0.05)  # polling the API: the worker processes the event when it can
    assert globex.instance("counter", "t1").tenant == "globex"
    listed = acme.actors()
    assert isinstance(listed, ActorList) and [a.name for a in listed.items] == ["counter"]
    assert [i.instance_id for i in acme.instances("counter").items] == ["t1"]
    workers = ops.workers()
    assert isinstance(workers, Workers) and [w.status for w in workers.items] == ["live"]
    assert isinstance(ops.executors(), Executors)


async def test_the_async_client_speaks_the_same_api(server: str) -> None:
    from tests.server.conftest import TOKENS

    async with AsyncClient(server, TOKENS["acme"][0]) as c:
        ran = await c.run("echo", [1, 2], timeout=10)
        assert ran.status is ExecutionStatus.SUCCEEDED and ran.output == [1, 2]
        assert (await c.execution(ran.execution_id)) == ran
        page = await c.executions(workflow="echo", limit=1000)
        assert ran.execution_id in {e.execution_id for e in page.items}
        assert (await c.append("ticks", {"id": "a1"})).tenant == "acme"


def test_the_token_and_the_url_come_from_the_environment(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.server.conftest import TOKENS

    monkeypatch.setenv("YOKE_URL", server)
    monkeypatch.setenv("YOKE_TOKEN", TOKENS["globex"][0])
    with Client() as c:
        assert c.url == server
        assert c.start("echo", None, wait=5).session == "globex"


def test_the_default_url_is_where_yoke_serve_listens() -> None:
    import typer.main

    from yoke.cli import app

    serve = typer.main.get_group(app).commands["serve"]
    defaults = {p.name: p.default for p in serve.params}
    assert f"http://{defaults['host']}:{defaults['port']}" == DEFAULT_URL
