"""A runtime change must not land without its control-log entry, nor the entry without the
change: a priority change and its entry are one transaction. Here the database itself refuses
the entry (a trigger), after the priority was written in the same transaction."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

import yoke
from yoke.errors import YokeError
from yoke.executions import Limits, StartStatus

from .helpers import Gates, make_app

OPERATOR = yoke.Principal("op", ["OPERATOR"])


def refuse_audit_entries(database_url: str) -> None:
    if database_url.startswith("sqlite:"):
        with sqlite3.connect(database_url.removeprefix("sqlite:///")) as db:
            db.execute(
                "CREATE TRIGGER refuse_audit BEFORE INSERT ON yoke_control_log "
                "BEGIN SELECT RAISE(ABORT, 'audit refused'); END"
            )
        return
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION refuse_audit() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'audit refused'; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse_audit BEFORE INSERT ON yoke_control_log "
            "FOR EACH ROW EXECUTE FUNCTION refuse_audit()"
        )


def allow_audit_entries(database_url: str) -> None:
    """The test databases outlive a test (PostgreSQL's are truncated, not dropped)."""
    if database_url.startswith("sqlite:"):
        with sqlite3.connect(database_url.removeprefix("sqlite:///")) as db:
            db.execute("DROP TRIGGER IF EXISTS refuse_audit")
        return
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER IF EXISTS refuse_audit ON yoke_control_log")
        conn.execute("DROP FUNCTION IF EXISTS refuse_audit()")


async def test_a_priority_change_whose_audit_fails_changes_nothing(database_url: str) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=1))
    async with app.running():
        store = app.store
        assert store is not None
        ex = app.executions
        await ex.start("hold", {"gate": "a"})
        queued = await ex.start("hold", {"gate": "b"})
        assert queued.status is StartStatus.QUEUED
        refuse_audit_entries(database_url)
        try:
            with pytest.raises(YokeError):
                await ex.set_priority(queued.start_id, 7, principal=OPERATOR)
            row = await store.get_start(queued.start_id)
            assert row is not None and row.priority == queued.priority  # unchanged
            assert [e for e in await ex.audit() if e.kind == "priority"] == []
        finally:
            allow_audit_entries(database_url)
            gates.open("a")
            gates.open("b")
