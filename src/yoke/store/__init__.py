"""Durable state of yoke: one `Store` protocol in domain verbs and the records it speaks in.

The concrete backends live in `yoke.store.sqlite` and `yoke.store.postgres`; only `yoke.app`
names them. This package must never import `executions`, `actors` or `server`.

The names below are loaded on first use: an executor process imports a record module of this
package (`actor_records`, `text`) and must not pay for the whole protocol with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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

_RECORDS = frozenset(__all__) - {"Store"}


def __getattr__(name: str) -> Any:
    if name == "Store":
        module = "yoke.store.protocol"
    elif name in _RECORDS:
        module = "yoke.store.records"
    else:
        raise AttributeError(f"module 'yoke.store' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
