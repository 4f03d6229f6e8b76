"""Requests to executions: durable rows that the instance running an execution acts on.

A request (`kind` "cancel") is written only while its execution runs, naming the instance
that runs it (`request_cancel`), and announced to that instance (NOTIFY
yoke_execution_request with its id on PostgreSQL, delivered at commit; other backends rely on
the owner's poll). The owner reads its pending requests (`pending_requests`), acts, and marks
them handled (`handle_requests`). A request whose owner dies is settled by `recover_dead`
(its execution ends CANCELLED, not ABORTED, and is not resumed). Other kinds of request (a
signal) fit the same rows: a kind and a JSON payload.

This module must never decide what a request means: it keeps and hands out rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from yoke.store.records import ExecutionRow, RequestRow
from yoke.store.rows import execution_row, opt
from yoke.store.tx import Row, Transactions


class RequestVerbs:
    def __init__(self, transactions: Transactions) -> None:
        self._t = transactions

    def __repr__(self) -> str:
        return f"RequestVerbs({self._t!r})"

    async def request_cancel(
        self, execution_id: str, *, principal: str | None, now: float
    ) -> tuple[ExecutionRow | None, bool]:
        """Ask the instance running the execution to cancel it: (the execution as it is after,
        True if a request was written). None if there is no such execution; no request when
        it does not run (any more)."""
        async with self._t.write() as tx:
            asked = await tx.one(
                "request_cancel",
                {"execution_id": execution_id, "principal": principal, "now": now},
            )
            if asked is not None:
                await tx.run("notify_request", {"instance_id": str(asked["instance_id"])})
            row = await tx.one("get_execution", {"execution_id": execution_id})
        return (None if row is None else execution_row(row)), asked is not None

    async def pending_requests(self, instance_id: str, *, limit: int) -> list[RequestRow]:
        async with self._t.read() as tx:
            rows = await tx.all("pending_requests", {"instance_id": instance_id, "limit": limit})
        return [_request(r) for r in rows]

    async def handle_requests(self, seqs: Sequence[int], *, now: float) -> None:
        if not seqs:
            return
        params = {"seqs": list(seqs) if self._t.dialect == "postgres" else _json(seqs), "now": now}
        async with self._t.single() as tx:
            await tx.run("handle_requests", params)

    async def listen(self, on_request: Callable[[str], None]) -> None:
        """Until cancelled, call `on_request(instance_id)` when a request is written for an
        execution of that instance; a backend with no push notification returns at once."""
        await self._t.listen_requests(on_request)


def _json(seqs: Sequence[int]) -> str:
    return "[" + ",".join(str(int(s)) for s in seqs) + "]"


def _request(r: Row) -> RequestRow:
    return RequestRow(
        seq=int(r["seq"]),
        execution_id=str(r["execution_id"]),
        kind=str(r["kind"]),
        instance_id=str(r["instance_id"]),
        principal=opt(r["principal"]),
        payload=opt(r["payload"]),
        created_at=float(r["created_at"]),
    )
