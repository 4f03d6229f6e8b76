"""What the database records of a chaos run, and reads of it afterwards.

Start and end of each execution's slot are recorded by the database itself: a deferred
constraint trigger, installed in the test database only, logs `clock_timestamp()` when a
transaction that creates a RUNNING execution, or moves one out of RUNNING, commits. It runs
while that transaction still holds the ledger rows it locked, so a grant that waited for a
finish is always logged after it (and a grant undone by its own transaction, which a deferred
trigger still fires for, is left out); yoke's own `created_at` / `finished_at` are taken before
the lock wait and can order two such transactions the wrong way. With `--ha` the trigger also
notes the admission lease's epoch when each grant committed, beside the epoch the grant was
made under (`leader_epoch`): a grant committed under an older epoch than the lease's is a grant
under a stale term, which the fence must make impossible (the fence holds its shared lock until
commit, so the takeover cannot commit between the trigger's read and the grant's commit). A
grant that commits after its leader resigned but before anyone took over (the lease held by
nobody, its epoch unchanged) is not one: the takeover waits for it, and the new leader's
recovery sees it.

`settle` waits until the store is quiet after a run; `history` reads what the checker
(tests/ha/checker.py) needs; `stuck_snapshot` names who holds and waits for which lock when a
failover is late.
"""

from __future__ import annotations

import asyncio
import time

import psycopg

from tests.ha.checker import History, SlotChange, StartRow
from tests.ha.load import Load

SLOT_LOG = """
CREATE TABLE IF NOT EXISTS chaos_slot_log (
    execution_id TEXT NOT NULL,
    delta INTEGER NOT NULL,
    at DOUBLE PRECISION NOT NULL,
    granted_by TEXT,
    grant_epoch BIGINT,
    lease_holder TEXT,
    lease_epoch BIGINT
);
CREATE OR REPLACE FUNCTION chaos_log_slot() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A deferred trigger fires for a row even when its own transaction deleted it again: a
    -- grant written and undone there (it did not fit once the ledger rows were locked) never
    -- held a slot, and is not logged.
    IF TG_OP = 'INSERT' AND NEW.status = 'RUNNING'
            AND EXISTS (SELECT 1 FROM yoke_executions WHERE execution_id = NEW.execution_id) THEN
        -- A fresh snapshot of the lease, taken at commit under the grant's fence.
        INSERT INTO chaos_slot_log
        SELECT NEW.execution_id, 1, extract(epoch FROM clock_timestamp()), NEW.instance_id,
            NEW.leader_epoch, l.holder, l.epoch
        FROM (SELECT 1) AS one LEFT JOIN yoke_leases l ON l.name = 'admission';
    ELSIF TG_OP = 'UPDATE' AND OLD.status = 'RUNNING' AND NEW.status <> 'RUNNING' THEN
        INSERT INTO chaos_slot_log (execution_id, delta, at) VALUES
            (NEW.execution_id, -1, extract(epoch FROM clock_timestamp()));
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS chaos_log_slot ON yoke_executions;
CREATE CONSTRAINT TRIGGER chaos_log_slot AFTER INSERT OR UPDATE ON yoke_executions
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION chaos_log_slot();
"""


# (grants committed under an older epoch than the lease's, grants committed while nobody
# held the lease)
GRANTS_BY_TERM = """
SELECT count(*) FILTER (WHERE lease_epoch <> grant_epoch),
    count(*) FILTER (WHERE lease_holder IS NULL)
FROM chaos_slot_log WHERE delta = 1
"""

# Who holds or waits for what: every session of the test database with its advisory locks
# and the locks it waits for.
STUCK_SNAPSHOT = """
SELECT a.pid, a.application_name, a.state, a.wait_event_type, a.wait_event,
    round(extract(epoch FROM clock_timestamp() - a.xact_start)::numeric, 1) AS xact_secs,
    l.locktype, l.mode, l.granted, l.classid, l.objid, left(a.query, 100) AS query
FROM pg_stat_activity a LEFT JOIN pg_locks l
    ON l.pid = a.pid AND (l.locktype = 'advisory' OR NOT l.granted)
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
ORDER BY a.application_name, a.pid
"""
LEASE_NOW = """
SELECT holder, epoch, round((expires_at - extract(epoch FROM clock_timestamp()))::numeric, 1)
FROM yoke_leases WHERE name = 'admission'
"""


async def settle(database_url: str, *, events: int, timeout: float) -> None:
    """Until no start is queued, no execution runs and every acknowledged event has been
    processed (`events` of them; or `timeout` seconds pass: the checker then counts what
    is missing)."""
    deadline = time.monotonic() + timeout
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            cur = await conn.execute(
                "SELECT (SELECT count(*) FROM yoke_starts WHERE status = 'QUEUED'),"
                " (SELECT count(*) FROM yoke_executions WHERE status = 'RUNNING'),"
                " (SELECT coalesce(sum((state::jsonb->>'count')::int), 0)"
                "  FROM actor_instances WHERE actor = 'counter')"
            )
            row = await cur.fetchone()
            assert row is not None
            queued, running, counted = row
            if queued == 0 and running == 0 and counted >= events:
                return
            await asyncio.sleep(0.2)


async def history(database_url: str, *, max_running: int, ha: bool, load: Load) -> History:
    """What the store holds after a run, beside what the clients saw (`load`)."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        slots = [
            SlotChange(e, d, at)
            for e, d, at in await (
                await conn.execute("SELECT execution_id, delta, at FROM chaos_slot_log")
            ).fetchall()
        ]
        stale: int | None = None
        unheld: int | None = None
        if ha:
            cur = await conn.execute(GRANTS_BY_TERM)
            row = await cur.fetchone()
            assert row is not None
            stale, unheld = int(row[0]), int(row[1])
        starts = {
            sid: StartRow(sid, status, eid)
            for sid, status, eid in await (
                await conn.execute("SELECT start_id, status, execution_id FROM yoke_starts")
            ).fetchall()
        }
        by_key: dict[str, list[str]] = {}
        # An automatic recovery (a resume start made by the recovery of a dead server, its
        # `recovery` past 0) goes on with the run it recovers: not a second run of the key.
        for eid, key in await (
            await conn.execute(
                "SELECT e.execution_id, e.input::jsonb->>'key' FROM yoke_executions e"
                " LEFT JOIN yoke_starts s ON s.start_id = e.start_id"
                " WHERE e.workflow = 'work' AND coalesce(s.recovery, 0) = 0"
            )
        ).fetchall():
            by_key.setdefault(key, []).append(eid)
        seen: dict[str, list[int]] = {}
        counts: dict[str, int] = {}
        for k, listed, count in await (
            await conn.execute(
                "SELECT instance_id, state::jsonb->'seen', state::jsonb->'count'"
                " FROM actor_instances WHERE actor = 'counter'"
            )
        ).fetchall():
            seen[k] = [int(n) for n in listed or []]
            counts[k] = int(count or 0)
        appended = {
            int(n): c
            for n, c in await (
                await conn.execute(
                    "SELECT data::jsonb->>'n', count(*) FROM stream_events"
                    " WHERE stream = 'counts' GROUP BY 1"
                )
            ).fetchall()
        }
    return History(
        max_running=max_running,
        slots=slots,
        starts=starts,
        executions_by_key=by_key,
        acks=list(load.acks),
        events=list(load.events),
        seen=seen,
        counts=counts,
        appended=appended,
        stale_epoch_commits=stale,  # not measurable between two active servers
        grants_unheld=unheld,
    )


async def stuck_snapshot(database_url: str) -> str:
    """The lease, and every session of the database with its advisory locks and the locks it
    waits for: one line each."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        rows = await (await conn.execute(STUCK_SNAPSHOT)).fetchall()
        lease = await (await conn.execute(LEASE_NOW)).fetchone()
    return f"lease {lease}\n" + "".join(" | ".join(str(v) for v in row) + "\n" for row in rows)
