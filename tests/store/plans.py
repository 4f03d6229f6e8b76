"""PostgreSQL query plans for the tests that pin one: a named query's plan, run for real
(EXPLAIN ANALYZE), as a custom plan or as the generic one a prepared statement gets after a
few runs, and its nodes flattened."""

from __future__ import annotations

import json
from collections.abc import Mapping

import psycopg

from yoke.store import sqlfiles

Plan = dict[str, object]  # one node of EXPLAIN's JSON


def analyzed_plan(url: str, query: str, args: Mapping[str, object], *, generic: bool) -> Plan:
    sql = sqlfiles.queries("postgres")[query]
    with psycopg.connect(url, autocommit=True) as conn:
        if generic:
            conn.execute(b"SET plan_cache_mode = force_generic_plan")
            conn.prepare_threshold = 0  # prepared at once: the plan is the generic one
        row = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}".encode(), args).fetchone()
        assert row is not None
        plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
        top: Plan = plan[0]["Plan"]
        return top


def nodes(plan: Plan) -> list[Plan]:
    out = [plan]
    for child in plan.get("Plans", []):  # type: ignore[attr-defined]
        out += nodes(child)
    return out
