"""How the execution records map to query parameters and back: one place for the columns.

The verbs (`execverbs`) build a statement's parameters from the records they are given
(`new_start_params`, `new_execution_params`, `control_params`) and turn the rows a statement
returns into records (`start_row`, `execution_row`, `control_row`, `answer_row`); a row a
statement wrote but did not read back is rebuilt from its parameters (`written_start`,
`written_execution`). This module must never run a query.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from yoke.errors import Conflict
from yoke.store.records import (
    AnswerRow,
    ControlRow,
    ExecutionRow,
    ExecutionStatus,
    NewControl,
    NewExecution,
    NewStart,
    StartKind,
    StartRow,
    StartStatus,
    StepRecord,
)
from yoke.store.tx import Row


def opt(value: Any) -> str | None:
    return None if value is None else str(value)


def keys_of(raw: Any) -> tuple[str, ...]:
    return () if raw is None else _decoded_keys(raw)


@functools.lru_cache(maxsize=4096)
def _decoded_keys(raw: str) -> tuple[str, ...]:
    # The same few key lists (global, session, workflow) come back on every finish: decoded
    # once each. Bounded, since sessions are the callers' to name.
    return tuple(str(k) for k in json.loads(raw))


@functools.lru_cache(maxsize=4096)
def encoded_keys(keys: tuple[str, ...]) -> str:
    return json.dumps(sorted(keys))


def start_row(r: Row) -> StartRow:
    return StartRow(
        seq=int(r["seq"]),
        start_id=str(r["start_id"]),
        kind=StartKind(r["kind"]),
        workflow=str(r["workflow"]),
        session=str(r["session"]),
        tenant=str(r["tenant"]),
        priority=int(r["priority"]),
        input=str(r["input"]),
        fingerprint=str(r["fingerprint"]),
        principal=opt(r["principal"]),
        idempotency_key=opt(r["idempotency_key"]),
        source_execution_id=opt(r["source_execution_id"]),
        from_step=opt(r["from_step"]),
        status=StartStatus(r["status"]),
        execution_id=opt(r["execution_id"]),
        reason=opt(r["reason"]),
        instance_id=str(r["instance_id"]),
        created_at=float(r["created_at"]),
        decided_at=None if r["decided_at"] is None else float(r["decided_at"]),
        recovery=int(r["recovery"]),
        due_at_ms=None if r["due_at_ms"] is None else int(r["due_at_ms"]),
    )


def new_start_params(s: NewStart) -> dict[str, Any]:
    return {
        "start_id": s.start_id,
        "kind": s.kind.value,
        "workflow": s.workflow,
        "session": s.session,
        "tenant": s.tenant,
        "priority": s.priority,
        "input": s.input,
        "fingerprint": s.fingerprint,
        "principal": s.principal,
        "idem_scope": s.principal or "",
        "idempotency_key": s.idempotency_key,
        "source_execution_id": s.source_execution_id,
        "from_step": s.from_step,
        "instance_id": s.instance_id,
        "created_at": s.created_at,
        "execution_id": None,  # logged QUEUED; a grant batch may log it GRANTED
        "decided_at": None,
    }


def written_start(
    new: NewStart, params: Mapping[str, Any], seqs: Mapping[Any, int]
) -> StartRow | None:
    """The row `insert_start` wrote for `new` from `params`, or None if it was skipped."""
    seq = seqs.get(new.start_id)
    if seq is None:
        return None
    return new.logged(seq=seq, execution_id=params["execution_id"], decided_at=params["decided_at"])


def granted_execution(
    e: NewExecution,
    seqs: Mapping[Any, int],
    slot_keys: tuple[str, ...],
    *,
    created_at: float,
) -> ExecutionRow:
    """The row a one-statement grant wrote for `e` (its seq in `seqs`), created at the grant."""
    seq = seqs.get(e.execution_id)
    if seq is None:  # the only unique key is the execution id, a fresh uuid
        raise Conflict(f"execution {e.execution_id} already exists")
    return ExecutionRow(
        seq=seq,
        execution_id=e.execution_id,
        start_id=e.start_id,
        workflow=e.workflow,
        session=e.session,
        tenant=e.tenant,
        input=e.input,
        status=ExecutionStatus.RUNNING,
        output=None,
        error=None,
        parent_id=e.parent_id,
        restarted_from=e.restarted_from,
        resumed_from=e.resumed_from,
        slot_keys=slot_keys,
        instance_id=e.instance_id,
        created_at=created_at,
        finished_at=None,
    )


def written_execution(params: Mapping[str, Any], seqs: Mapping[Any, int]) -> ExecutionRow:
    """The row `insert_execution` wrote from `params` (`new_execution_params`)."""
    seq = seqs.get(params["execution_id"])
    if seq is None:  # the only unique key is the execution id, a fresh uuid
        raise Conflict(f"execution {params['execution_id']} already exists")
    return ExecutionRow(
        seq=seq,
        execution_id=params["execution_id"],
        start_id=params["start_id"],
        workflow=params["workflow"],
        session=params["session"],
        tenant=params["tenant"],
        input=params["input"],
        status=ExecutionStatus.RUNNING,
        output=None,
        error=None,
        parent_id=params["parent_id"],
        restarted_from=params["restarted_from"],
        resumed_from=params["resumed_from"],
        slot_keys=keys_of(params["slot_keys"]),
        instance_id=params["instance_id"],
        created_at=params["created_at"],
        finished_at=None,
    )


def new_execution_params(e: NewExecution, slot_keys: str | None) -> dict[str, Any]:
    return {
        "execution_id": e.execution_id,
        "start_id": e.start_id,
        "workflow": e.workflow,
        "session": e.session,
        "tenant": e.tenant,
        "input": e.input,
        "parent_id": e.parent_id,
        "restarted_from": e.restarted_from,
        "resumed_from": e.resumed_from,
        "slot_keys": slot_keys,
        "instance_id": e.instance_id,
        "created_at": e.created_at,
        "leader_epoch": None,  # the verb sets the fence's epoch on a fenced grant
    }


def execution_row(r: Row) -> ExecutionRow:
    return ExecutionRow(
        seq=int(r["seq"]),
        execution_id=str(r["execution_id"]),
        start_id=opt(r["start_id"]),
        workflow=str(r["workflow"]),
        session=str(r["session"]),
        tenant=str(r["tenant"]),
        input=str(r["input"]),
        status=ExecutionStatus(r["status"]),
        output=opt(r["output"]),
        error=opt(r["error"]),
        parent_id=opt(r["parent_id"]),
        restarted_from=opt(r["restarted_from"]),
        resumed_from=opt(r["resumed_from"]),
        slot_keys=keys_of(r["slot_keys"]),
        instance_id=str(r["instance_id"]),
        created_at=float(r["created_at"]),
        finished_at=None if r["finished_at"] is None else float(r["finished_at"]),
        waiting_for=opt(r["waiting_for"]),
    )


def control_params(c: NewControl) -> dict[str, Any]:
    return {
        "kind": c.kind,
        "principal": c.principal,
        "tenant": c.tenant,
        "roles": json.dumps(list(c.roles)),
        "subject": c.subject,
        "before": c.before,
        "after": c.after,
        "now": c.at,
    }


def control_row(r: Row) -> ControlRow:
    return ControlRow(
        seq=int(r["seq"]),
        kind=str(r["kind"]),
        principal=str(r["principal"]),
        tenant=opt(r["tenant"]),
        roles=tuple(json.loads(r["roles"])),
        subject=opt(r["subject"]),
        before=opt(r["before"]),
        after=opt(r["after"]),
        at=float(r["at"]),
    )


def answer_row(r: Row) -> AnswerRow:
    return AnswerRow(
        principal=r["principal"],
        tenant=r["tenant"],
        key=r["idem_key"],
        fingerprint=r["fingerprint"],
        status=int(r["status"]),
        body=r["body"],
        headers=r["headers"],
        created_at=float(r["created_at"]),
        expires_at=float(r["expires_at"]),
    )


def step_params(r: StepRecord, now: float) -> dict[str, object]:
    """A step's record as the step queries take it (`record_step`, `write_steps`)."""
    return {
        "execution_id": r.execution_id,
        "position": r.position,
        "name": r.name,
        "result": r.result,
        "status": r.status.value,
        "error": r.error,
        "attempts": r.attempts,
        "first_attempt": r.first_attempt,
        "retry_at": r.retry_at,
        "now": now,
    }
