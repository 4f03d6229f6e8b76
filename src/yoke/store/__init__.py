"""Durable state of yoke: one `Store` protocol in domain verbs and the records it speaks in.

The concrete backends live in `yoke.store.sqlite` and `yoke.store.postgres`; only `yoke.app`
names them. This package must never import `executions`, `actors` or `server`.

The names below are loaded on first use: an executor process imports a record module of this
package (`actor_records`, `text`) and must not pay for the whole protocol with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from yoke.lazy import lazy_names

if TYPE_CHECKING:
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
        Pruned,
        Recovery,
        RequestRow,
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
    "Pruned",
    "Recovery",
    "RequestRow",
    "Resume",
    "Slot",
    "StartKind",
    "StartRow",
    "StartStatus",
    "StepCopy",
    "StepRecord",
    "StepRow",
    "StepStatus",
    "Store",
]

_LAZY = {
    name: "yoke.store.protocol" if name == "Store" else "yoke.store.records" for name in __all__
}


__getattr__ = lazy_names(__name__, _LAZY, globals())
