"""Durable state of yoke: one `Store` protocol in domain verbs and the records it speaks in.

The concrete backends live in `yoke.store.sqlite` and `yoke.store.postgres`; only `yoke.app`
names them. This package must never import `executions`, `actors` or `server`.
"""

from __future__ import annotations

from yoke.store.protocol import Store
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
    Slot,
    StartKind,
    StartRow,
    StartStatus,
    StepCopy,
    StepRow,
)

__all__ = [
    "AnswerRow",
    "ControlRow",
    "ExecutionRow",
    "ExecutionStatus",
    "Finish",
    "GrantOutcome",
    "GrantRequest",
    "GrantResult",
    "NewControl",
    "NewExecution",
    "NewStart",
    "Recovery",
    "Slot",
    "StartKind",
    "StartRow",
    "StartStatus",
    "StepCopy",
    "StepRow",
    "Store",
]
