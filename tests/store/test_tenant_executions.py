"""A plain tenant's executions are read from its own rows: `list_executions(tenant=...)` walks
the `yoke_executions_tenant` index (the tenant stored with each, newest first), so a page costs
that tenant's rows however many other tenants have, on both stores; the query plans say so, on
PostgreSQL also in a generic plan (as a prepared statement is run after a few executions)."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path

import psycopg
import pytest

from tests.conftest import _truncate
from tests.store.plans import Plan, analyzed_plan
from tests.store.plans import nodes as plan_nodes
from yoke.app import open_store
from yoke.store import Store, sqlfiles

OTHERS = 2000


def _rows(
    n: int, session: str, start: int
) -> list[tuple[str, str, str, str, str, str, str, float]]:
    tenant = session.split("/")[0]
    return [
        (f"e{start + i}", "echo", session, tenant, "null", "SUCCEEDED", "i", float(start + i))
        for i in range(n)
    ]


INSERT = (
    "INSERT INTO yoke_executions (execution_id, workflow, session, tenant, input, status, "
    "instance_id, created_at) VALUES ({})"
)


def _fill(database_url: str) -> None:
    rows = (
        _rows(3, "acme", 0)
        + _rows(OTHERS, "globex", 10)
        + _rows(2, "acme/cart-1", 5000)
        + _rows(OTHERS, "acmex", 6000)  # a tenant whose name starts like acme's
        + _rows(1, "acme", 9000)
    )
    if database_url.startswith("sqlite"):
        with sqlite3.connect(database_url.removeprefix("sqlite:///")) as lite:
            lite.executemany(INSERT.format(", ".join("?" * 8)), rows)
        return
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.cursor().executemany(INSERT.format(", ".join(["%s"] * 8)).encode(), rows)
        conn.execute(b"ANALYZE yoke_executions")


async def test_a_tenants_pages_hold_its_sessions_alone(store: Store, database_url: str) -> None:
    _fill(database_url)
    seen: list[tuple[str, str]] = []
    before = None
    while True:
        page = await store.list_executions(tenant="acme", limit=2, before_seq=before)
        seen += [(r.execution_id, r.session) for r in page]
        if len(page) < 2:
            break
        before = page[-1].seq
    assert seen == [
        ("e9000", "acme"),
        ("e5001", "acme/cart-1"),
        ("e5000", "acme/cart-1"),
        ("e2", "acme"),
        ("e1", "acme"),
        ("e0", "acme"),
    ]
    only = await store.list_executions(tenant="acme", session="acme/cart-1")
    assert [r.execution_id for r in only] == ["e5001", "e5000"]
    assert await store.list_executions(tenant="acme", session="globex") == []
    assert len(await store.list_executions(tenant="globex", limit=5000)) == OTHERS


def _pg_explain(url: str, generic: bool) -> Plan:
    args = {"tenant": "acme", "before_seq": None, "status": None, "session": None,
            "workflow": None, "limit": 101}  # fmt: skip
    return analyzed_plan(url, "tenant_executions", args, generic=generic)


def _count(node: dict[str, object], key: str) -> int:
    value = node.get(key, 0)
    assert isinstance(value, int | float)
    return int(value)


@pytest.mark.postgres
@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
async def test_postgres_reads_one_tenants_rows_through_its_index(
    pg_url: str, generic: bool
) -> None:
    s = open_store(pg_url)
    await s.open()  # the schema, migrated
    await s.close()
    _truncate(pg_url)
    _fill(pg_url)
    nodes = plan_nodes(_pg_explain(pg_url, generic))
    assert {n.get("Index Name") for n in nodes} >= {"yoke_executions_tenant"}, nodes
    assert all(n["Node Type"] != "Seq Scan" for n in nodes), nodes
    # Rows the scans touched: what the leaf scans found, and what any scan then threw away.
    scans = [n for n in nodes if "Scan" in str(n["Node Type"])]
    found = sum(_count(n, "Actual Rows") for n in scans if not n.get("Plans"))
    dropped = sum(_count(n, "Rows Removed by Filter") for n in scans)
    scanned = found + dropped
    assert scanned == 6, nodes  # acme's rows, never another tenant's


def _vm_steps(conn: sqlite3.Connection, sql: str, args: Mapping[str, object]) -> int:
    """SQLite's virtual-machine instructions to run `sql` (a count of the work done)."""
    calls = 0

    def tick() -> int:
        nonlocal calls
        calls += 1
        return 0

    conn.set_progress_handler(tick, 1)
    try:
        conn.execute(sql, args).fetchall()
    finally:
        conn.set_progress_handler(None, 1)
    return calls


async def test_sqlite_reads_one_tenants_rows_through_its_index(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/plan.db"
    s = open_store(url)
    await s.open()
    await s.close()
    _fill(url)
    sql = sqlfiles.queries("sqlite")["tenant_executions"]
    args = {"tenant": "acme", "before_seq": None, "status": None, "session": None,
            "workflow": None, "limit": 101}  # fmt: skip
    with sqlite3.connect(tmp_path / "plan.db") as conn:
        plan = " / ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", args))
        assert "USING INDEX yoke_executions_tenant" in plan, plan
        assert "SCAN yoke_executions" not in plan.replace("USING INDEX", ""), plan
        whole = {**args, "limit": 10_000}
        mine = _vm_steps(conn, sql, whole)
        theirs = _vm_steps(conn, sql, {**whole, "tenant": "globex"})
        # Work in proportion to the tenant's own rows: acme's 6, not the others' 4,000.
        assert mine * 100 < theirs, (mine, theirs)
