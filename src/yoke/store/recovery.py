"""What `recover_dead` does with one dead instance, inside the transaction that declared it dead.

That transaction locked the instance's row first (`declare_dead`), so exactly one recoverer
gets here for each dead instance, however many race; everything below is decided once. The
instance's RUNNING executions are locked (in id order, as a finish batch locks them) and
ended: CANCELLED if a cancel was asked of them, else ABORTED with the reason. Under a `Resume`
rule, each top-level execution whose start was made by fewer than `max_recoveries` automatic
recoveries in a row is resumed: a RESUME start, QUEUED and owned by the recovering instance,
made in this same transaction, so a recovery is never lost nor made twice; its `recovery`
counts one more than its source's. The dead instance's QUEUED starts become the recovering
instance's (with no rule they are ABORTED, as before recovery existed). The recovering
instance admits what it was given (`Recovery.adopted`) through its queue like any start; if
it dies before, those starts are QUEUED under a dead instance, and the next recovery adopts
them in turn.

The reasons are written as the executions' error: a JSON object {type, message, traceback,
step, attempt}, as every error of an execution is. This module must never read a clock or
decide more than the rule it is given.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field, replace

from yoke.store.records import ExecutionStatus, NewStart, Resume, StartKind, StartRow
from yoke.store.rows import keys_of, new_start_params, start_row, written_start
from yoke.store.tx import Tx


def failure_text(kind: str, message: str) -> str:
    """An execution's error as JSON text, for an end the store decides (no traceback)."""
    return json.dumps(
        {"type": kind, "message": message, "traceback": None, "step": None, "attempt": None}
    )


@dataclass
class DeadEnd:
    """What ending one dead instance did (summed over the instances by `recover_dead`)."""

    ended: list[str] = field(default_factory=list)
    aborted_starts: list[str] = field(default_factory=list)
    adopted: list[StartRow] = field(default_factory=list)
    resumes: list[StartRow] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    freed: Counter[str] = field(default_factory=Counter)


async def end_dead_instance(
    tx: Tx, instance_id: str, out: DeadEnd, *, to: str, now: float, resume: Resume | None
) -> None:
    running = await tx.all("running_of_instance", {"instance_id": instance_id})
    asked = {
        str(r["execution_id"])
        for r in await tx.all("cancels_asked_of_instance", {"instance_id": instance_id})
    }
    for r in running:
        execution_id = str(r["execution_id"])
        out.ended.append(execution_id)
        out.freed.update(keys_of(r["slot_keys"]))
        status, kind = ExecutionStatus.ABORTED, "Aborted"
        message = f"instance {instance_id} died while it ran"
        if execution_id in asked:
            status, kind = ExecutionStatus.CANCELLED, "Cancelled"
            message = f"cancelled; instance {instance_id} died before it stopped"
            out.cancelled.append(execution_id)
        elif resume is None:
            message += "; recover it by hand (YOKE_RECOVERY=abort)"
        elif r["parent_id"] is not None:
            message += "; a child workflow: its parent's recovery runs it again"
        elif r["start_id"] is not None:
            message += await _resume(tx, str(r["start_id"]), execution_id, out, to, now, resume)
        await tx.run(
            "end_dead_execution",
            {
                "execution_id": execution_id,
                "status": status.value,
                "error": failure_text(kind, message),
                "now": now,
            },
        )
    await tx.run("handle_requests_of_instance", {"instance_id": instance_id, "now": now})
    if resume is None:
        for r in await tx.all(
            "abort_starts_of_instance",
            {
                "instance_id": instance_id,
                "now": now,
                "reason": f"instance {instance_id} died while it was queued",
            },
        ):
            out.aborted_starts.append(str(r["start_id"]))
        return
    rows = await tx.all("adopt_starts_of_instance", {"instance_id": instance_id, "to": to})
    out.adopted += sorted((start_row(r) for r in rows), key=lambda s: s.seq)


async def _resume(
    tx: Tx, start_id: str, execution_id: str, out: DeadEnd, to: str, now: float, rule: Resume
) -> str:
    """Resume the execution by a QUEUED start of `to`, unless its chain of automatic
    recoveries is at the rule's most; the reason to append to its error either way."""
    row = await tx.one("get_start", {"start_id": start_id})
    if row is None:  # its start was pruned: a caller's, so no recovery counted yet
        made_by = 0
        source = None
    else:
        source = start_row(row)
        made_by = source.recovery
    if made_by >= rule.max_recoveries:
        return (
            f"; not recovered: {made_by} automatic recoveries in a row already "
            f"(YOKE_RECOVERY_MAX={rule.max_recoveries})"
        )
    ex = await tx.one("get_execution", {"execution_id": execution_id})
    assert ex is not None  # locked by running_of_instance
    new = NewStart(
        start_id=rule.new_id(),
        kind=StartKind.RESUME,
        workflow=str(ex["workflow"]),
        session=str(ex["session"]),
        tenant=str(ex["tenant"]),
        priority=0 if source is None else source.priority,
        input=str(ex["input"]),
        fingerprint="",
        principal=None,
        idempotency_key=None,
        source_execution_id=execution_id,
        from_step=None,
        instance_id=to,
        created_at=now,
    )
    params = new_start_params(new)
    written = written_start(new, params, await tx.insert("insert_start", [params], key="start_id"))
    assert written is not None  # no idempotency key, a fresh id: nothing to conflict with
    await tx.run("set_start_recovery", {"start_id": new.start_id, "recovery": made_by + 1})
    out.resumes.append(replace(written, recovery=made_by + 1))
    out.recovered.append(execution_id)
    return f"; recovered by start {new.start_id} (automatic recovery {made_by + 1})"
