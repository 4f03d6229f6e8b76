"""The SQLite backend: the embedded default (`sqlite:///./.yoke/yoke.db`).

Dialect facts (each has a test in tests/store/test_dialect_facts.py):
- journal_mode=WAL: readers do not block the writer nor the writer readers, also across
  processes sharing the file.
- synchronous=FULL (SQLite's default, kept): a committed grant survives a power cut.
- busy_timeout: a writer that finds the file locked by another connection waits up to
  `busy_timeout` seconds, then fails with `StoreUnavailable` (never a driver exception).
- Every write transaction is BEGIN IMMEDIATE: the database write lock is taken at BEGIN, so a
  grant's check-and-increment of the ledger cannot interleave with another writer (SQLite has no
  SELECT ... FOR UPDATE), and no transaction fails half-way on a read-to-write lock upgrade.
- UPSERT ... RETURNING needs SQLite >= 3.35; opening an older library fails clearly.
- Actor batches travel as one JSON parameter read with json_each (a batch never nears the
  bind limit); RETURNING may name only the modified table, so an actor claim marks its rows,
  then reads them with their events, inside the same IMMEDIATE transaction.
- Bind limit: SQLITE_MAX_VARIABLE_NUMBER (32,766 since 3.32); no yoke query binds more than 19.
- Group commit: the writes that arrive together share one BEGIN IMMEDIATE ... COMMIT, each in
  its own SAVEPOINT (a failed write rolls back only itself), so one fsync makes a whole batch
  durable; the COMMIT waits one turn of the event loop, so writes made in that turn join too.
  A write returns only after that COMMIT; a read first commits an open batch, so it never
  sees a write that could still be lost. A grant (or finish) batch sent while another
  one commits would join the open one or begin right after the COMMIT, but one batch at a time
  is the default (`batch_overlap = 1`): with 2, the admission benchmark measured no more starts
  per second and a higher p99 at half the saturated rate (49 against 29 ms, quiet machine);
  `YOKE_BATCH_OVERLAP=2` still allows it.
- One connection per store, used under an asyncio.Lock. COMMIT (which fsyncs) runs on the
  store's own thread, off the event loop; BEGIN IMMEDIATE is tried inline with no busy wait
  and, only if another connection holds the write lock, waited for on the thread; the
  statements inside a write run inline, since the batch holds the write lock and they never
  wait; reads run on the thread.

This module must never decide policy: it gives the verbs (`execverbs`, `actorverbs`) their
transactions, and exposes them as `executions` and `actors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar

from yoke.errors import (
    BadValue,
    Conflict,
    QuotaExceeded,
    StoreError,
    StoreUnavailable,
    YokeError,
)
from yoke.retry import Backoff, RetryPolicy
from yoke.store import sqlfiles
from yoke.store.actorverbs import ActorVerbs
from yoke.store.execverbs import ExecutionVerbs
from yoke.store.scheduleverbs import ScheduleVerbs
from yoke.store.tx import Row, Tx

T = TypeVar("T")

MIN_SQLITE = (3, 35, 0)
_MIGRATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS yoke_schema_migrations "
    "(version INTEGER PRIMARY KEY, name TEXT NOT NULL)"
)


def path_from_url(url: str) -> str:
    """`sqlite:///relative/path`, `sqlite:////absolute/path` or `sqlite:///:memory:`."""
    prefix = "sqlite:///"
    if not url.startswith(prefix):
        raise BadValue(f"not a SQLite URL (expected sqlite:///path): {url!r}")
    path = url[len(prefix) :]
    if not path:
        raise BadValue(f"SQLite URL without a path: {url!r}")
    return path


def translate(exc: sqlite3.Error) -> YokeError:
    """The one place where sqlite3 exceptions become `YokeError`s."""
    text = str(exc)
    if isinstance(exc, sqlite3.IntegrityError) and "yoke_tenant_quota" in text:
        return QuotaExceeded("a tenant's quota would be passed: nothing was written")
    if isinstance(exc, sqlite3.IntegrityError):
        return Conflict(f"constraint violated: {text}")
    if isinstance(exc, sqlite3.OperationalError) and any(
        s in text for s in ("locked", "busy", "unable to open", "disk I/O", "readonly")
    ):
        return StoreUnavailable(f"SQLite database unavailable: {text}")
    return StoreError(f"SQLite error: {text}")


def migrate(
    conn: sqlite3.Connection, *, fresh_install: bool = True, upto: int | None = None
) -> int:
    """Bring the schema up to date in one IMMEDIATE transaction; returns the version.

    An empty database gets `schema.sql` (unless `fresh_install` is False: then every migration
    runs in order, which is what the migrated-equals-fresh test compares)."""
    all_migrations = sqlfiles.migrations("sqlite")
    target = all_migrations if upto is None else all_migrations[:upto]
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(_MIGRATIONS_TABLE)
        applied = {int(v) for (v,) in conn.execute("SELECT version FROM yoke_schema_migrations")}
        empty = (
            not applied
            and not conn.execute(
                "SELECT 1 FROM sqlite_master WHERE name LIKE 'yoke\\_%' ESCAPE '\\' "
                "AND name <> 'yoke_schema_migrations'"
            ).fetchone()
        )
        if empty and fresh_install and upto is None:
            for stmt in sqlfiles.split_statements(sqlfiles.fresh_schema("sqlite")):
                conn.execute(stmt)
            applied_now = target
        else:
            applied_now = tuple(m for m in target if m.version not in applied)
            for m in applied_now:
                for stmt in sqlfiles.split_statements(m.sql):
                    conn.execute(stmt)
        conn.executemany(
            "INSERT INTO yoke_schema_migrations (version, name) VALUES (?, ?)",
            [(m.version, m.name) for m in applied_now],
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    row = conn.execute("SELECT max(version) FROM yoke_schema_migrations").fetchone()
    return int(row[0] or 0)


def connect(path: str, *, busy_timeout: float) -> sqlite3.Connection:
    if sqlite3.sqlite_version_info < MIN_SQLITE:
        raise StoreError(
            f"yoke needs SQLite >= 3.35 (UPSERT ... RETURNING); this Python has "
            f"{sqlite3.sqlite_version}"
        )
    if path != ":memory:":
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
    # isolation_level=None: we issue BEGIN/COMMIT ourselves (BEGIN IMMEDIATE for writes).
    conn = sqlite3.connect(
        path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
    )
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
    _enter_wal(conn, busy_timeout)
    conn.execute("PRAGMA synchronous = FULL")
    return conn


def _enter_wal(conn: sqlite3.Connection, busy_timeout: float) -> None:
    """Switch the file to WAL. Several processes opening a new file at once race to convert
    it, and SQLite answers the losers "database is locked" at once, without calling the busy
    handler; so the switch is retried here, within the same busy_timeout."""
    deadline = time.monotonic() + busy_timeout
    backoff = Backoff(_WAL_SWITCH)
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            pause = backoff.failed()
            if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)


# Processes that lost the same race come back apart (jitter), within milliseconds.
_WAL_SWITCH = RetryPolicy(first=0.001, most=0.05, jitter=0.5)


class _ReadTx:
    """A read: one statement in autocommit mode, run on the store's thread (a WAL reader can
    still meet a brief busy wait, which must not stall the event loop)."""

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store
        self._queries = sqlfiles.queries("sqlite")

    async def one(self, query: str, params: Mapping[str, Any]) -> Row | None:
        rows = await self._store._call(self._store._fetch, self._queries[query], params)
        return rows[0] if rows else None

    async def all(self, query: str, params: Mapping[str, Any]) -> list[Row]:
        return await self._store._call(self._store._fetch, self._queries[query], params)

    async def run(self, query: str, params: Mapping[str, Any]) -> int:
        return await self._store._call(self._store._execute, self._queries[query], params)

    async def many(
        self, query: str, items: Sequence[Mapping[str, Any]], **common: Any
    ) -> list[Row]:
        rows: list[Row] = []
        for item in items:
            rows.extend(await self.all(query, {**item, **common}))
        return rows

    async def insert(
        self, query: str, items: Sequence[Mapping[str, Any]], *, key: str
    ) -> dict[Any, int]:
        return await self._store._call(self._store._insert, self._queries[query], items, key)


class _WriteTx(_ReadTx):
    """The statements of a write, run inline on the event loop: the batch already holds the
    database write lock, so they never wait for another connection, and they take
    microseconds; only BEGIN and COMMIT (which can wait or fsync) go to the thread."""

    async def one(self, query: str, params: Mapping[str, Any]) -> Row | None:
        rows = self._store._inline(self._store._fetch, self._queries[query], params)
        return rows[0] if rows else None

    async def all(self, query: str, params: Mapping[str, Any]) -> list[Row]:
        return self._store._inline(self._store._fetch, self._queries[query], params)

    async def run(self, query: str, params: Mapping[str, Any]) -> int:
        return self._store._inline(self._store._execute, self._queries[query], params)

    async def many(
        self, query: str, items: Sequence[Mapping[str, Any]], **common: Any
    ) -> list[Row]:
        # A statement per row, inline: cheaper here than SQLite parsing one JSON batch.
        sql, fetch = self._queries[query], self._store._fetch
        rows: list[Row] = []
        for item in items:
            rows.extend(self._store._inline(fetch, sql, {**item, **common}))
        return rows

    async def insert(
        self, query: str, items: Sequence[Mapping[str, Any]], *, key: str
    ) -> dict[Any, int]:
        return self._store._inline(self._store._insert, self._queries[query], items, key)


class _Batch:
    """One BEGIN IMMEDIATE ... COMMIT that the writes arriving together share (group commit):
    each write is a savepoint inside it, and one COMMIT, one fsync, makes them all durable.
    A write returns only once `committed` is done, so no caller ever sees a result that a
    failed COMMIT could take back."""

    def __init__(self) -> None:
        self.committed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.commit_scheduled = False
        self.writes = 0


class SQLiteStore:
    """The SQLite backend: its transactions (`tx.Transactions`), and the verbs over them."""

    dialect = "sqlite"
    one_statement_batches = False  # a SQLite statement writes one table only
    batch_overlap = 1  # two measured no faster and slower at the tail (module docstring)

    def __init__(self, url_or_path: str, *, busy_timeout: float = 5.0) -> None:
        self.path = path_from_url(url_or_path) if url_or_path.startswith("sqlite:") else url_or_path
        self.busy_timeout = busy_timeout
        self._conn: sqlite3.Connection | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._lock = asyncio.Lock()
        self._batch: _Batch | None = None
        self._committers: set[asyncio.Task[None]] = set()
        self._version = 0
        self.executions = ExecutionVerbs(self)
        self.actors = ActorVerbs(self)
        self.schedules = ScheduleVerbs(self)

    def __repr__(self) -> str:
        return f"SQLiteStore(path={self.path!r}, open={self._conn is not None})"

    async def open(self) -> None:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="yoke-sqlite")
        self._conn = await self._call(connect, self.path, busy_timeout=self.busy_timeout)
        conn = self._conn
        self._version = await self._call(migrate, conn)

    async def close(self) -> None:
        if self._batch is not None and self._conn is not None:
            async with self._lock:
                if self._batch is not None:
                    await self._commit(self._batch)
        conn, self._conn = self._conn, None
        executor, self._executor = self._executor, None
        if executor is None:
            return
        if conn is not None:
            await asyncio.get_running_loop().run_in_executor(executor, conn.close)
        executor.shutdown(wait=True)

    async def schema_version(self) -> int:
        return self._version

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        fut = self._on_thread(fn, *args, **kwargs)
        if await _wait_out(fut):
            if not fut.cancelled():
                fut.exception()  # retrieved: the caller is gone, nobody else would
            raise asyncio.CancelledError
        return _outcome(fut)

    def _on_thread(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> asyncio.Future[T]:
        if self._executor is None:
            raise StoreUnavailable("the SQLite store is not open")
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreUnavailable("the SQLite store is not open")
        return self._conn

    def _fetch(self, sql: str, params: Mapping[str, Any]) -> list[Row]:
        return list(self._db().execute(sql, params).fetchall())

    def _execute(self, sql: str, params: Mapping[str, Any]) -> int:
        return self._db().execute(sql, params).rowcount

    def _insert(self, sql: str, items: Sequence[Mapping[str, Any]], key: str) -> dict[Any, int]:
        db, seqs = self._db(), {}
        for item in items:
            cur = db.execute(sql, item)
            if cur.rowcount > 0 and cur.lastrowid is not None:
                seqs[item[key]] = cur.lastrowid
        return seqs

    def _exec_plain(self, sql: str) -> None:
        self._db().execute(sql)

    def _begin_now(self) -> bool:
        """BEGIN IMMEDIATE without waiting: True if begun; False if another connection holds
        the write lock (then the caller waits for it on the thread, under the busy timeout).
        Uncontended it takes microseconds, where a trip to the thread and back costs two
        wake-ups, each a scheduling delay on a busy machine."""
        db = self._db()
        db.execute("PRAGMA busy_timeout = 0")
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                return False
            raise
        finally:
            db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        return True

    def _rollback(self) -> None:
        # Some errors (SQLITE_FULL, SQLITE_IOERR...) already rolled the transaction back.
        if self._db().in_transaction:
            self._db().execute("ROLLBACK")

    def _inline(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except sqlite3.Error as exc:
            raise translate(exc) from exc
        except (OverflowError, ValueError) as exc:  # a value SQLite cannot bind
            raise BadValue(f"SQLite cannot store a value: {exc}") from exc

    # -- tx.Transactions ---------------------------------------------------------------------
    def read(self) -> AbstractAsyncContextManager[Tx]:
        return self._tx(write=False)

    def write(self) -> AbstractAsyncContextManager[Tx]:
        return self._tx(write=True)

    def single(self) -> AbstractAsyncContextManager[Tx]:
        # A one-statement write joins the open batch too: autocommit would cost it an fsync.
        return self._tx(write=True)

    def fenced(self) -> AbstractAsyncContextManager[Tx]:
        return self._tx(write=True)

    def array(self, values: list[str]) -> Any:
        return json.dumps(values)

    async def notify_slot_freed(self, tx: Tx) -> None:
        """No NOTIFY: processes sharing the file find freed slots by their backup poll."""

    async def listen_slot_freed(self, on_freed: Callable[[], None]) -> None:
        return None

    async def listen_requests(self, on_request: Callable[[str], None]) -> None:
        return None  # the owners of executions poll for their requests

    async def listen_timers(self, on_change: Callable[[], None]) -> None:
        return None  # a timer scheduled here wakes the loop in-process; a peer's, the poll

    async def listen_actor_wakeups(
        self,
        on_queue: Callable[[], None],
        on_schedule: Callable[[], None],
        on_tenants: Callable[[], None],
    ) -> None:
        return None

    async def listen_leases(self, on_released: Callable[[], None]) -> None:
        return None

    async def listen_tenant_settings(self, on_changed: Callable[[], None]) -> None:
        return None  # no NOTIFY: a change made here is read at once, a peer's by the poll

    async def listen_schedules(self, on_changed: Callable[[], None]) -> None:
        return None  # no NOTIFY: a change made here wakes the ticker at once, a peer's the poll

    def liveness(self, holder: str) -> None:
        return None  # no sessions to outlive: one machine's file

    @asynccontextmanager
    async def _tx(self, *, write: bool) -> AsyncIterator[_ReadTx]:
        if not write:
            async with self._lock:
                if self._batch is not None:  # a read sees committed writes only
                    await self._commit(self._batch)
                yield _ReadTx(self)
            return
        async with self._lock:
            batch = self._batch
            if batch is None:
                if not self._inline(self._begin_now):
                    try:
                        await self._call(self._exec_plain, "BEGIN IMMEDIATE")
                    except asyncio.CancelledError:
                        self._inline(self._rollback)  # BEGIN may have finished on the thread
                        raise
                batch = self._batch = _Batch()
            self._inline(self._exec_plain, "SAVEPOINT yoke_write")
            batch.writes += 1
            try:
                yield _WriteTx(self)
            except BaseException:
                self._undo_write(batch)
                raise
            else:
                self._inline(self._exec_plain, "RELEASE yoke_write")
            finally:
                self._commit_soon(batch)
        # Outside the lock: the writes queued behind this one join the batch meanwhile.
        await asyncio.shield(batch.committed)

    def _undo_write(self, batch: _Batch) -> None:
        """Roll back one write's savepoint; if SQLite already rolled back the whole
        transaction (SQLITE_FULL, SQLITE_IOERR...), the batch fails as a whole."""
        if self._db().in_transaction:
            self._inline(self._exec_plain, "ROLLBACK TO yoke_write")
            self._inline(self._exec_plain, "RELEASE yoke_write")
            return
        self._batch = None
        _fail(batch, StoreError("SQLite rolled back the transaction after an error"))

    def _commit_soon(self, batch: _Batch) -> None:
        """Commit once the writers now waiting for the lock, or due to run in this turn of the
        loop, have joined (the lock is FIFO, so the committer, queued behind them, commits all
        of them at once)."""
        if batch.commit_scheduled or batch.committed.done():
            return
        batch.commit_scheduled = True
        task = asyncio.get_running_loop().create_task(self._commit_when_free(batch))
        self._committers.add(task)
        task.add_done_callback(self._committers.discard)

    async def _commit_when_free(self, batch: _Batch) -> None:
        # One turn of the loop first: the writes that what is already due to run will make
        # join this batch too (a grant batch goes first and launches executions; their
        # finishes, made in that turn, share its COMMIT instead of needing a second fsync).
        await asyncio.sleep(0)
        async with self._lock:
            if self._batch is batch:
                await self._commit(batch)

    async def _commit(self, batch: _Batch) -> None:
        """COMMIT the batch and tell its writers how it went: from the COMMIT's own outcome,
        waited out even through a cancel (SQLite rolls back by itself on some failures, so the
        connection's state alone cannot tell)."""
        self._batch = None
        fut = self._on_thread(self._exec_plain, "COMMIT")
        cancelled = await _wait_out(fut)
        try:
            _outcome(fut)
        except YokeError as exc:
            with contextlib.suppress(YokeError):
                self._inline(self._rollback)  # no fsync: quick enough inline
            _fail(batch, exc)
        else:
            batch.committed.set_result(None)
        if cancelled:
            raise asyncio.CancelledError


async def _wait_out(fut: asyncio.Future[Any]) -> bool:
    """Wait until `fut` (work on the store's thread) is done, through any number of cancels:
    the connection stays ours until the thread is done with it. True if a cancel came."""
    cancelled = False
    while not fut.done():
        try:
            await asyncio.wait([fut])
        except asyncio.CancelledError:
            cancelled = True
    return cancelled


def _outcome(fut: asyncio.Future[T]) -> T:
    try:
        return fut.result()
    except sqlite3.Error as exc:
        raise translate(exc) from exc
    except OSError as exc:  # creating the database's directory
        raise StoreUnavailable(f"SQLite database unavailable: {exc}") from exc
    except (OverflowError, ValueError) as exc:  # a value SQLite cannot bind
        raise BadValue(f"SQLite cannot store a value: {exc}") from exc


def _fail(batch: _Batch, exc: BaseException) -> None:
    if not batch.committed.done():
        batch.committed.set_exception(exc)
        batch.committed.exception()  # retrieved here: a batch of cancelled writers logs nothing
