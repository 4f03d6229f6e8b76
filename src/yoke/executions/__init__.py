"""Workflow executions: starts, slots, limits, queue order, restarts, runtime changes (the
admission specification, docs/decisions.md).

The entry module is `service` (`Executions`, reached as `app.executions`: the async shell);
`core` is the sans-I/O admission core that decides every start, one `tickets.Ticket` each;
`admission` maps limits to kernel caps and ledger slots; `reading` and `control` are the parts
the shell holds over `state.Shared`; `context` runs workflows and their recorded steps; `model`
holds the values; `workflows` the registry of workflows an app defines. This package imports
the kernel and the store protocol, never a concrete store backend nor the server.

The names below are loaded on first use: defining an app (`@app.workflow`) needs only the
registry, not the engine that runs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from yoke.lazy import lazy_names

_LAZY = {
    **dict.fromkeys(
        (
            "ADMIN",
            "OPERATOR",
            "AuditEntry",
            "Change",
            "Execution",
            "Failure",
            "Limits",
            "Page",
            "Principal",
            "Start",
        ),
        "yoke.executions.model",
    ),
    "ChildFailed": "yoke.executions.context",
    "Retry": "yoke.executions.steps",
    "StepTimeout": "yoke.executions.steps",
    "StepStatus": "yoke.store.records",
    "Context": "yoke.executions.context",
    "Registry": "yoke.executions.workflows",
    "Executions": "yoke.executions.service",
    "ExecutionsStats": "yoke.executions.service",
    "ExecutionStatus": "yoke.store.records",
    "StartKind": "yoke.store.records",
    "StartStatus": "yoke.store.records",
}

if TYPE_CHECKING:
    from yoke.executions.context import ChildFailed, Context
    from yoke.executions.model import (
        ADMIN,
        OPERATOR,
        AuditEntry,
        Change,
        Execution,
        Failure,
        Limits,
        Page,
        Principal,
        Start,
    )
    from yoke.executions.service import Executions, ExecutionsStats
    from yoke.executions.steps import Retry, StepTimeout
    from yoke.executions.workflows import Registry
    from yoke.store.records import ExecutionStatus, StartKind, StartStatus, StepStatus

__all__ = [
    "ADMIN",
    "OPERATOR",
    "AuditEntry",
    "Change",
    "ChildFailed",
    "Context",
    "Execution",
    "ExecutionStatus",
    "Executions",
    "ExecutionsStats",
    "Failure",
    "Limits",
    "Page",
    "Principal",
    "Registry",
    "Retry",
    "Start",
    "StartKind",
    "StartStatus",
    "StepStatus",
    "StepTimeout",
]


__getattr__ = lazy_names(__name__, _LAZY, globals())
