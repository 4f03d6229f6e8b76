"""Which of some tenants have pending rows for a worker (`tenants_with_pending`, the executor
lifecycle's sweep) costs one index probe per tenant asked about on PostgreSQL, whatever the
backlog of any tenant and whether or not the table was analyzed since it grew: the plan says
so, before and after an ANALYZE, custom and generic. An EXISTS was planned as a semi-join that
read every pending row of the worker (5,000 here: the as-grown cases fail with it). A LATERAL
... LIMIT 1 with the tenant as an equality was seen, after an ANALYZE of a table holding other
tests' rows, to walk the primary key past 33,000 rows per tenant."""

from __future__ import annotations

import json

import psycopg
import pytest

from tests.conftest import _truncate
from tests.store.plans import Plan, analyzed_plan
from tests.store.plans import nodes as plan_nodes
from yoke.app import open_store
from yoke.store import sqlfiles

FLOOD = 5000
ASKED = ["acme", "flood", *(f"t{i}" for i in range(10))]


def _fill(url: str) -> None:
    """A flood of pending rows on w1, acme's pending rows on another worker, and done rows."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            b"INSERT INTO actor_queues (event_id, tenant, actor, instance_id, group_id, status,"
            b" available_at, worker_id, owner_epoch)"
            b" SELECT g, t.tenant, 'a', 'i' || (g %% 50), 'g', t.status, 0, t.worker, 1"
            b" FROM (VALUES ('flood', 'pending', 'w1', %(flood)s), ('acme', 'pending', 'w2', 2000),"
            b"  ('t1', 'done', 'w1', 20000)) AS t(tenant, status, worker, n),"
            b" generate_series(1, t.n) AS g",
            {"flood": FLOOD},
        )


def _explain(url: str, generic: bool) -> Plan:
    args = {"worker_id": "w1", "tenants": json.dumps(ASKED)}
    with psycopg.connect(url, autocommit=True) as conn:
        sql = sqlfiles.queries("postgres")["pending_tenants_among"]
        assert [r[0] for r in conn.execute(sql.encode(), args)] == ["flood"]
    return analyzed_plan(url, "pending_tenants_among", args, generic=generic)


def _rows_read(node: dict[str, object]) -> int:
    """Rows a table or index scan found or threw away, over all its loops."""
    loops, found, dropped = (
        float(node.get(key, 0))  # type: ignore[arg-type]
        for key in ("Actual Loops", "Actual Rows", "Rows Removed by Filter")
    )
    return round((found + dropped) * loops)


@pytest.mark.postgres
@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
@pytest.mark.parametrize("analyzed", [False, True], ids=["as-grown", "analyzed"])
async def test_postgres_probes_each_tenant_asked_about_once(
    pg_url: str, analyzed: bool, generic: bool
) -> None:
    s = open_store(pg_url)
    await s.open()
    await s.close()
    _truncate(pg_url)
    _forget_queues(pg_url)  # also forgets the table's size: as never analyzed
    try:
        _fill(pg_url)
        if analyzed:
            with psycopg.connect(pg_url, autocommit=True) as conn:
                conn.execute(b"ANALYZE actor_queues")
        nodes = plan_nodes(_explain(pg_url, generic))
    finally:
        _forget_queues(pg_url)  # the database is shared by the session's tests
    scans = [n for n in nodes if "Scan" in str(n["Node Type"]) and n.get("Relation Name")]
    assert scans and all(n["Node Type"] != "Seq Scan" for n in scans), nodes
    # At most one row per tenant asked about: flood's first, never its backlog of 5,000.
    assert sum(_rows_read(n) for n in scans) <= len(ASKED), nodes


def _forget_queues(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(b"TRUNCATE actor_queues RESTART IDENTITY")
