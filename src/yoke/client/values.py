"""What the client returns beside yoke's own values: the answers of the v1 routes of starts,
executions, control, events and HA that have no value type in `yoke.executions`.

Starts, executions, pages, limits and audit entries are yoke's own (`Start`, `Execution`,
`Page`, `Limits`, `AuditEntry`); the rest are frozen, keyword-only dataclasses named after what
they hold, with the fields of the server's answer (a test keeps them equal to the answer
schemas of `/openapi.json`). This module must never do I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from yoke.client.decode import flat
from yoke.executions import AuditEntry, Execution, Failure, StartStatus


@dataclass(frozen=True, kw_only=True, slots=True)
class Fix:
    """A change that would let a waiting start go sooner, and the role it needs."""

    action: str
    call: str
    role: str
    limit: str | None = None
    to: int | None = None
    priority: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Why:
    """Why a start waits: the limit that holds it, how many go first, an ETA."""

    start_id: str
    status: StartStatus
    waiting: bool
    blocked_by: str | None
    limit: int | None
    running: int | None
    ahead: int | None
    ahead_higher: int | None = None
    eta_seconds: float | None = None
    fixes: tuple[Fix, ...] = ()
    explanation: str


@dataclass(frozen=True, kw_only=True, slots=True)
class TenantExecutions:
    max_running: int | None
    max_queued: int | None
    rate: float | None
    burst: int | None


@dataclass(frozen=True, kw_only=True, slots=True)
class TenantActors:
    max_running: int | None
    append_rate: float | None
    append_burst: int | None
    max_instances: int | None
    max_timers: int | None


@dataclass(frozen=True, kw_only=True, slots=True)
class TenantValues:
    weight: float | None
    executions: TenantExecutions
    actors: TenantActors


@dataclass(frozen=True, kw_only=True, slots=True)
class Tenant:
    """A tenant's settings (`*`: the defaults of every tenant without a value of its own):
    its own values (None: not set), and `effective`, what applies to it."""

    tenant: str
    weight: float | None
    executions: TenantExecutions
    actors: TenantActors
    updated_by: str | None
    updated_at: float | None
    effective: TenantValues | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Appended:
    """An event stored: its stream, the tenant it went to and its id."""

    stream: str
    tenant: str
    event_id: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Leader:
    holder: str
    epoch: int
    since: float
    expires_at: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Ha:
    """This server's role in a high-availability pair (`solo` without `--ha`)."""

    enabled: bool
    role: str
    holder: str
    epoch: int | None
    leader: Leader | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    position: int
    name: str
    result: Any = None
    recorded_at: float
    status: str = "SUCCEEDED"  # or RETRYING, FAILED
    attempts: int = 1
    error: Failure | None = None
    retry_at: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Link:
    """Another execution, named by id, status and workflow."""

    execution_id: str
    status: str
    workflow: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Rerun:
    execution_id: str
    status: str
    workflow: str
    kind: str  # restart or resume


@dataclass(frozen=True, kw_only=True, slots=True)
class Lineage:
    execution_id: str
    status: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutionSteps:
    """An execution with a page of its recorded steps (`next_cursor` for the next page), its
    child workflows, the executions restarted or resumed from it, and those it came from."""

    execution: Execution
    steps: tuple[Step, ...]
    next_cursor: str | None
    children: tuple[Link, ...]
    reruns: tuple[Rerun, ...]
    lineage: tuple[Lineage, ...]

    @classmethod
    def from_json(cls, data: Any) -> ExecutionSteps:
        return flat(cls, data, "execution", Execution)


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditPage:
    """Control-log entries, newest first; `next_before` asks for the page before."""

    items: tuple[AuditEntry, ...]
    next_before: int | None
