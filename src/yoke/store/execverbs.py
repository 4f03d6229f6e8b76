"""The execution verbs of the store (`protocol.Store`), written once over named queries.

`ExecutionVerbs` holds a backend's transactions (`tx.Transactions`: run a named query of its
`queries.sql`, begin a write the dialect's way) by reference; the verbs here decide which
queries run in which transaction. The lock order is fixed so concurrent writers never deadlock:
a start row, then an execution row, then ledger rows in sorted key order (always last, since
they are the rows every grant and finish touches). `finish_and_grant` takes the ledger rows in
two passes, each in key order (the ends' release, then the grants' counts), after its start
rows; see `_grant_in` for why that cannot deadlock. On PostgreSQL its common case is one
statement (`hand_over`, D25): one pass, and no ledger row at all for a slot that only changes
hands.

Fencing (`set_fence`, high availability): once a fence is set, every write that decides for the
queue (a log, a grant, a refusal or cancel, a priority, a control-log entry, an adoption) runs
`check_fence` first in its own transaction, so it commits only under the leader's term; a
finish, a step and a recovery are not fenced: they free what is already decided, once, by the
status they find.

This module must never import a driver, read a clock or decide policy: `now`, caps and ids come
from the caller.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from typing import Any

from yoke.errors import Conflict, NotFound, NotLeader
from yoke.store import usage
from yoke.store.leaseverbs import Fence, ha_session_name
from yoke.store.pruneverbs import PruneVerbs
from yoke.store.records import (
    AnswerRow,
    ControlRow,
    ExecutionRow,
    ExecutionStatus,
    Finish,
    GrantOutcome,
    GrantRequest,
    GrantResult,
    NewControl,
    NewExecution,
    NewStart,
    Recovery,
    Resume,
    Slot,
    StartKind,
    StartRow,
    StartStatus,
    StepCopy,
    StepRecord,
    StepRow,
    StepStatus,
)
from yoke.store.recovery import DeadEnd, end_dead_instance
from yoke.store.requestverbs import RequestVerbs
from yoke.store.rows import (
    answer_row,
    control_params,
    control_row,
    encoded_keys,
    execution_row,
    granted_execution,
    keys_of,
    new_execution_params,
    new_start_params,
    opt,
    start_row,
    step_params,
    written_execution,
    written_start,
)
from yoke.store.timeverbs import TimeVerbs
from yoke.store.tx import Transactions, Tx


class ExecutionVerbs:
    """The `Store` protocol's verbs over one backend's transactions."""

    def __init__(self, transactions: Transactions) -> None:
        self._t = transactions
        self._fence: Fence | None = None
        # Parts over the same transactions: requests to executions, and retention.
        self.requests = RequestVerbs(transactions)
        self.retention = PruneVerbs(transactions)
        self.time = TimeVerbs(transactions)  # scheduled starts, waits and signals

    def __repr__(self) -> str:
        return f"ExecutionVerbs({self._t!r}, fence={self._fence})"

    @property
    def batch_overlap(self) -> int:
        """How many grant or finish batches are worth having in the store at once."""
        return self._t.batch_overlap

    # -- fencing -----------------------------------------------------------------------------
    def set_fence(self, fence: Fence | None) -> None:
        self._fence = fence

    def _decides(self) -> AbstractAsyncContextManager[Tx]:
        """The transaction of a one-statement write that decides for the queue: its own
        (one round trip) when unfenced, else a transaction the fence opens."""
        return self._t.single() if self._fence is None else self._t.fenced()

    async def _check_fence(self, tx: Tx) -> None:
        fence = self._fence
        if fence is None:
            return
        params = {"name": fence.name, "epoch": fence.epoch}
        if self._t.dialect == "postgres":
            # yoke_fence() raises (SQLSTATE YK001), so its answer need not be read: in a
            # pipeline the check travels with the statement it guards.
            await tx.run("check_fence", params)
            return
        row = await tx.one("check_fence", params)
        if row is None or not row["ok"]:
            raise NotLeader(f"the lease {fence.name!r} is no longer held under epoch {fence.epoch}")

    async def ha_peers(self, instance_id: str) -> int:
        async with self._t.read() as tx:
            row = await tx.one("ha_peers", {"me": ha_session_name(instance_id)})
        return 0 if row is None else int(row["n"])

    async def adopt_queued_starts(
        self, instance_id: str, *, requeue: bool, reason: str, now: float
    ) -> list[StartRow]:
        async with self._t.write() as tx:
            await self._check_fence(tx)
            if not requeue:
                params = {"instance_id": instance_id, "reason": reason, "now": now}
                await tx.all("abort_queued_starts", params)
                return []
            rows = await tx.all("adopt_queued_starts", {"instance_id": instance_id})
        return sorted((start_row(r) for r in rows), key=lambda r: r.seq)

    # -- processes -------------------------------------------------------------------------
    async def register_instance(self, instance_id: str, *, now: float) -> None:
        async with self._t.single() as tx:
            await tx.run("register_instance", {"instance_id": instance_id, "now": now})

    async def heartbeat(self, instance_id: str, *, now: float) -> bool:
        async with self._t.single() as tx:
            return await tx.run("heartbeat", {"instance_id": instance_id, "now": now}) == 1

    async def stop_instance(self, instance_id: str, *, now: float) -> None:
        async with self._t.single() as tx:
            await tx.run("stop_instance", {"instance_id": instance_id, "now": now})

    async def recover_dead(
        self, *, stale_before: float, now: float, exclude: str, resume: Resume | None = None
    ) -> Recovery:
        out = DeadEnd()
        async with self._t.write() as tx:
            # Declaring the instance dead locks its row first: two recoverers never both
            # decrement the ledger for the same executions, nor both resume one.
            rows = await tx.all(
                "declare_dead", {"now": now, "exclude": exclude, "stale_before": stale_before}
            )
            dead = sorted(str(r["instance_id"]) for r in rows)
            for instance_id in dead:
                await end_dead_instance(tx, instance_id, out, to=exclude, now=now, resume=resume)
            for key in sorted(out.freed):
                await tx.run("release_slot", {"key": key, "n": out.freed[key]})
                await tx.run("drop_idle_slot", {"key": key})
            if out.freed:
                await self._t.notify_slot_freed(tx)
        return Recovery(
            instances=tuple(dead),
            executions=tuple(out.ended),
            starts=tuple(out.aborted_starts),
            adopted=(*out.adopted, *out.resumes),
            recovered=tuple(out.recovered),
            cancelled=tuple(out.cancelled),
        )

    # -- starts ------------------------------------------------------------------------------
    async def log_start(self, start: NewStart) -> tuple[StartRow, bool]:
        (logged,) = await self.log_starts([start])
        return logged

    async def log_starts(self, starts: Sequence[NewStart]) -> list[tuple[StartRow, bool]]:
        # `_single`: on PostgreSQL the batch is one INSERT in autocommit, one round trip.
        async with self._decides() as tx:
            await self._check_fence(tx)
            return await _insert_starts(tx, [(s, new_start_params(s)) for s in starts])

    async def get_start(self, start_id: str) -> StartRow | None:
        async with self._t.read() as tx:
            row = await tx.one("get_start", {"start_id": start_id})
        return None if row is None else start_row(row)

    async def grant_start(
        self,
        start_id: str,
        *,
        execution: NewExecution,
        slots: Sequence[Slot],
        copy_steps: StepCopy | None,
        now: float,
    ) -> GrantResult:
        request = GrantRequest(
            start_id=start_id, execution=execution, slots=tuple(slots), copy_steps=copy_steps
        )
        (res,) = await self.grant_starts([request], now=now)
        if res.outcome is GrantOutcome.GONE and res.start is None:
            raise NotFound(f"no start {start_id}")
        return res

    async def grant_starts(
        self, requests: Sequence[GrantRequest], *, now: float
    ) -> list[GrantResult]:
        _check_grants(requests)
        if self._t.one_statement_batches and _logged_uncapped(requests):
            return await self._grant_logged_one(requests, now=now)
        async with self._t.write() as tx:
            return await self._grant_in(tx, requests, now=now)

    async def finish_and_grant(
        self, finishes: Sequence[Finish], grants: Sequence[GrantRequest], *, now: float
    ) -> tuple[list[bool], list[GrantResult]]:
        if not grants:
            return await self.finish_executions(finishes, now=now), []
        if not finishes:
            return [], await self.grant_starts(grants, now=now)
        _check_finishes(finishes)
        _check_grants(grants)
        if self._t.one_statement_batches and _plain_hand_over(finishes, grants):
            handed = await self._hand_over(finishes, grants, now=now)
            if handed is not None:
                return handed
        done: list[bool] = []

        async def finish(tx: Tx) -> None:
            done.extend(await self._finish_in(tx, finishes, now=now))

        async with self._t.write() as tx:
            results = await self._grant_in(tx, grants, now=now, freeing=finish)
        return done, results

    async def _hand_over(
        self, finishes: Sequence[Finish], grants: Sequence[GrantRequest], *, now: float
    ) -> tuple[list[bool], list[GrantResult]] | None:
        """The ends and the grants that take their slots in one statement (PostgreSQL:
        `hand_over`, one round trip), or None, with nothing written, when a grant would not
        fit on the locked counts: the general path then decides grant by grant. A pick the
        statement leaves alone (its start no longer QUEUED, or a wake-up) is granted or
        answered by the general path after it."""
        order = sorted(grants, key=lambda r: r.start_id)
        new = self._execution_params(order)
        caps: dict[str, int] = {}
        for r in grants:
            for slot in r.slots:
                if slot.cap is not None:
                    caps[slot.key] = min(slot.cap, caps.get(slot.key, slot.cap))
        fence = self._fence
        ends = sorted(finishes, key=lambda f: f.execution_id)  # their rows' lock order
        params = {
            "fence_name": None if fence is None else fence.name,
            "fence_epoch": None if fence is None else fence.epoch,
            "start_ids": [r.start_id for r in order],
            "execution_ids": [p["execution_id"] for p in new],
            "slot_keys": [p["slot_keys"] for p in new],
            "instance_ids": [p["instance_id"] for p in new],
            "created": [p["created_at"] for p in new],
            "ids": [f.execution_id for f in ends],
            "statuses": [f.status.value for f in ends],
            "outputs": [f.output for f in ends],
            "errors": [f.error for f in ends],
            "caps": json.dumps(caps),
            "now": now,
        }
        async with self._t.single() as tx:
            rows = await tx.all("hand_over", params)
        if not rows[0]["fits"]:
            return None
        ended = set(rows[0]["done"])
        marked = {str(r["start_id"]): r for r in rows if r["start_id"] is not None}
        made = {p["start_id"]: p for p in new}
        results: list[GrantResult | None] = []
        left: list[GrantRequest] = []
        for req in grants:
            row = marked.get(req.start_id)
            if row is None:
                results.append(None)
                left.append(req)
                continue
            start = start_row(row)
            p = made[req.start_id] | _of_start(start)  # as the statement wrote it
            execution = written_execution(p, {p["execution_id"]: int(row["execution_seq"])})
            results.append(
                GrantResult(outcome=GrantOutcome.GRANTED, start=start, execution=execution)
            )
        if left:
            more = iter(await self.grant_starts(left, now=now))
            results = [next(more) if r is None else r for r in results]
        return [f.execution_id in ended for f in finishes], [r for r in results if r is not None]

    async def _grant_in(
        self,
        tx: Tx,
        requests: Sequence[GrantRequest],
        *,
        now: float,
        freeing: Callable[[Tx], Awaitable[None]] | None = None,
    ) -> list[GrantResult]:
        """The grants of `requests` inside `tx`. `freeing` (the ends whose slots these grants
        take) runs once the start rows are marked and before the new execution rows are
        written: an end is committed before the start that takes its slot, whatever reads the
        rows' order (a trigger). It takes its execution rows, then the ledger rows in key
        order; the grants then take the ledger rows again, in key order: every execution holds
        `global`, the first key, so the first lock of either pass orders such a transaction
        with every other that takes ledger rows (no deadlock). With `freeing` the peek comes
        after it, so that it sees the slots freed (`_peek_freed`)."""
        results: list[GrantResult | None] = [None] * len(requests)
        await self._check_fence(tx)
        # A look at the counts first (no lock): a pick that cannot fit, e.g. when other
        # processes hold every slot, is answered FULL before anything is written for it.
        capped = sorted({s.key for r in requests for s in r.slots if s.cap is not None})
        peeked: dict[str, int] = {}
        if capped and freeing is None:
            rows = await tx.all("peek_slots", {"keys": self._t.array(capped)})
            peeked = {str(r["key"]): int(r["running"]) for r in rows}
        hopeful: list[int] = []
        twice: list[int] = []  # a start asked for again in the same batch: GONE
        asked: set[str] = set()
        for i, req in enumerate(requests):
            if req.start_id in asked:
                twice.append(i)
                continue
            asked.add(req.start_id)
            full = _full_key(req.slots, peeked)
            if full is None:
                hopeful.append(i)
            else:
                results[i] = _full(full)
        logged = await _log_fitting(tx, requests, set(hopeful), results, now=now)
        hopeful = [i for i in hopeful if results[i] is None]
        # Marking the other starts locks their rows and tells which are still QUEUED.
        marks = [
            {
                "start_id": requests[i].start_id,
                "execution_id": requests[i].execution.execution_id,
            }
            for i in hopeful
            if requests[i].log is None
        ]
        rows = await tx.many("mark_granted", marks, now=now) if marks else []
        marked = {str(r["start_id"]): start_row(r) for r in rows}
        marked.update(
            (start_id, row)
            for start_id, (row, created) in logged.items()
            if created and row.status is StartStatus.GRANTED
        )
        planned: list[int] = []
        woken_rows: dict[str | None, ExecutionRow] = {}
        seen = Counter(peeked)
        for i in hopeful:
            req = requests[i]
            if req.start_id not in marked:
                results[i] = await _gone(tx, req.start_id)
            elif (full := _full_key(req.slots, seen)) is not None:
                await tx.run("unmark_granted", {"start_id": req.start_id})
                results[i] = _full(full)
            else:
                seen.update(s.key for s in req.slots)
                planned.append(i)
        # A wake-up runs its WAITING execution again instead of creating one; one whose
        # execution ended meanwhile (cancelled) is gone.
        wakes = {i for i in planned if marked[requests[i].start_id].kind is StartKind.WAKE}
        for i in sorted(wakes):
            woken = await self._wake_execution(tx, requests[i])
            if woken is None:
                start_id = requests[i].start_id
                await tx.run("unmark_granted", {"start_id": start_id})
                params = {"start_id": start_id, "status": "CANCELLED", "now": now}
                params |= {"reason": "its execution ended", "forget_key": False}
                await tx.one("decide_start", params)
                results[i] = await _gone(tx, start_id)
                planned.remove(i)
            else:
                woken_rows[requests[i].start_id] = woken
        if freeing is not None:
            await freeing(tx)
            planned = await self._peek_freed(tx, requests, planned, wakes, results)
        # The ledger rows are the hot ones: take them last, once per key for the whole
        # batch, so they stay locked for a statement or two and the commit. Increment
        # first, decide after: the counts before the batch are the counts after minus it.
        wanted = Counter(s.key for i in planned for s in requests[i].slots)
        executions, after = await self._insert_and_count(
            tx, [requests[i] for i in planned if i not in wakes], wanted
        )
        executions.update(woken_rows)
        running = {key: n - wanted[key] for key, n in after.items()}
        unfit: Counter[str] = Counter()
        for i in planned:
            req = requests[i]
            full = _full_key(req.slots, running)
            if full is None:
                running.update({s.key: running[s.key] + 1 for s in req.slots})
                results[i] = GrantResult(
                    outcome=GrantOutcome.GRANTED,
                    start=marked[req.start_id],
                    execution=executions[req.start_id],
                )
                continue
            # Another process took the slot since the peek: undo this grant's writes.
            unfit.update(s.key for s in req.slots)
            ex_id = req.execution.execution_id
            if i in wakes:  # its execution waits again, its steps kept
                await tx.run("unwake_execution", {"execution_id": ex_id})
            else:
                await tx.run("delete_steps_of", {"execution_id": ex_id})
                await tx.run("delete_execution", {"execution_id": ex_id})
            await tx.run("unmark_granted", {"start_id": req.start_id})
            results[i] = _full(full)
        if unfit:
            counts = json.dumps(dict(sorted(unfit.items())))
            await tx.run("release_slot_counts", {"counts": counts})
            if not self._t.one_statement_batches:  # PostgreSQL's release drops them itself
                await tx.run("drop_idle_slots", {"counts": counts})
        for i in twice:
            results[i] = await _gone(tx, requests[i].start_id)
        for i, req in enumerate(requests):
            res = results[i]
            if req.log is not None and res is not None and res.outcome is GrantOutcome.FULL:
                row = logged[req.start_id][0]  # logged by this batch, and left QUEUED
                results[i] = replace(
                    res,
                    start=replace(
                        row, status=StartStatus.QUEUED, execution_id=None, decided_at=None
                    ),
                )
        return [r for r in results if r is not None]

    async def _grant_logged_one(
        self, requests: Sequence[GrantRequest], *, now: float
    ) -> list[GrantResult]:
        """Starts that fit at once, none under a cap and none copying steps: logged GRANTED
        with their executions and ledger counts in one statement (its own transaction, one
        round trip). With no cap nothing can be FULL; a start whose idempotency key is taken
        is skipped by the statement and answered GONE with the start holding the key (or, if
        the holder gave the key back meanwhile, granted by the general path)."""
        # The arrays are bound straight from the records (no row dict per start: this is the
        # path every start that fits at once takes).
        logs: list[NewStart] = []
        for r in requests:
            assert r.log is not None
            logs.append(r.log)
        runs = [r.execution for r in requests]
        slot_keys = [encoded_keys(tuple(s.key for s in r.slots)) for r in requests]
        params = {
            "start_ids": [s.start_id for s in logs],
            "kinds": [s.kind.value for s in logs],
            "workflows": [s.workflow for s in logs],
            "sessions": [s.session for s in logs],
            "tenants": [s.tenant for s in logs],
            "priorities": [s.priority for s in logs],
            "inputs": [s.input for s in logs],
            "fingerprints": [s.fingerprint for s in logs],
            "principals": [s.principal for s in logs],
            "idem_keys": [s.idempotency_key for s in logs],
            "sources": [s.source_execution_id for s in logs],
            "from_steps": [s.from_step for s in logs],
            "execution_ids": [e.execution_id for e in runs],
            "instance_ids": [s.instance_id for s in logs],
            "created": [s.created_at for s in logs],
            "slot_keys": slot_keys,
            "now": now,
            # The statement checks the fence itself (still one round trip).
            "fence_name": None if self._fence is None else self._fence.name,
            "fence_epoch": None if self._fence is None else self._fence.epoch,
        }
        async with self._t.single() as tx:
            rows = await tx.all("grant_logged_one", params)
        start_seqs = {r["id"]: int(r["seq"]) for r in rows if r["what"] == "s"}
        run_seqs = {r["id"]: int(r["seq"]) for r in rows if r["what"] == "e"}
        results: list[GrantResult] = []
        for req, new, run, keys in zip(requests, logs, runs, slot_keys, strict=True):
            seq = start_seqs.get(new.start_id)
            if seq is not None:
                row = new.logged(seq=seq, execution_id=run.execution_id, decided_at=now)
                execution = granted_execution(run, run_seqs, keys_of(keys), created_at=now)
                results.append(
                    GrantResult(outcome=GrantOutcome.GRANTED, start=row, execution=execution)
                )
                continue
            async with self._t.read() as tx:
                holder = await tx.one("get_start_by_key", new_start_params(new))
            if holder is not None:
                results.append(GrantResult(outcome=GrantOutcome.GONE, start=start_row(holder)))
            else:  # the key was given back since: the general path logs it afresh
                [again] = await self.grant_starts([req], now=now)
                results.append(again)
        return results

    async def _wake_execution(self, tx: Tx, req: GrantRequest) -> ExecutionRow | None:
        params = {
            "execution_id": req.execution.execution_id,
            "instance_id": req.execution.instance_id,
            "slot_keys": encoded_keys(tuple(s.key for s in req.slots)),
            "leader_epoch": None if self._fence is None else self._fence.epoch,
        }
        row = await tx.one("wake_execution", params)
        return None if row is None else execution_row(row)

    async def _peek_freed(
        self,
        tx: Tx,
        requests: Sequence[GrantRequest],
        planned: list[int],
        wakes: set[int],
        results: list[GrantResult | None],
    ) -> list[int]:
        """The peek of a batch whose ends were just written (it sees the slots they freed):
        a grant that cannot fit, e.g. while another process holds the slot, is answered FULL
        and undone before its execution is written. Returns the grants still planned."""
        capped = sorted({s.key for i in planned for s in requests[i].slots if s.cap is not None})
        if not capped:
            return planned
        rows = await tx.all("peek_slots", {"keys": self._t.array(capped)})
        seen = Counter({str(r["key"]): int(r["running"]) for r in rows})
        fitting: list[int] = []
        for i in planned:
            req = requests[i]
            full = _full_key(req.slots, seen)
            if full is None:
                seen.update(s.key for s in req.slots)
                fitting.append(i)
                continue
            if i in wakes:  # its execution waits again, its steps kept
                await tx.run("unwake_execution", {"execution_id": req.execution.execution_id})
            await tx.run("unmark_granted", {"start_id": req.start_id})
            results[i] = _full(full)
        return fitting

    async def _insert_and_count(
        self, tx: Tx, requests: Sequence[GrantRequest], wanted: Mapping[str, int]
    ) -> tuple[dict[str | None, ExecutionRow], dict[str, int]]:
        """The executions of granted starts (start_id -> execution row), then the ledger rows
        of `wanted` incremented by their counts (key -> running after): one statement on
        PostgreSQL, where a round trip is the cost."""
        if not (self._t.one_statement_batches and requests and wanted):
            executions = await self._insert_executions(tx, requests)
            after: dict[str, int] = {}
            if wanted:
                counts = json.dumps(dict(sorted(wanted.items())))
                rows = await tx.all("add_slot_counts", {"counts": counts})
                after = {str(r["key"]): int(r["running"]) for r in rows}
            return executions, after
        new = self._execution_params(requests)
        params = {"batch": json.dumps(new), "counts": json.dumps(dict(sorted(wanted.items())))}
        rows = await tx.all("insert_executions_and_count", params)
        seqs = {str(r["key"]): int(r["n"]) for r in rows if r["what"] == "e"}
        after = {str(r["key"]): int(r["n"]) for r in rows if r["what"] == "l"}
        await self._copy_steps(tx, requests)
        made: dict[str | None, ExecutionRow] = {
            r.start_id: written_execution(p, seqs) for r, p in zip(requests, new, strict=True)
        }
        return made, after

    def _execution_params(self, requests: Sequence[GrantRequest]) -> list[dict[str, Any]]:
        new = [
            new_execution_params(r.execution, encoded_keys(tuple(s.key for s in r.slots)))
            for r in requests
        ]
        if self._fence is not None:
            for p in new:
                p["leader_epoch"] = self._fence.epoch
        return new

    async def _insert_executions(
        self, tx: Tx, requests: Sequence[GrantRequest]
    ) -> dict[str | None, ExecutionRow]:
        """The executions of granted starts, in one statement: start_id -> execution row."""
        if not requests:
            return {}
        new = self._execution_params(requests)
        seqs = await tx.insert("insert_execution", new, key="execution_id")
        await self._copy_steps(tx, requests)
        return {r.start_id: written_execution(p, seqs) for r, p in zip(requests, new, strict=True)}

    async def _copy_steps(self, tx: Tx, requests: Sequence[GrantRequest]) -> None:
        for r in requests:
            if r.copy_steps is not None:
                await tx.run(
                    "copy_steps",
                    {
                        "new_id": r.execution.execution_id,
                        "old_id": r.copy_steps.from_execution_id,
                        "before": r.copy_steps.before_position,
                    },
                )

    async def decide_start(
        self,
        start_id: str,
        status: StartStatus,
        *,
        reason: str | None,
        now: float,
        forget_key: bool = False,
    ) -> StartRow | None:
        if status in (StartStatus.QUEUED, StartStatus.GRANTED):
            raise ValueError(f"decide_start cannot set {status.name}")
        async with self._decides() as tx:
            await self._check_fence(tx)
            row = await tx.one(
                "decide_start",
                {
                    "start_id": start_id,
                    "status": status.value,
                    "reason": reason,
                    "now": now,
                    "forget_key": forget_key,
                },
            )
            if row is None:
                row = await tx.one("get_start", {"start_id": start_id})
        return None if row is None else start_row(row)

    async def set_start_priority(
        self, start_id: str, priority: int, *, audit: NewControl
    ) -> StartRow | None:
        async with self._t.write() as tx:
            await self._check_fence(tx)
            row = await tx.one("set_start_priority", {"start_id": start_id, "priority": priority})
            if row is None:
                row = await tx.one("get_start", {"start_id": start_id})
            else:
                await tx.one("append_control", control_params(audit))
        return None if row is None else start_row(row)

    # -- executions ------------------------------------------------------------------------
    async def create_child(self, execution: NewExecution) -> ExecutionRow:
        params = new_execution_params(execution, None)
        async with self._t.single() as tx:
            seqs = await tx.insert("insert_execution", [params], key="execution_id")
        return written_execution(params, seqs)

    async def finish_execution(
        self,
        execution_id: str,
        status: ExecutionStatus,
        *,
        output: str | None,
        error: str | None,
        now: float,
    ) -> bool:
        finish = Finish(execution_id=execution_id, status=status, output=output, error=error)
        (done,) = await self.finish_executions([finish], now=now)
        return done

    async def finish_executions(self, finishes: Sequence[Finish], *, now: float) -> list[bool]:
        _check_finishes(finishes)
        # PostgreSQL: one statement (its own transaction, one round trip): the same locks in
        # the same order, the ledger released and NOTIFY sent by the statement itself.
        begin = self._t.single if self._t.one_statement_batches else self._t.write
        async with begin() as tx:
            return await self._finish_in(tx, finishes, now=now)

    async def _finish_in(self, tx: Tx, finishes: Sequence[Finish], *, now: float) -> list[bool]:
        """Finish `finishes` inside `tx`: whether each was RUNNING (and is ended now)."""
        if self._t.one_statement_batches:
            rows = await tx.all(
                "finish_executions_one",
                {
                    "ids": [f.execution_id for f in finishes],
                    "statuses": [f.status.value for f in finishes],
                    "outputs": [f.output for f in finishes],
                    "errors": [f.error for f in finishes],
                    "now": now,
                },
            )
            done = {str(r["execution_id"]) for r in rows}
            return [f.execution_id in done for f in finishes]
        batch = [
            {
                "execution_id": f.execution_id,
                "status": f.status.value,
                "output": f.output,
                "error": f.error,
            }
            for f in finishes
        ]
        freed: Counter[str] = Counter()
        # Execution rows first, then the ledger rows, each once per batch, in key order.
        rows = await tx.many("finish_execution", batch, now=now)
        for r in rows:
            freed.update(keys_of(r["slot_keys"]))
        if freed:  # (SQLite: PostgreSQL finishes a batch in one statement, above)
            counts = json.dumps(dict(sorted(freed.items())))
            await tx.run("release_slot_counts", {"counts": counts})
            await tx.run("drop_idle_slots", {"counts": counts})
        done = {str(r["execution_id"]) for r in rows}
        return [f.execution_id in done for f in finishes]

    async def get_execution(self, execution_id: str) -> ExecutionRow | None:
        async with self._t.read() as tx:
            row = await tx.one("get_execution", {"execution_id": execution_id})
        return None if row is None else execution_row(row)

    async def list_executions(
        self,
        *,
        status: ExecutionStatus | None = None,
        session: str | None = None,
        workflow: str | None = None,
        before_seq: int | None = None,
        limit: int = 100,
        tenant: str | None = None,
    ) -> list[ExecutionRow]:
        args: dict[str, Any] = {
            "status": None if status is None else status.value,
            "session": session,
            "workflow": workflow,
            "before_seq": before_seq,
            "limit": limit,
        }
        async with self._t.read() as tx:
            if tenant is None:
                rows = await tx.all("list_executions", args)
            else:
                rows = await tx.all("tenant_executions", {**args, "tenant": tenant})
        return [execution_row(r) for r in rows]

    async def linked_executions(
        self, execution_id: str, *, limit: int
    ) -> tuple[list[ExecutionRow], list[ExecutionRow]]:
        """(its children, the executions restarted or resumed from it), oldest first, at most
        `limit` of each."""
        args = {"execution_id": execution_id, "limit": limit}
        async with self._t.read() as tx:
            children = await tx.all("children_of", args)
            reruns = await tx.all("reruns_of", args)
        return [execution_row(r) for r in children], [execution_row(r) for r in reruns]

    async def record_steps(self, records: Sequence[StepRecord], *, now: float) -> None:
        written = await self.write_steps(records, now=now)
        refused = written.count(False)
        if refused:
            raise Conflict(
                f"{refused} of {len(records)} steps were recorded as done already "
                "(or by another name)"
            )

    async def write_steps(self, records: Sequence[StepRecord], *, now: float) -> list[bool]:
        """Record each step as it is now, all in one transaction: whether each was written
        (False: its step SUCCEEDED already with another result, or has another name)."""
        if not records:
            return []
        items = [step_params(r, now) for r in records]
        # One statement on PostgreSQL whatever the batch (its own transaction; a lone record
        # without the JSON batch's encoding); on SQLite a statement per record, inside one
        # write that joins the open group commit. A batch of steps from many executions is
        # one commit: a step's answer comes only after it.
        async with self._t.single() as tx:
            if self._t.one_statement_batches and len(items) > 1:
                batch = {"batch": json.dumps(items), "now": now}  # `now` of each is unread
                rows = await tx.all("record_step_many", batch)
                done = {(str(r["execution_id"]), int(r["position"])) for r in rows}
                return [(r.execution_id, r.position) in done for r in records]
            return [await tx.run("record_step", item) > 0 for item in items]

    async def steps_of(self, execution_id: str) -> list[StepRow]:
        async with self._t.read() as tx:
            rows = await tx.all("steps_of", {"execution_id": execution_id})
        return self._steps(rows)

    async def steps_page(self, execution_id: str, *, after: int, limit: int) -> list[StepRow]:
        """At most `limit` steps past position `after`, in order (one index range: the
        primary key)."""
        args = {"execution_id": execution_id, "after": after, "limit": limit}
        async with self._t.read() as tx:
            rows = await tx.all("steps_page", args)
        return self._steps(rows)

    @staticmethod
    def _steps(rows: list[Any]) -> list[StepRow]:
        return [
            StepRow(
                execution_id=str(r["execution_id"]),
                position=int(r["position"]),
                name=str(r["name"]),
                result=str(r["result"]),
                recorded_at=float(r["recorded_at"]),
                status=StepStatus(r["status"]),
                error=opt(r["error"]),
                attempts=int(r["attempts"]),
                first_attempt=int(r["first_attempt"]),
                retry_at=None if r["retry_at"] is None else float(r["retry_at"]),
            )
            for r in rows
        ]

    # -- control log -----------------------------------------------------------------------
    async def append_control(self, entry: NewControl) -> ControlRow:
        async with self._decides() as tx:
            await self._check_fence(tx)
            row = await tx.one("append_control", control_params(entry))
        assert row is not None
        return control_row(row)

    async def control_log(self, *, limit: int = 100, offset: int = 0) -> list[ControlRow]:
        async with self._t.read() as tx:
            rows = await tx.all("control_log", {"limit": limit, "offset": offset})
        return [control_row(r) for r in rows]

    async def recent_controls(
        self, *, kind: str | None = None, before_seq: int | None = None, limit: int = 100
    ) -> list[ControlRow]:
        async with self._t.read() as tx:
            rows = await tx.all(
                "recent_controls", {"kind": kind, "before_seq": before_seq, "limit": limit}
            )
        return [control_row(r) for r in rows]

    async def latest_limits(self) -> str | None:
        async with self._t.read() as tx:
            row = await tx.one("latest_limits", {})
        return None if row is None else opt(row["after"])

    # -- idempotency answers (the server's replay of a retried request) ----------------------
    async def find_answer(self, principal: str, key: str, *, now: float) -> AnswerRow | None:
        async with self._t.read() as tx:
            row = await tx.one("find_answer", {"principal": principal, "idem_key": key, "now": now})
        return None if row is None else answer_row(row)

    async def keep_answer(
        self, answer: AnswerRow, *, now: float, keep_at_most: int | None = None
    ) -> AnswerRow:
        params = {
            "principal": answer.principal,
            "tenant": answer.tenant,
            "idem_key": answer.key,
            "fingerprint": answer.fingerprint,
            "status": answer.status,
            "body": answer.body,
            "headers": answer.headers,
            "created_at": answer.created_at,
            "expires_at": answer.expires_at,
            "now": now,
        }
        async with self._t.write() as tx:
            # An expired answer gives its key back; a live one wins over this one.
            for r in await tx.all("drop_expired_answer", params):
                await usage.count(tx, str(r["tenant"]), "answers", -1)
            if await tx.run("insert_answer", params):
                await usage.bound(tx, answer.tenant, "answers", keep_at_most)
            row = await tx.one("get_answer", params)
        assert row is not None
        return answer_row(row)

    async def forget_answers(self, *, now: float) -> int:
        async with self._t.write() as tx:
            await usage.forget_expired(tx, "event_keys", now=now)  # they expire alike
            return await usage.forget_expired(tx, "answers", now=now)

    async def ledger(self) -> dict[str, int]:
        async with self._t.read() as tx:
            rows = await tx.all("ledger", {})
        return {str(r["key"]): int(r["running"]) for r in rows}

    async def listen_slot_freed(self, on_freed: Callable[[], None]) -> None:
        await self._t.listen_slot_freed(on_freed)


def _check_grants(requests: Sequence[GrantRequest]) -> None:
    if any(r.log is not None and r.log.start_id != r.start_id for r in requests):
        raise ValueError("a grant request's log must be the start it grants")


def _check_finishes(finishes: Sequence[Finish]) -> None:
    if any(f.status is ExecutionStatus.RUNNING for f in finishes):
        raise ValueError("finish_execution needs a final status")


async def _gone(tx: Tx, start_id: str) -> GrantResult:
    """A pick whose start is no longer QUEUED, with the row as it is (None: no such start)."""
    current = await tx.one("get_start", {"start_id": start_id})
    return GrantResult(
        outcome=GrantOutcome.GONE, start=None if current is None else start_row(current)
    )


def _logged_uncapped(requests: Sequence[GrantRequest]) -> bool:
    """Every request logs its start, copies no steps and takes no capped slot; no start is
    asked twice."""
    seen: set[str] = set()
    for r in requests:
        if r.log is None or r.copy_steps is not None or r.start_id in seen:
            return False
        if any(s.cap is not None for s in r.slots):
            return False
        seen.add(r.start_id)
    return True


def _of_start(start: StartRow) -> dict[str, Any]:
    """The fields an execution takes from its start (`hand_over` writes them from the row)."""
    source = start.source_execution_id
    return {
        "workflow": start.workflow,
        "session": start.session,
        "tenant": start.tenant,
        "input": start.input,
        "restarted_from": source if start.kind is StartKind.RESTART else None,
        "resumed_from": source if start.kind is StartKind.RESUME else None,
    }


def _plain_hand_over(finishes: Sequence[Finish], grants: Sequence[GrantRequest]) -> bool:
    """`hand_over` can take the batch: grants of logged starts that copy no steps (and start
    no child), no start asked twice, no execution ended twice."""
    if len({f.execution_id for f in finishes}) != len(finishes):
        return False
    if len({r.start_id for r in grants}) != len(grants):
        return False
    return all(
        r.log is None and r.copy_steps is None and r.execution.parent_id is None for r in grants
    )


def _full(key: str) -> GrantResult:
    return GrantResult(outcome=GrantOutcome.FULL, start=None, full_key=key)


def _full_key(slots: Sequence[Slot], running: Mapping[str, int]) -> str | None:
    """The first key (in key order) whose count is at its cap, or None if every slot fits."""
    full = [s.key for s in slots if s.cap is not None and running.get(s.key, 0) >= s.cap]
    return min(full) if full else None


async def _log_fitting(
    tx: Tx,
    requests: Sequence[GrantRequest],
    hopeful: set[int],
    results: list[GrantResult | None],
    *,
    now: float,
) -> dict[str, tuple[StartRow, bool]]:
    """Log the starts of `requests` that come with their log (they fit at once): a hopeful
    one is written GRANTED already (its mark), the others QUEUED. One whose idempotency key
    was taken gets GONE in `results`, with the start holding the key."""
    logs = [(i, r) for i, r in enumerate(requests) if r.log is not None]
    if not logs:
        return {}
    batch: list[tuple[NewStart, dict[str, Any]]] = []
    for i, req in logs:
        assert req.log is not None
        params = new_start_params(req.log)
        if i in hopeful:
            params.update(execution_id=req.execution.execution_id, decided_at=now)
        batch.append((req.log, params))
    logged = dict(zip((r.start_id for _, r in logs), await _insert_starts(tx, batch), strict=True))
    for i, req in logs:
        row, created = logged[req.start_id]
        if not created:
            results[i] = GrantResult(outcome=GrantOutcome.GONE, start=row)
    return logged


async def log_many(tx: Tx, starts: Sequence[NewStart]) -> list[tuple[StartRow, bool]]:
    """Log starts QUEUED inside `tx`: for each, (its row, True), or (the start holding its
    idempotency key, False)."""
    return await _insert_starts(tx, [(s, new_start_params(s)) for s in starts])


async def _insert_starts(
    tx: Tx, batch: list[tuple[NewStart, dict[str, Any]]]
) -> list[tuple[StartRow, bool]]:
    """Log the starts of `batch` (each with its `new_start_params`): (row, True) for each
    one written, (the start holding its idempotency key, False) for each one whose key was
    taken."""
    if not batch:
        return []
    seqs = await tx.insert("insert_start", [p for _, p in batch], key="start_id")
    return [await _written_or_holder(tx, new, p, written_start(new, p, seqs)) for new, p in batch]


async def _written_or_holder(
    tx: Tx, new: NewStart, params: dict[str, Any], row: StartRow | None
) -> tuple[StartRow, bool]:
    for _ in range(3):
        if row is not None:
            return row, True
        # The key was taken: the start holding it is committed (ON CONFLICT waited for it, or
        # this very batch inserted it).
        holder = await tx.one("get_start_by_key", params)
        if holder is not None:
            return start_row(holder), False
        # The holder gave its key back (refused with `forget_key`) after the INSERT: again.
        seqs = await tx.insert("insert_start", [params], key="start_id")
        row = written_start(new, params, seqs)
    if row is not None:
        return row, True
    # The only unique constraints are start_id (a fresh uuid) and the key.
    raise Conflict(f"start {params['start_id']} already exists")
