"""One test per "dialect fact" stated at the top of yoke/store/sqlite.py and postgres.py."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import _truncate
from tests.store.test_conformance import new_execution, new_start
from yoke.errors import StoreError, StoreUnavailable
from yoke.store import (
    ExecutionStatus,
    Finish,
    GrantOutcome,
    GrantRequest,
    Slot,
    StartStatus,
    postgres,
    sqlfiles,
)
from yoke.store.postgres import PostgresStore, translate
from yoke.store.rows import new_start_params
from yoke.store.sqlite import SQLiteStore


@pytest.fixture
async def lite(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    s = SQLiteStore(f"sqlite:///{tmp_path}/f.db", busy_timeout=0.3)
    await s.open()
    yield s
    await s.close()


async def test_sqlite_uses_wal_and_full_sync(lite: SQLiteStore) -> None:
    other = sqlite3.connect(lite.path)
    assert other.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    sync = await lite._call(lambda: lite._db().execute("PRAGMA synchronous").fetchone()[0])
    assert sync == 2  # FULL


OPEN_AND_MIGRATE = """
import sys
from yoke.store.sqlite import connect, migrate
print("ready", flush=True)
sys.stdin.readline()  # all at once: each waits for the word to go
conn = connect(sys.argv[1], busy_timeout=5.0)
migrate(conn)
print(conn.execute("PRAGMA journal_mode").fetchone()[0])
"""


def test_sqlite_processes_opening_a_new_file_at_once_all_open_it(tmp_path: Path) -> None:
    # The switch to WAL answers "locked" at once, without the busy handler, to every process
    # but the one converting a new file; before the retry about 1 open in 36 failed here.
    # Plain subprocesses (no multiprocessing: its resource tracker would outlive the test).
    import subprocess
    import sys

    for n in range(12):
        path = str(tmp_path / f"new{n}.db")
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", OPEN_AND_MIGRATE, path],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(6)
        ]
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        answers = [p.communicate(timeout=60) for p in procs]
        assert [out.strip() for out, _ in answers] == ["wal"] * 6, [e for _, e in answers]


async def test_sqlite_busy_timeout_then_store_unavailable(lite: SQLiteStore) -> None:
    other = sqlite3.connect(lite.path, isolation_level=None, timeout=0)
    other.execute("BEGIN IMMEDIATE")
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailable, match="locked"):
        await lite.executions.log_start(new_start())
    assert time.monotonic() - t0 >= 0.25  # it waited for the busy timeout first
    other.execute("ROLLBACK")
    _, created = await lite.executions.log_start(new_start())
    assert created


async def test_sqlite_begins_on_the_loop_unless_another_writer_holds_the_lock(
    lite: SQLiteStore,
) -> None:
    begun_on: list[str] = []
    lite._db().set_trace_callback(
        lambda sql: (
            begun_on.append(threading.current_thread().name) if sql.startswith("BEGIN") else None
        )
    )
    loop_thread = threading.current_thread().name
    await lite.executions.log_start(new_start())
    assert begun_on == [loop_thread]  # uncontended: no trip to the store's thread
    begun_on.clear()
    other = sqlite3.connect(lite.path, isolation_level=None, timeout=0)
    other.execute("BEGIN IMMEDIATE")
    asyncio.get_running_loop().call_later(0.1, other.execute, "ROLLBACK")
    _, created = await lite.executions.log_start(new_start())  # waits for it, on the thread
    assert created
    assert begun_on[0] == loop_thread and begun_on[-1].startswith("yoke-sqlite"), begun_on


async def test_sqlite_sends_one_batch_at_a_time_by_default(lite: SQLiteStore) -> None:
    assert lite.executions.batch_overlap == 1


async def test_sqlite_write_transactions_take_the_write_lock_at_begin(lite: SQLiteStore) -> None:
    other = sqlite3.connect(lite.path, isolation_level=None, timeout=0)
    async with lite.write() as tx:
        await tx.one("get_start", {"start_id": "x"})  # a read, as a grant's first statement
        # Nothing written yet, but the lock is held: another writer cannot begin.
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("BEGIN IMMEDIATE")
    other.execute("BEGIN IMMEDIATE")
    other.execute("ROLLBACK")


def _count_commits(store: SQLiteStore) -> list[str]:
    seen: list[str] = []
    store._db().set_trace_callback(
        lambda sql: seen.append(sql) if sql.strip().upper() == "COMMIT" else None
    )
    return seen


async def test_sqlite_writes_arriving_together_share_one_commit(lite: SQLiteStore) -> None:
    commits = _count_commits(lite)
    results = await asyncio.gather(*(lite.executions.log_start(new_start()) for _ in range(50)))
    assert all(created for _, created in results)
    # Every write returned after its COMMIT, and far fewer COMMITs than writes ran.
    other = sqlite3.connect(lite.path)
    assert other.execute("SELECT count(*) FROM yoke_starts").fetchone() == (50,)
    assert 1 <= len(commits) <= 5, commits


async def test_sqlite_a_write_due_in_the_same_turn_of_the_loop_shares_the_commit(
    lite: SQLiteStore,
) -> None:
    commits = _count_commits(lite)

    async def a_turn_later() -> None:
        await asyncio.sleep(0)  # begins after the first write has asked for its COMMIT
        await lite.executions.log_start(new_start())

    await asyncio.gather(lite.executions.log_start(new_start()), a_turn_later())
    assert len(commits) == 1, commits


async def test_sqlite_a_failed_write_rolls_back_only_itself(lite: SQLiteStore) -> None:
    ids = [new_start() for _ in range(3)]

    async def write(i: int) -> None:
        async with lite.write() as tx:  # gathered: the 2nd and 3rd queue behind the 1st
            await tx.one("insert_start", new_start_params(ids[i]))
            if i == 1:
                raise RuntimeError("this write fails after its statement ran")

    commits = _count_commits(lite)
    outcomes = await asyncio.gather(*(write(i) for i in range(3)), return_exceptions=True)
    assert isinstance(outcomes[1], RuntimeError) and outcomes[0] is None and outcomes[2] is None
    assert len(commits) == 1  # one batch: the failure did not end it
    assert await lite.executions.get_start(ids[0].start_id) is not None
    assert await lite.executions.get_start(ids[1].start_id) is None
    assert await lite.executions.get_start(ids[2].start_id) is not None


async def test_sqlite_a_read_sees_only_committed_writes(lite: SQLiteStore) -> None:
    st = new_start()
    other = sqlite3.connect(lite.path, isolation_level=None)
    written = asyncio.Event()

    async def writer() -> None:
        async with lite.write() as tx:
            await tx.one("insert_start", new_start_params(st))
            written.set()

    async def reader() -> None:
        await written.wait()
        # The batch is still open (the writer waits for its commit); the read commits it
        # first, so what it reads, every other connection can read too.
        assert await lite.executions.get_start(st.start_id) is not None
        assert other.execute(
            "SELECT count(*) FROM yoke_starts WHERE start_id = ?", (st.start_id,)
        ).fetchone() == (1,)

    await asyncio.gather(writer(), reader())


async def test_sqlite_a_cancelled_writer_leaves_the_batch_whole(lite: SQLiteStore) -> None:
    first, second = new_start(), new_start()
    task = asyncio.ensure_future(lite.executions.log_start(first))
    other = asyncio.ensure_future(lite.executions.log_start(second))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, other, return_exceptions=True)
    assert (await other)[1] is True
    # Whether the cancelled write got in before it was cancelled or not, the store works on.
    _, created = await lite.executions.log_start(new_start())
    assert created
    assert not lite._db().in_transaction


class _DiskFailsAtCommit(SQLiteStore):
    """A real SQLite store whose COMMIT fails the way SQLITE_IOERR does: the transaction is
    rolled back by SQLite itself, then the error is raised."""

    fail_commit = False

    def _exec_plain(self, sql: str) -> None:
        if sql == "COMMIT" and self.fail_commit:
            time.sleep(0.1)
            self._db().execute("ROLLBACK")
            raise sqlite3.OperationalError("disk I/O error")
        super()._exec_plain(sql)


async def test_sqlite_a_failed_commit_fails_its_writers_even_if_its_committer_is_cancelled(
    tmp_path: Path,
) -> None:
    store = _DiskFailsAtCommit(f"sqlite:///{tmp_path}/f.db")
    await store.open()
    try:
        store.fail_commit = True
        writer = asyncio.create_task(store.executions.register_instance("i-1", now=1.0))
        reader = asyncio.create_task(
            store.executions.get_start("x")
        )  # a read commits the open batch
        await asyncio.sleep(0.03)  # the reader's COMMIT is on the thread now
        reader.cancel()
        with pytest.raises(StoreUnavailable, match="disk I/O"):
            await writer
        with pytest.raises(asyncio.CancelledError):
            await reader
        store.fail_commit = False
        other = sqlite3.connect(store.path)
        assert other.execute("SELECT count(*) FROM yoke_instances").fetchone() == (0,)
        await store.executions.register_instance("i-2", now=2.0)  # and the store works on
        assert other.execute("SELECT count(*) FROM yoke_instances").fetchone() == (1,)
    finally:
        await store.close()


@pytest.mark.postgres
async def test_postgres_batches_taking_the_same_keys_in_opposite_orders_do_not_deadlock(
    pg: PostgresStore, pg_url: str
) -> None:
    other = PostgresStore(pg_url)
    await other.open()
    try:
        for round_ in range(5):
            keys = [f"k{round_}-{i}" for i in range(200)]
            a = [new_start(idempotency_key=k) for k in keys]
            b = [new_start(idempotency_key=k) for k in reversed(keys)]
            got_a, got_b = await asyncio.gather(
                pg.executions.log_starts(a), other.executions.log_starts(b)
            )
            assert sum(c for _, c in got_a) + sum(c for _, c in got_b) == len(keys)
    finally:
        await other.close()


def test_sqlite_library_supports_upsert_returning() -> None:
    assert sqlite3.sqlite_version_info >= (3, 35, 0)


async def test_sqlite_calls_run_on_one_dedicated_thread(lite: SQLiteStore) -> None:
    names = {await lite._call(lambda: threading.current_thread().name) for _ in range(5)}
    assert len(names) == 1
    (name,) = names
    assert name.startswith("yoke-sqlite") and name != threading.main_thread().name


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_no_query_binds_more_than_19_parameters(dialect: str) -> None:
    pattern = r":(\w+)" if dialect == "sqlite" else r"%\((\w+)\)[sb]"
    for name, sql in sqlfiles.queries(dialect).items():
        assert len(set(re.findall(pattern, sql))) <= 19, name


@pytest.fixture
async def pg(pg_url: str) -> AsyncIterator[PostgresStore]:
    _truncate(pg_url)
    s = PostgresStore(pg_url)
    await s.open()
    yield s
    await s.close()


@pytest.mark.postgres
async def test_postgres_sends_one_batch_at_a_time(pg: PostgresStore) -> None:
    assert pg.executions.batch_overlap == 1


@pytest.mark.postgres
async def test_postgres_runs_read_committed(pg: PostgresStore) -> None:
    assert pg._pool is not None
    async with pg._pool.connection() as conn, conn.transaction():
        cur = await conn.execute("SHOW transaction_isolation")
        assert await cur.fetchone() == ("read committed",)


@pytest.mark.postgres
async def test_postgres_grant_waits_for_the_locked_ledger_row(
    pg: PostgresStore, pg_url: str
) -> None:
    row, _ = await pg.executions.log_start(new_start())
    await pg.executions.log_start(new_start())  # makes sure the tables are in use
    with psycopg.connect(pg_url) as holder:
        holder.execute("INSERT INTO yoke_ledger (key, running) VALUES ('global', 0)")
        holder.commit()
        holder.execute("SELECT * FROM yoke_ledger WHERE key = 'global' FOR UPDATE")
        task = asyncio.create_task(
            pg.executions.grant_start(
                row.start_id,
                execution=new_execution(row.start_id),
                copy_steps=None,
                now=1,
                slots=[Slot(key="global", cap=1)],
            )
        )
        with psycopg.connect(pg_url, autocommit=True) as watcher:
            for _ in range(500):
                n = watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock'"
                ).fetchone()
                if n and n[0] >= 1:
                    break
                await asyncio.sleep(0.01)
            else:
                pytest.fail("the grant never waited for the ledger row lock")
        assert not task.done()
        holder.rollback()
    res = await asyncio.wait_for(task, 10)
    assert res.outcome is GrantOutcome.GRANTED


async def _wait_for_a_lock_wait(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as watcher:
        for _ in range(500):
            n = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock'"
            ).fetchone()
            if n and n[0] >= 1:
                return
            await asyncio.sleep(0.01)
    pytest.fail("nothing ever waited for the ledger row lock")


@pytest.mark.postgres
async def test_postgres_a_batch_decides_on_the_locked_count_not_the_peek(
    pg: PostgresStore, pg_url: str
) -> None:
    rows = [(await pg.executions.log_start(new_start()))[0] for _ in range(2)]
    with psycopg.connect(pg_url) as holder:
        holder.execute("INSERT INTO yoke_ledger (key, running) VALUES ('global', 0)")
        holder.commit()
        holder.execute("SELECT * FROM yoke_ledger WHERE key = 'global' FOR UPDATE")
        batch = [
            GrantRequest(
                start_id=r.start_id,
                execution=new_execution(r.start_id),
                slots=(Slot(key="global", cap=1),),
            )
            for r in rows
        ]
        task = asyncio.create_task(pg.executions.grant_starts(batch, now=1))
        await _wait_for_a_lock_wait(pg_url)  # it peeked 0 free of 1, and marked both
        holder.execute("UPDATE yoke_ledger SET running = 1 WHERE key = 'global'")
        holder.commit()  # another process took the slot meanwhile
    res = await asyncio.wait_for(task, 10)
    assert [r.outcome for r in res] == [GrantOutcome.FULL, GrantOutcome.FULL]
    assert await pg.executions.ledger() == {"global": 1}
    assert await pg.executions.list_executions() == []
    for r in rows:
        after = await pg.executions.get_start(r.start_id)
        assert after is not None and after.status is StartStatus.QUEUED
        assert after.execution_id is None and after.decided_at is None


@pytest.mark.postgres
async def test_postgres_notifies_a_freed_slot(pg: PostgresStore) -> None:
    calls = asyncio.Queue[None]()
    listener = asyncio.create_task(pg.listen_slot_freed(lambda: calls.put_nowait(None)))
    await asyncio.wait_for(calls.get(), 10)  # called once LISTEN is in place
    row, _ = await pg.executions.log_start(new_start())
    res = await pg.executions.grant_start(
        row.start_id,
        execution=new_execution(row.start_id),
        slots=[Slot(key="global", cap=None)],
        copy_steps=None,
        now=1,
    )
    assert res.execution is not None
    assert calls.empty()
    await pg.executions.finish_execution(
        res.execution.execution_id, ExecutionStatus.SUCCEEDED, output="1", error=None, now=2
    )
    await asyncio.wait_for(calls.get(), 10)
    listener.cancel()
    with pytest.raises(asyncio.CancelledError):
        await listener


@pytest.mark.postgres
async def test_postgres_processes_booting_together_migrate_once(
    pg_databases: Callable[[], str],
) -> None:
    url = pg_databases()
    stores = [PostgresStore(url) for _ in range(3)]
    await asyncio.gather(*(s.open() for s in stores))
    assert {await s.schema_version() for s in stores} == {sqlfiles.latest("postgres")}
    with psycopg.connect(url) as conn:
        n = conn.execute("SELECT count(*) FROM yoke_schema_migrations").fetchone()
    assert n == (len(sqlfiles.migrations("postgres")),)
    for s in stores:
        await s.close()


@pytest.mark.postgres
async def test_postgres_a_cancel_while_waiting_for_a_connection_is_never_lost(
    pg_url: str,
) -> None:
    # On Python 3.11 the pool waits with `asyncio.wait_for`, which returns the connection and
    # drops the cancel when both land in the same turn of the loop; a service cancelled then
    # would run on and its TaskGroup would wait for it forever. Land them together, many ways.
    s = PostgresStore(pg_url, min_size=1, max_size=1)
    await s.open()
    ran_on = 0
    try:
        for turns in range(8):
            for _ in range(4):
                holding = s._tx(write=False)
                await holding.__aenter__()

                async def waiter() -> None:
                    async with s._tx(write=False):
                        await asyncio.sleep(0.2)  # a cancel delivered ends it here

                task = asyncio.create_task(waiter())
                await asyncio.sleep(0.01)  # it waits for the pool's only connection
                await holding.__aexit__(None, None, None)
                for _ in range(turns):
                    await asyncio.sleep(0)
                task.cancel()
                try:
                    await asyncio.wait_for(task, 5)
                    ran_on += 1
                except asyncio.CancelledError:
                    pass
    finally:
        await s.close()
    assert ran_on == 0


@pytest.mark.postgres
async def test_postgres_a_finish_batch_locks_its_executions_in_id_order(
    pg: PostgresStore, pg_url: str
) -> None:
    # recover_dead locks a dead instance's executions in id order; a zombie finishing a batch
    # of them in another order could deadlock with it. Hold the first id: the batch must wait
    # for it before it takes the second.
    ids: list[str] = []
    for _ in range(2):
        row, _ = await pg.executions.log_start(new_start())
        res = await pg.executions.grant_start(
            row.start_id,
            execution=new_execution(row.start_id),
            slots=[Slot(key="global", cap=None)],
            copy_steps=None,
            now=1,
        )
        assert res.execution is not None
        ids.append(res.execution.execution_id)
    first, second = sorted(ids)
    done = ExecutionStatus.SUCCEEDED
    with psycopg.connect(pg_url) as holder, psycopg.connect(pg_url) as probe:
        holder.execute("SELECT 1 FROM yoke_executions WHERE execution_id = %s FOR UPDATE", [first])
        batch = [
            Finish(execution_id=i, status=done, output=None, error=None) for i in (second, first)
        ]
        finishing = asyncio.create_task(pg.executions.finish_executions(batch, now=2))
        await asyncio.sleep(0.3)  # the batch is now waiting for `first`
        assert not finishing.done()
        # `second` is still free: the batch did not lock it before `first`.
        probe.execute(
            "SELECT 1 FROM yoke_executions WHERE execution_id = %s FOR UPDATE NOWAIT", [second]
        )
        probe.rollback()
        holder.rollback()
        assert await asyncio.wait_for(finishing, 10) == [True, True]
    assert await pg.executions.ledger() == {}  # both slots given back (a zero row is not listed)


@pytest.mark.postgres
async def test_postgres_a_key_given_back_after_the_insert_skipped_it_is_taken_again(
    pg: PostgresStore, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # READ COMMITTED: between the INSERT that found the key taken and the look-up of its holder,
    # the holder can be refused with `forget_key` (another process, a limit). The start then
    # gets the key; the batch's other starts are not failed with it.
    holder, _ = await pg.executions.log_start(new_start(idempotency_key="K"))
    queued, _ = await pg.executions.log_start(new_start())
    other = PostgresStore(pg_url)
    await other.open()
    real_one = postgres._Tx.one

    async def one(self: Any, query: str, params: Any) -> Any:
        if query == "get_start_by_key":
            await other.executions.decide_start(
                holder.start_id, StartStatus.REFUSED, reason="limit", now=2, forget_key=True
            )
        return await real_one(self, query, params)

    monkeypatch.setattr(postgres._Tx, "one", one)
    retry = new_start(idempotency_key="K")
    try:
        res = await pg.executions.grant_starts(
            [
                GrantRequest(
                    start_id=queued.start_id,
                    execution=new_execution(queued.start_id),
                    slots=(Slot(key="global", cap=None),),
                ),
                GrantRequest(
                    start_id=retry.start_id,
                    execution=new_execution(retry.start_id),
                    slots=(Slot(key="global", cap=None),),
                    log=retry,
                ),
            ],
            now=3,
        )
    finally:
        await other.close()
    assert [r.outcome for r in res] == [GrantOutcome.GRANTED, GrantOutcome.GRANTED]
    assert res[1].start is not None and res[1].start.idempotency_key == "K"


def test_postgres_values_past_a_limit_are_a_store_error_not_an_outage(pg_url: str) -> None:
    """PostgreSQL's "program limit exceeded" (here: an index row too large) comes back the
    same on every retry: it must not read as `StoreUnavailable`, which callers retry."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE wide (v TEXT PRIMARY KEY)")
        # random text does not compress below the btree's ~2.7 kB limit
        with pytest.raises(psycopg.errors.ProgramLimitExceeded) as caught:
            conn.execute(
                "INSERT INTO wide SELECT string_agg(md5(g::text), '') "
                "FROM generate_series(1, 300) AS g"
            )
    err = translate(caught.value)
    assert isinstance(err, StoreError) and not isinstance(err, StoreUnavailable)


@pytest.mark.postgres
async def test_postgres_a_grant_batch_and_a_finish_batch_are_one_statement_each(
    pg: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Starts that fit at once (no cap) are logged, granted and counted by one statement, and
    # their finishes release the ledger and notify by one more: no BEGIN or COMMIT round trips.
    sent: list[str] = []
    real_execute = psycopg.AsyncCursor.execute
    real_tx = psycopg.AsyncConnection.transaction

    async def execute(cur: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        sent.append("ledger" if "yoke_ledger" in str(query) else "other")
        return await real_execute(cur, query, params, **kw)

    def transaction(conn: Any, *args: Any, **kw: Any) -> Any:
        sent.append("BEGIN")
        return real_tx(conn, *args, **kw)

    requests = []
    for _ in range(10):
        new = new_start(created_at=1.0)
        requests.append(
            GrantRequest(
                start_id=new.start_id,
                execution=new_execution(new.start_id),
                slots=(Slot(key="global", cap=None), Slot(key="session:s1", cap=None)),
                log=new,
            )
        )
    monkeypatch.setattr(psycopg.AsyncCursor, "execute", execute)
    monkeypatch.setattr(psycopg.AsyncConnection, "transaction", transaction)
    results = await pg.executions.grant_starts(requests, now=2.0)
    assert [r.outcome for r in results] == [GrantOutcome.GRANTED] * 10
    assert sent == ["ledger"]  # one statement, which also counts the ledger
    monkeypatch.undo()
    assert await pg.executions.ledger() == {"global": 10, "session:s1": 10}
    monkeypatch.setattr(psycopg.AsyncCursor, "execute", execute)
    monkeypatch.setattr(psycopg.AsyncConnection, "transaction", transaction)
    sent.clear()
    done = [
        Finish(
            execution_id=r.execution.execution_id,
            status=ExecutionStatus.SUCCEEDED,
            output=None,
            error=None,
        )
        for r in results
        if r.execution is not None
    ]
    assert await pg.executions.finish_executions(done, now=3.0) == [True] * 10
    assert sent == ["ledger"]
    monkeypatch.undo()
    assert await pg.executions.ledger() == {}  # every slot freed


def test_every_postgres_query_is_converted_once_by_psycopg() -> None:
    """psycopg keeps a statement's conversion (`%(name)s` to `$n`) only for statements up to
    4,096 characters; a longer one is parsed again at every execution, which cost the
    one-statement hand-over 7% of the process's CPU under a cap (py-spy)."""
    from psycopg import _queries

    limit = _queries.MAX_CACHED_STATEMENT_LENGTH
    assert limit == 4096  # if psycopg moves it, read this test again
    for name, sql in sqlfiles.queries("postgres").items():
        assert len(sql) <= limit, name
