"""The PostgreSQL backend: what several processes, machines or an HA pair share.

Dialect facts (each has a test in tests/store/test_dialect_facts.py):
- Isolation is READ COMMITTED (PostgreSQL's default, never raised): exactness comes from row
  locks, not from snapshots, so no transaction is ever retried for a serialization failure.
- A batch of grants first inserts the starts that come with their log (taking their
  idempotency keys in sorted order, as a batch of logs does; GRANTED already when the peek says
  they fit), then locks its other start rows (the UPDATE that marks them GRANTED), writes the
  executions, and last takes each ledger row once, by the batch's count, in sorted key order
  (INSERT ... ON CONFLICT DO UPDATE locks the row it increments), so the hot ledger rows stay
  locked for a few statements and the commit.
  Finishes release the same rows once per batch in the same order, after locking their
  execution rows in id order, the order in which `recover_dead` locks a dead instance's:
  writers can wait for each other but never deadlock.
  A grant decides on the counts it got under the lock (a lock-free peek only skips hopeless
  ones early); over a cap, its own writes are undone in the same transaction: a slot is never
  over-granted, and a COUNT(*) is never trusted.
- Claims of actor events lock `actor_queues` rows FOR UPDATE SKIP LOCKED: concurrent claimers
  never wait for nor share a row (tests/actors/test_store_verbs.py). Starts need no claim,
  because the queue of starts lives in the process that logged them.
- Actor batches (appends, claims, completions, takeovers) travel as one JSON or array
  parameter, so a batch of any size is one statement with a handful of binds.
- An actor append of a batch is one statement (`append_events`) with arrays bound in binary;
  its NOT NULL guard sends an append that races another creating the same instance to the
  step-by-step path.
- New actor rows are announced with NOTIFY yoke_actor_queue, new timers with NOTIFY
  yoke_schedule_change, both inside the writing transaction.
- A freed slot is announced with NOTIFY yoke_slot_freed inside the freeing transaction, so it is
  delivered only if the slot really was freed; listeners keep a backup poll.
- A grant batch of starts that fit at once and take no capped slot is one statement
  (`grant_logged_one`: starts, executions and ledger counts), and so is a batch of finishes
  (`finish_executions_one`: executions, ledger release and NOTIFY), each its own transaction in
  one round trip, with the batch as parallel arrays bound in binary; the locks are taken in the
  same order as by the general path.
- Migrations take pg_advisory_xact_lock, so processes booting together apply each one once.
- Bind limit: 65,535 parameters per statement; no yoke query binds more than 19 (the
  fenced one-statement grant: 17 arrays and values, and its fence's name and epoch).
- Connections come from a psycopg_pool AsyncConnectionPool in autocommit mode: a verb of one
  statement runs as its own transaction (one round trip); a verb of several opens an explicit
  transaction. Takes, renewals and releases of leases have a pool of their own
  (`LEASE_POOL_SIZE` connections, same session settings), so a renewal never waits for a
  connection behind grant batches, claims or reads, however busy the main pool is.
- One grant (and one finish) batch in the store at a time (`batch_overlap = 1`): a second
  batch sent while one commits waits for the ledger rows' lock and then commits on its own, so
  the same starts cost more commits (measured: fewer starts/s in process and over HTTP).

This module must never decide policy: it gives the verbs (`execverbs`, `actorverbs`) their
transactions, and exposes them as `executions` and `actors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from yoke.errors import (
    Conflict,
    NotLeader,
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

log = logging.getLogger("yoke.store.postgres")

CHANNEL = "yoke_slot_freed"
REQUEST_CHANNEL = "yoke_execution_request"
ACTOR_QUEUE_CHANNEL = "yoke_actor_queue"
SCHEDULE_CHANNEL = "yoke_schedule_change"
LEASE_CHANNEL = "yoke_lease"
TENANTS_CHANNEL = "yoke_tenant_settings"
SCHEDULES_CHANNEL = "yoke_schedules"
_MIGRATION_LOCK = 0x796F6B65  # "yoke"
FENCED = "YK001"  # raised by yoke_fence(): the writer's term is over
QUOTA = "yoke_tenant_quota"  # the CHECK that refuses an increment of a tenant's usage past its cap
_MIGRATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS yoke_schema_migrations "
    "(version INTEGER PRIMARY KEY, name TEXT NOT NULL)"
)


def translate(exc: Exception) -> YokeError:
    """The one place where psycopg and pool exceptions become `YokeError`s."""
    if isinstance(exc, psycopg.Error) and exc.sqlstate == FENCED:
        return NotLeader(f"fenced: {exc.diag.message_primary or exc}")
    if isinstance(exc, PoolTimeout):
        return StoreUnavailable(f"PostgreSQL unavailable: {exc}")
    if isinstance(exc, psycopg.errors.CheckViolation) and exc.diag.constraint_name == QUOTA:
        return QuotaExceeded("a tenant's quota would be passed: nothing was written")
    if isinstance(exc, psycopg.errors.IntegrityError):
        return Conflict(f"constraint violated: {exc}")
    if isinstance(exc, psycopg.errors.ProgramLimitExceeded):
        # e.g. an index row too large: the same statement fails again; not an outage
        return StoreError(f"PostgreSQL refused the values: {exc}")
    if isinstance(exc, psycopg.OperationalError):
        return StoreUnavailable(f"PostgreSQL unavailable: {exc}")
    return StoreError(f"PostgreSQL error: {exc}")


async def migrate(
    conn: psycopg.AsyncConnection[Any], *, fresh_install: bool = True, upto: int | None = None
) -> int:
    """Bring the schema up to date in one transaction; see `sqlite.migrate` for the options."""
    all_migrations = sqlfiles.migrations("postgres")
    target = all_migrations if upto is None else all_migrations[:upto]
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        await conn.execute(_MIGRATIONS_TABLE)
        cur = await conn.execute("SELECT version FROM yoke_schema_migrations")
        applied = {int(r[0]) for r in await cur.fetchall()}
        cur = await conn.execute(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = current_schema() "
            "AND table_name LIKE 'yoke\\_%' AND table_name <> 'yoke_schema_migrations'"
        )
        empty = not applied and await cur.fetchone() is None
        if empty and fresh_install and upto is None:
            for stmt in sqlfiles.split_statements(sqlfiles.fresh_schema("postgres")):
                await conn.execute(stmt)
            applied_now = target
        else:
            applied_now = tuple(m for m in target if m.version not in applied)
            for m in applied_now:
                for stmt in sqlfiles.split_statements(m.sql):
                    await conn.execute(stmt)
        for m in applied_now:
            await conn.execute(
                "INSERT INTO yoke_schema_migrations (version, name) VALUES (%s, %s)",
                (m.version, m.name),
            )
        cur = await conn.execute("SELECT max(version) FROM yoke_schema_migrations")
        row = await cur.fetchone()
    return int(row[0] or 0) if row else 0


class _Tx:
    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._conn = conn
        self._queries = sqlfiles.queries("postgres")

    async def one(self, query: str, params: Mapping[str, Any]) -> Row | None:
        async with self._conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(self._queries[query], params)
            return await cur.fetchone()

    async def all(self, query: str, params: Mapping[str, Any]) -> list[Row]:
        async with self._conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(self._queries[query], params)
            return list(await cur.fetchall())

    async def run(self, query: str, params: Mapping[str, Any]) -> int:
        async with self._conn.cursor() as cur:
            await cur.execute(self._queries[query], params)
            return cur.rowcount

    async def many(
        self, query: str, items: Sequence[Mapping[str, Any]], **common: Any
    ) -> list[Row]:
        # One statement for the batch: one round trip, whatever its size.
        return await self.all(f"{query}_many", {"batch": json.dumps(items), **common})

    async def insert(
        self, query: str, items: Sequence[Mapping[str, Any]], *, key: str
    ) -> dict[Any, int]:
        # `<query>_many` returns only the key and seq of each row it wrote.
        rows = await self.all(f"{query}_many", {"batch": json.dumps(items)})
        return {r[key]: int(r["seq"]) for r in rows}


# Connections of the lease verbs' own pool: two, so that a take waiting at its gate (up to the
# gate's lock timeout) never holds back a renewal of another lease held by the same process.
LEASE_POOL_SIZE = 2


class _LeaseLink:
    """Transactions on the store's lease pool (`leaseverbs.Link`): takes, renewals, releases."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store

    def __repr__(self) -> str:
        return f"_LeaseLink({self._store!r})"

    def read(self) -> AbstractAsyncContextManager[Tx]:
        return self._store._tx(write=False, leases=True)

    def write(self) -> AbstractAsyncContextManager[Tx]:
        return self._store._tx(write=True, leases=True)


LIVENESS_KEY = 2035382118  # pg_advisory_lock(LIVENESS_KEY, 0): the admission leader's liveness
_OWNER = """
SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %(key)s AND l.objid = 0
    AND l.objsubid = 2 AND l.database = (SELECT oid FROM pg_database
                                         WHERE datname = current_database())
"""
# The liveness session must notice a dead peer in seconds, not the OS's two hours: keepalives
# and a user timeout on both ends of its socket.
_SERVER_KEEPALIVE = (
    "-c tcp_keepalives_idle=2 -c tcp_keepalives_interval=1 -c tcp_keepalives_count=3 "
    "-c tcp_user_timeout=5000"
)


def alive_name(holder: str) -> str:
    """The application_name of the liveness session of the lease holder `holder`."""
    return f"yoke-alive:{holder}"[:63]


class LivenessLock:
    """A session advisory lock held on a connection of its own (never pooled): PostgreSQL
    releases it the moment that session ends, so a waiter learns at once that its holder's
    process died. `hold` waits for it; `let_go` closes the connection (dropping the lock, or
    the wait); `owner` names the session that holds it (its application_name)."""

    def __init__(self, url: str, holder: str, *, connect_timeout: float) -> None:
        self._url = url
        self._name = alive_name(holder)
        self._connect_timeout = connect_timeout
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self.held = False

    def __repr__(self) -> str:
        return f"LivenessLock({self._name!r}, held={self.held})"

    @staticmethod
    def name_of(holder: str) -> str:
        return alive_name(holder)

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = await psycopg.AsyncConnection.connect(
                self._url,
                autocommit=True,
                application_name=self._name,
                connect_timeout=max(1, int(self._connect_timeout)),
                options=_SERVER_KEEPALIVE,
                keepalives=1,
                keepalives_idle=2,
                keepalives_interval=1,
                keepalives_count=3,
            )
        return self._conn

    async def hold(self) -> None:
        if self.held:
            return
        try:
            conn = await self._connect()
            await conn.execute("SELECT pg_advisory_lock(%s, 0)", (LIVENESS_KEY,))
        except psycopg.Error as exc:
            await self.let_go()
            raise translate(exc) from exc
        except BaseException:
            await self.let_go()  # a cancelled wait must not leave its request queued
            raise
        self.held = True

    async def let_go(self) -> None:
        conn, self._conn, self.held = self._conn, None, False
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                await conn.close()

    async def owner(self) -> str | None:
        try:
            conn = await self._connect()
            cur = await conn.execute(_OWNER, {"key": LIVENESS_KEY})
            row = await cur.fetchone()
        except psycopg.Error as exc:
            await self.let_go()
            raise translate(exc) from exc
        return None if row is None else str(row[0])


class PostgresStore:
    """The PostgreSQL backend: its transactions (`tx.Transactions`), and the verbs over them."""

    dialect = "postgres"
    one_statement_batches = True
    batch_overlap = 1  # a second grant batch waits for the ledger rows, then commits alone

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 5.0,
        retry: RetryPolicy | None = None,
        application_name: str | None = None,
        idle_in_transaction_timeout: float | None = None,
    ) -> None:
        self.url = url
        # Session settings of every pooled connection: a name `pg_stat_activity` shows, and (a
        # leader of an HA pair) a bound on a transaction left idle by a frozen process, whose
        # shared fence lock would otherwise hold a takeover back.
        self._session: dict[str, Any] = {}
        if application_name:
            self._session["application_name"] = application_name[:63]
        if idle_in_transaction_timeout:
            ms = max(1, int(idle_in_transaction_timeout * 1000))
            self._session["options"] = f"-c idle_in_transaction_session_timeout={ms}"
        self.min_size = min_size
        self.max_size = max_size
        self.connect_timeout = connect_timeout
        self.retry = retry or RetryPolicy()  # how a lost LISTEN connection is made again
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] | None = None
        self._lease_pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] | None = None
        self._version = 0
        self.executions = ExecutionVerbs(self)
        self.actors = ActorVerbs(self, leases=_LeaseLink(self))
        self.schedules = ScheduleVerbs(self)

    def __repr__(self) -> str:
        return f"PostgresStore(open={self._pool is not None}, max_size={self.max_size})"

    def _new_pool(
        self, min_size: int, max_size: int
    ) -> AsyncConnectionPool[psycopg.AsyncConnection[Any]]:
        return AsyncConnectionPool(
            self.url,
            min_size=min_size,
            max_size=max_size,
            open=False,
            kwargs={"autocommit": True, **self._session},
            timeout=self.connect_timeout,
        )

    async def open(self) -> None:
        pool = self._new_pool(self.min_size, self.max_size)
        leases = self._new_pool(1, LEASE_POOL_SIZE)
        try:
            await pool.open(wait=True, timeout=self.connect_timeout)
            async with pool.connection() as conn:
                self._version = await migrate(conn)
            await leases.open(wait=True, timeout=self.connect_timeout)
        except (psycopg.Error, PoolTimeout) as exc:
            await asyncio.gather(pool.close(), leases.close())
            raise translate(exc) from exc
        except BaseException:
            await asyncio.gather(pool.close(), leases.close())
            raise
        self._pool, self._lease_pool = pool, leases

    async def close(self) -> None:
        pools = [p for p in (self._pool, self._lease_pool) if p is not None]
        self._pool = self._lease_pool = None
        for pool in pools:
            await pool.close()

    async def schema_version(self) -> int:
        return self._version

    @asynccontextmanager
    async def _tx(
        self, *, write: bool, pipeline: bool = False, leases: bool = False
    ) -> AsyncIterator[_Tx]:
        pool = self._lease_pool if leases else self._pool
        if pool is None:
            raise StoreUnavailable("the PostgreSQL store is not open")
        try:
            async with self._connection(pool) as conn:
                if pipeline:
                    async with conn.pipeline(), conn.transaction():
                        yield _Tx(conn)
                elif write:
                    async with conn.transaction():
                        yield _Tx(conn)
                else:
                    # Reads and one-statement writes: autocommit, one round trip.
                    yield _Tx(conn)
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc

    @staticmethod
    @asynccontextmanager
    async def _connection(
        pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]],
    ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        # On Python 3.11 the pool waits for a connection with `asyncio.wait_for`, which returns
        # the connection and drops a cancel that lands in the same turn: the task would run on
        # (and a TaskGroup stopping it would wait forever). The task still counts the cancel,
        # so a count that grew while waiting is a cancel to deliver now.
        task = asyncio.current_task()
        asked = task.cancelling() if task is not None else 0
        async with pool.connection() as conn:
            if task is not None and task.cancelling() > asked:
                raise asyncio.CancelledError
            yield conn

    # -- tx.Transactions ---------------------------------------------------------------------
    def read(self) -> AbstractAsyncContextManager[Tx]:
        return self._tx(write=False)

    def write(self) -> AbstractAsyncContextManager[Tx]:
        return self._tx(write=True)

    def single(self) -> AbstractAsyncContextManager[Tx]:
        # One statement in autocommit: its own transaction, one round trip.
        return self._tx(write=False)

    def fenced(self) -> AbstractAsyncContextManager[Tx]:
        return self._tx(write=True, pipeline=True)

    def array(self, values: list[str]) -> Any:
        return values

    async def notify_slot_freed(self, tx: Tx) -> None:
        await tx.run("notify_slot_freed", {})

    async def listen_actor_wakeups(
        self,
        on_queue: Callable[[], None],
        on_schedule: Callable[[], None],
        on_tenants: Callable[[], None],
    ) -> None:
        """Actors: NOTIFY yoke_actor_queue (rows appended or handed over),
        yoke_schedule_change (a timer scheduled) and yoke_tenant_settings (a tenant's weight or
        cap changed); reconnects with backoff, never fatal."""
        by_channel = {
            ACTOR_QUEUE_CHANNEL: on_queue,
            SCHEDULE_CHANNEL: on_schedule,
            TENANTS_CHANNEL: on_tenants,
        }

        def on_connect() -> None:  # whatever was announced while we were not listening
            for call in by_channel.values():
                call()

        await self._listen(
            "actor wake-ups", tuple(by_channel), on_connect, lambda c, _p: by_channel[c]()
        )

    async def listen_tenant_settings(self, on_changed: Callable[[], None]) -> None:
        """NOTIFY yoke_tenant_settings: a tenant's settings changed (on connect too: whatever
        changed while we were not listening)."""
        await self._listen(
            "tenant settings", (TENANTS_CHANNEL,), on_changed, lambda _c, _p: on_changed()
        )

    async def listen_schedules(self, on_changed: Callable[[], None]) -> None:
        """NOTIFY yoke_schedules: a schedule was set or deleted (on connect too: whatever
        changed while we were not listening)."""
        await self._listen(
            "schedule changes", (SCHEDULES_CHANNEL,), on_changed, lambda _c, _p: on_changed()
        )

    def liveness(self, holder: str) -> LivenessLock:
        """The admission leader's liveness lock, for the process holding lease as `holder`."""
        return LivenessLock(self.url, holder, connect_timeout=self.connect_timeout)

    async def listen_leases(self, on_released: Callable[[], None]) -> None:
        """NOTIFY yoke_lease: a lease was released (a leader resigned)."""
        await self._listen(
            "lease releases", (LEASE_CHANNEL,), on_released, lambda _c, _p: on_released()
        )

    async def listen_slot_freed(self, on_freed: Callable[[], None]) -> None:
        # `on_freed` on connect too: anything freed while we were not listening.
        await self._listen("freed slots", (CHANNEL,), on_freed, lambda _c, _p: on_freed())

    async def listen_timers(self, on_change: Callable[[], None]) -> None:
        """NOTIFY yoke_execution_timers: a scheduled start was logged or made due (on connect
        too: whatever was scheduled while we were not listening)."""
        await self._listen(
            "execution timers", ("yoke_execution_timers",), on_change, lambda _c, _p: on_change()
        )

    async def listen_requests(self, on_request: Callable[[str], None]) -> None:
        """NOTIFY yoke_execution_request, its payload the instance that runs the execution
        asked; on connect, every instance is told to look (`""`)."""
        await self._listen(
            "requests to executions",
            (REQUEST_CHANNEL,),
            lambda: on_request(""),
            lambda _channel, payload: on_request(payload),
        )

    async def _listen(
        self,
        what: str,
        channels: Sequence[str],
        on_connect: Callable[[], None],
        on_notify: Callable[[str, str], None],
    ) -> None:
        """LISTEN on `channels` on a connection of its own until cancelled. A lost connection
        is not fatal (the callers' backup polls cover the gap): it reconnects after `Backoff`
        pauses, with one warning per outage (not one per retry) and one line when listening
        again."""
        backoff = Backoff(self.retry)
        down = False
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.url, autocommit=True, connect_timeout=max(1, int(self.connect_timeout))
                )
                async with conn:
                    for channel in channels:
                        await conn.execute(f"LISTEN {channel}")
                    if down:
                        log.info("listening for %s again", what)
                        down = False
                    backoff.ok()
                    on_connect()
                    async for n in conn.notifies():
                        on_notify(n.channel, n.payload)
                reason = "the connection ended"
            except psycopg.Error as exc:
                reason = str(exc).strip() or type(exc).__name__
            if not down:
                log.warning(
                    "not listening for %s (%s); retrying with backoff, backup polls meanwhile",
                    what,
                    reason,
                )
                down = True
            await asyncio.sleep(backoff.failed())
