"""Applying every migration in order gives exactly the fresh schema (`schema.sql`), on each
backend; migrations apply once, keep data, and `upgrade()` reports the version."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from yoke.app import upgrade
from yoke.store import sqlfiles
from yoke.store.postgres import migrate as pg_migrate
from yoke.store.sqlite import migrate as sqlite_migrate

LATEST = sqlfiles.latest("sqlite")


def _norm(sql: str | None) -> str:
    return re.sub(r"\s+", " ", sql or "").strip()


def sqlite_schema(conn: sqlite3.Connection) -> dict[str, Any]:
    tables = [
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    ]
    out: dict[str, Any] = {}
    for t in sorted(tables):
        cols = sorted(tuple(r[1:]) for r in conn.execute(f"PRAGMA table_info({t})"))
        idx = []
        for r in conn.execute(f"PRAGMA index_list({t})"):
            name = r[1]
            cols_ = [c[2] for c in conn.execute(f"PRAGMA index_info({name})")]
            sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()
            idx.append((name, r[2], r[3], r[4], tuple(cols_), _norm(sql[0] if sql else None)))
        out[t] = {"columns": cols, "indexes": sorted(idx)}
    return out


def pg_schema(url: str) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        cols = conn.execute(
            "SELECT table_name, column_name, data_type, is_nullable, column_default, is_identity"
            " FROM information_schema.columns WHERE table_schema = 'public'"
            " ORDER BY table_name, column_name"
        ).fetchall()
        idx = conn.execute(
            "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'"
            " ORDER BY indexname"
        ).fetchall()
        cons = conn.execute(
            "SELECT c.relname, k.conname, pg_get_constraintdef(k.oid) FROM pg_constraint k"
            " JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' ORDER BY k.conname"
        ).fetchall()
    return {"columns": cols, "indexes": idx, "constraints": cons}


def test_sqlite_migrated_equals_fresh(tmp_path: Path) -> None:
    fresh = sqlite3.connect(tmp_path / "fresh.db", isolation_level=None)
    migrated = sqlite3.connect(tmp_path / "migrated.db", isolation_level=None)
    assert sqlite_migrate(fresh) == LATEST
    assert sqlite_migrate(migrated, fresh_install=False) == LATEST
    assert sqlite_schema(fresh) == sqlite_schema(migrated)
    assert "yoke_instances" in sqlite_schema(fresh)


def test_sqlite_upgrade_keeps_data_and_applies_each_migration_once(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
    assert sqlite_migrate(conn, upto=1) == 1
    conn.execute("INSERT INTO yoke_ledger (key, running) VALUES ('global', 3)")
    assert sqlite_migrate(conn) == LATEST
    assert sqlite_migrate(conn) == LATEST
    assert conn.execute("SELECT running FROM yoke_ledger").fetchone() == (3,)
    versions = [r[0] for r in conn.execute("SELECT version FROM yoke_schema_migrations")]
    assert versions == [m.version for m in sqlfiles.migrations("sqlite")]
    fresh = sqlite3.connect(tmp_path / "fresh.db", isolation_level=None)
    sqlite_migrate(fresh)
    assert sqlite_schema(conn) == sqlite_schema(fresh)


@pytest.mark.postgres
async def test_postgres_migrated_equals_fresh(pg_databases: Callable[[], str]) -> None:
    fresh_url, migrated_url, old_url = pg_databases(), pg_databases(), pg_databases()
    async with await psycopg.AsyncConnection.connect(fresh_url, autocommit=True) as c:
        assert await pg_migrate(c) == LATEST
    async with await psycopg.AsyncConnection.connect(migrated_url, autocommit=True) as c:
        assert await pg_migrate(c, fresh_install=False) == LATEST
    async with await psycopg.AsyncConnection.connect(old_url, autocommit=True) as c:
        assert await pg_migrate(c, upto=1) == 1
        await c.execute("INSERT INTO yoke_ledger (key, running) VALUES ('global', 3)")
    assert await upgrade(old_url) == LATEST
    assert await upgrade(old_url) == LATEST
    fresh = pg_schema(fresh_url)
    assert fresh == pg_schema(migrated_url) == pg_schema(old_url)
    with psycopg.connect(old_url) as conn:
        assert conn.execute("SELECT running FROM yoke_ledger").fetchone() == (3,)


async def test_upgrade_of_a_sqlite_url(tmp_path: Path) -> None:
    assert await upgrade(f"sqlite:///{tmp_path}/u.db") == LATEST


def test_each_backend_has_the_same_migrations_and_queries() -> None:
    assert [m.name for m in sqlfiles.migrations("sqlite")] == [
        m.name for m in sqlfiles.migrations("postgres")
    ]
    # Only PostgreSQL announces a freed slot (NOTIFY); SQLite peers rely on the backup poll.
    # A batch verb runs one statement per row on SQLite (`name`, inline) and one per batch on
    # PostgreSQL (`name_many`, one round trip).
    batched = {"insert_start", "mark_granted", "insert_execution"}
    # An actor append and a batch of finishes are one statement on PostgreSQL; a SQLite
    # statement writes one table (and a release of ledger counts is followed by the delete of
    # the rows back at zero, which PostgreSQL's release does in the same statement).
    only_sqlite = batched | {"finish_execution", "drop_idle_slots"}
    only_pg = {f"{name}_many" for name in batched} | {
        "notify_slot_freed",
        "append_events",
        "finish_executions_one",
        # Step records: the shared `record_step` per record on SQLite, one batch here.
        "record_step_many",
        "grant_logged_one",
        # A grant batch's executions and ledger counts, one statement.
        "insert_executions_and_count",
        # Ends and the grants that take their slots, one statement (D24's hand-over).
        "hand_over",
        # Delayed starts: the shared `schedule_start` per start on SQLite, one batch here.
        "schedule_starts_many",
    }
    sqlite, pg = set(sqlfiles.queries("sqlite")), set(sqlfiles.queries("postgres"))
    assert sqlite - pg == only_sqlite
    assert pg - sqlite == only_pg
