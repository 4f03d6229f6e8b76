"""The one transaction type the store's verbs are written over, and what a backend provides.

A backend (`sqlite.SQLiteStore`, `postgres.PostgresStore`) is `Transactions`: it opens reads
and writes the way its dialect needs (BEGIN IMMEDIATE and group commit on SQLite, a pool and
explicit transactions on PostgreSQL) and hands out `Tx`, which runs a named query of its
`queries.sql`. The verbs (`execverbs.ExecutionVerbs`, `actorverbs.ActorVerbs`) hold a backend
by reference and decide which queries run in which transaction; the backend exposes them as
its `executions` and `actors`.

This module must never import a driver or a verb module: it only names the seam between them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

Row = Mapping[str, Any]


class Tx(Protocol):
    async def one(self, query: str, params: Mapping[str, Any]) -> Row | None: ...

    async def all(self, query: str, params: Mapping[str, Any]) -> list[Row]: ...

    async def run(self, query: str, params: Mapping[str, Any]) -> int: ...

    async def many(
        self, query: str, items: Sequence[Mapping[str, Any]], **common: Any
    ) -> list[Row]:
        """`query` once per item (with `common` added): the rows all of them return. A backend
        may run it as one statement over the whole batch (`<query>_many`, which takes the items
        as a JSON array `batch`), when a statement costs a round trip."""
        ...

    async def insert(
        self, query: str, items: Sequence[Mapping[str, Any]], *, key: str
    ) -> dict[Any, int]:
        """Insert a row per item (`query`, or `<query>_many` as with `many`) without reading
        the rows back: the `seq` of each row written, by the item's `key` value; an item that
        ON CONFLICT skipped is absent. The caller knows every other column: on SQLite,
        RETURNING * cost as much as the insert itself."""
        ...


class Transactions(Protocol):
    """What a backend gives the verbs: transactions, and its dialect's few differences."""

    @property
    def dialect(self) -> str:
        """`"sqlite"` or `"postgres"`."""
        ...

    @property
    def one_statement_batches(self) -> bool:
        """A batch that writes several tables can be one statement (PostgreSQL's data-modifying
        CTEs: an actor append, a batch of finishes); else step by step in one transaction."""
        ...

    @property
    def batch_overlap(self) -> int:
        """How many grant (or finish) batches are worth having in the store at once: more
        than one where a batch that goes while another commits shares its commit or begins
        right after it (SQLite's group commit), one where it would commit on its own after
        waiting for the ledger rows' lock (PostgreSQL: measured slower)."""
        ...

    def read(self) -> AbstractAsyncContextManager[Tx]:
        """Reads that see only committed writes."""
        ...

    def write(self) -> AbstractAsyncContextManager[Tx]:
        """A write transaction of several statements."""
        ...

    def single(self) -> AbstractAsyncContextManager[Tx]:
        """One write statement: where the dialect allows, it is its own transaction."""
        ...

    def fenced(self) -> AbstractAsyncContextManager[Tx]:
        """A write transaction of a fence check and one statement; where the dialect can, they
        travel together (PostgreSQL's pipeline mode: BEGIN, the fence and the statement in one
        round trip, the COMMIT in a second, and a fence that raises aborts the rest)."""
        ...

    def array(self, values: list[str]) -> Any:
        """A list of keys as the backend binds it (a JSON text for SQLite, text[] for PG)."""
        ...

    async def notify_slot_freed(self, tx: Tx) -> None:
        """Announce a freed slot inside the freeing transaction (no-op without NOTIFY)."""
        ...

    async def listen_slot_freed(self, on_freed: Callable[[], None]) -> None:
        """Call `on_freed` when another process frees a slot, until cancelled; a backend with
        no push notification returns at once (callers keep a backup poll)."""
        ...

    async def listen_requests(self, on_request: Callable[[str], None]) -> None:
        """Call `on_request(instance_id)` when a request to an execution of that instance is
        written, until cancelled; a backend with no push notification returns at once."""
        ...

    async def listen_timers(self, on_change: Callable[[], None]) -> None:
        """Call `on_change` when a scheduled start is logged or made due, until cancelled; a
        backend with no push notification returns at once."""
        ...

    async def listen_actor_wakeups(
        self,
        on_queue: Callable[[], None],
        on_schedule: Callable[[], None],
        on_tenants: Callable[[], None],
    ) -> None:
        """Call `on_queue` on new actor rows, `on_schedule` on new timers and `on_tenants` on
        changed tenant settings, until cancelled; a backend with no push notification returns
        at once."""
        ...
