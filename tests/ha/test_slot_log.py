"""The chaos harness's slot log (a deferred trigger in the test database): it dates a grant
and an end at their commit, not at their statement, and tells a grant committed under a
stale term from one committed under its own or after a resign."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import psycopg
import pytest

from tests.ha.records import GRANTS_BY_TERM, SLOT_LOG
from yoke.app import upgrade

pytestmark = pytest.mark.postgres

EXECUTION = (
    "INSERT INTO yoke_executions (execution_id, workflow, session, tenant, input, status,"
    " instance_id, created_at, leader_epoch) VALUES (%s, 'work', 's', 's', '{}', 'RUNNING', %s,"
    " 0, %s)"
)


async def migrated(pg_databases: Callable[[], str]) -> str:
    url = pg_databases()
    await upgrade(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SLOT_LOG.encode())
    return url


async def test_a_grant_and_an_end_are_dated_at_their_commit(
    pg_databases: Callable[[], str],
) -> None:
    url = await migrated(pg_databases)
    with psycopg.connect(url) as conn:
        conn.execute(EXECUTION, ("a", "s0", None))
        await asyncio.sleep(0.3)  # the statement ran; the commit comes later
        committed = time.time()
        conn.commit()
        conn.execute("UPDATE yoke_executions SET status = 'SUCCEEDED' WHERE execution_id = 'a'")
        conn.execute("UPDATE yoke_executions SET output = 'x' WHERE execution_id = 'a'")
        await asyncio.sleep(0.3)
        ended = time.time()
        conn.commit()
        rows = conn.execute("SELECT delta, at FROM chaos_slot_log ORDER BY at").fetchall()
    assert [d for d, _ in rows] == [1, -1]  # an update that is not an end logs nothing
    assert rows[0][1] >= committed - 0.05 and rows[1][1] >= ended - 0.05


async def test_a_grant_undone_in_its_own_transaction_is_not_logged(
    pg_databases: Callable[[], str],
) -> None:
    """A grant batch writes an execution and deletes it again when the locked ledger says it
    does not fit; the deferred trigger still fires for the deleted row. Logged, it counted as
    a slot held for ever: one overshoot per grant at the cap after it, and one stuck."""
    url = await migrated(pg_databases)
    with psycopg.connect(url) as conn:
        conn.execute(EXECUTION, ("undone", "s0", None))
        conn.execute(EXECUTION, ("kept", "s0", None))
        conn.execute("DELETE FROM yoke_executions WHERE execution_id = 'undone'")
        conn.commit()
        rows = conn.execute("SELECT execution_id, delta FROM chaos_slot_log").fetchall()
    assert rows == [("kept", 1)]


async def test_a_grant_committed_after_a_takeover_is_told_apart(
    pg_databases: Callable[[], str],
) -> None:
    url = await migrated(pg_databases)
    lease = (
        "INSERT INTO yoke_leases (name, holder, epoch, expires_at) VALUES ('admission', %s, %s, 0)"
    )
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(lease, ("s0", 1))
        conn.execute(EXECUTION, ("own-term", "s0", 1))
        conn.execute("UPDATE yoke_leases SET holder = NULL")  # s0 resigned
        conn.execute(EXECUTION, ("after-resign", "s0", 1))
        conn.execute("UPDATE yoke_leases SET holder = 's1', epoch = 2")  # s1 took over
        conn.execute(EXECUTION, ("stale", "s0", 1))
        conn.execute(EXECUTION, ("new-term", "s1", 2))
        row = conn.execute(GRANTS_BY_TERM.encode()).fetchone()
    assert row == (1, 1)  # one stale grant; one after the resign, before the takeover
