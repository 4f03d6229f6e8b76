"""Workflow executions: starts, slots, limits, queue order, restarts, runtime changes (the
admission specification, docs/decisions.md).

The entry module is `service` (`Executions`, reached as `app.executions`: the async shell);
`core` is the sans-I/O admission core that decides every start, one `tickets.Ticket` each;
`admission` maps limits to kernel caps and ledger slots; `reading` and `control` are the parts
the shell holds over `state.Shared`; `context` runs workflows and their recorded steps; `model`
holds the values. This package imports the kernel and the store protocol, never a
concrete store backend nor the server.
"""

from __future__ import annotations

from yoke.executions.context import ChildFailed, Context, Registry
from yoke.executions.model import (
    ADMIN,
    OPERATOR,
    AuditEntry,
    Change,
    Execution,
    Limits,
    Page,
    Principal,
    Start,
)
from yoke.executions.service import Executions, ExecutionsStats
from yoke.store.records import ExecutionStatus, StartKind, StartStatus

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
    "Limits",
    "Page",
    "Principal",
    "Registry",
    "Start",
    "StartKind",
    "StartStatus",
]
