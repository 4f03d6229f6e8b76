"""The shapes of the v1 API: request bodies (validated), answers (as plain dicts) and their schemas.

Requests are pydantic models with `extra="forbid"` and strict types: a string is never taken for
a number, unknown fields are refused, and every text is checked to be storable (no NUL, valid
UTF-8, bounded length) so that no input can reach a database driver and fail there. Answers are
built as dicts by the `*_json` functions (cheap on the hot path); the `*Out` models exist to
describe them in `/openapi.json`, and the tests check answers against those schemas.

This module must never call the scheduler: it only converts between JSON and yoke's values.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, StringConstraints

from yoke.executions import AuditEntry, Execution, Limits, Start
from yoke.store.text import MAX_TEXT, unstorable

INT_MAX = 2**31 - 1


def storable(text: str) -> str:
    """Refuse what a database would refuse later (a pydantic validator: ValueError)."""
    reason = unstorable(text)
    if reason is not None:
        raise ValueError(reason)
    return text


Text = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_TEXT), AfterValidator(storable)
]
Priority = Annotated[int, Strict(), Field(ge=-INT_MAX, le=INT_MAX)]
Count = Annotated[int, Strict(), Field(ge=0, le=INT_MAX)]
# Seconds (a delay) or epoch seconds (a time): a finite number >= 0 (the scheduler bounds it).
Seconds = Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StartIn(_Body):
    workflow: Text
    input: Any = None
    session: Text | None = None
    priority: Priority = 0
    at: Seconds | None = Field(
        default=None, description="start at this time (epoch seconds): 202 SCHEDULED until then"
    )
    delay: Seconds | None = Field(
        default=None, description="start this many seconds from now (not with `at`)"
    )


class SignalIn(_Body):
    payload: Any = None


class PriorityIn(_Body):
    priority: Priority


class RestartIn(_Body):
    from_step: Text | None = None
    priority: Priority = 0


class ResumeIn(_Body):
    priority: Priority = 0


class LimitsIn(_Body):
    """PUT replaces the whole object: a field left out is off (`on_limit` then `queue`)."""

    max_running: Count | None = None
    max_running_per_session: Count | None = None
    max_running_per_workflow: Count | dict[Text, Count] | None = None
    max_queued: Count | None = None
    on_limit: Literal["queue", "reject"] = "queue"

    def to_limits(self) -> Limits:
        return Limits(
            max_running=self.max_running,
            max_running_per_session=self.max_running_per_session,
            max_running_per_workflow=self.max_running_per_workflow,
            max_queued=self.max_queued,
            on_limit=self.on_limit,
        )


# -- answers -------------------------------------------------------------------------------------
StartStatusName = Literal["SCHEDULED", "QUEUED", "GRANTED", "REFUSED", "CANCELLED", "ABORTED"]
ExecutionStatusName = Literal[
    "RUNNING", "WAITING", "SUCCEEDED", "FAILED", "CANCELLED", "ABORTED", "TIMED_OUT"
]
RESUMABLE = ("FAILED", "CANCELLED", "ABORTED", "TIMED_OUT")


class StartOut(BaseModel):
    start_id: str
    status: StartStatusName
    workflow: str
    session: str
    tenant: str = Field(description="whose start it is (a tenant sees only its own)")
    priority: int
    kind: Literal["start", "restart", "resume", "wake"]
    execution_id: str | None
    position: int | None = Field(description="1 = next; only while QUEUED in this server")
    reason: str | None
    source_execution_id: str | None
    created_at: float
    decided_at: float | None
    recovery: int = Field(
        description="automatic recoveries in a row that made it (0: asked by a caller)"
    )
    due_at: float | None = Field(
        default=None, description="a delayed start or a wake-up: when it is (was) due"
    )


def start_json(s: Start) -> dict[str, Any]:
    return {
        "start_id": s.start_id,
        "status": s.status.value,
        "workflow": s.workflow,
        "session": s.session,
        "tenant": s.tenant,
        "priority": s.priority,
        "kind": s.kind.value,
        "execution_id": s.execution_id,
        "position": s.position,
        "reason": s.reason,
        "source_execution_id": s.source_execution_id,
        "created_at": s.created_at,
        "decided_at": s.decided_at,
        "recovery": s.recovery,
        "due_at": s.due_at,
    }


class Links(BaseModel):
    self: str
    restart: str | None
    resume: str | None
    parent: str | None


class ErrorOut(BaseModel):
    type: str | None = Field(description="the exception's class, or Cancelled, Aborted, TimedOut")
    message: str
    traceback: str | None = Field(description="the innermost 16 KiB of the traceback")
    step: str | None = Field(description="the step it came out of (or was running)")
    attempt: int | None = Field(description="that step's attempt, counted across resumes")


class ExecutionOut(BaseModel):
    execution_id: str
    status: ExecutionStatusName
    workflow: str
    session: str
    tenant: str = Field(description="whose execution it is (a tenant sees only its own)")
    input: Any
    output: Any
    error: ErrorOut | None
    start_id: str | None
    parent_id: str | None
    restarted_from: str | None
    resumed_from: str | None
    created_at: float
    finished_at: float | None
    waiting_for: str | None = Field(
        default=None, description="WAITING: the signal it waits for (null: it sleeps)"
    )
    links: Links


def execution_json(e: Execution) -> dict[str, Any]:
    base = f"/v1/executions/{e.execution_id}"
    top = e.parent_id is None
    resumable = top and e.status.value in RESUMABLE
    return {
        "execution_id": e.execution_id,
        "status": e.status.value,
        "workflow": e.workflow,
        "session": e.session,
        "tenant": e.tenant,
        "input": e.input,
        "output": e.output,
        "error": None if e.error is None else e.error.to_json(),
        "start_id": e.start_id,
        "parent_id": e.parent_id,
        "restarted_from": e.restarted_from,
        "resumed_from": e.resumed_from,
        "created_at": e.created_at,
        "finished_at": e.finished_at,
        "waiting_for": e.waiting_for,
        "links": {
            "self": base,
            "restart": f"{base}/restart" if top else None,
            "resume": f"{base}/resume" if resumable else None,
            "parent": f"/v1/executions/{e.parent_id}" if e.parent_id else None,
        },
    }


class ExecutionPageOut(BaseModel):
    items: list[ExecutionOut]
    next_cursor: str | None


class LimitsOut(BaseModel):
    max_running: int | None
    max_running_per_session: int | None
    max_running_per_workflow: int | dict[str, int] | None
    max_queued: int | None
    on_limit: Literal["queue", "reject"]


Weight = Annotated[float, Strict(), Field(ge=0.01, le=1000.0, allow_inf_nan=False)]
Running = Annotated[int, Strict(), Field(ge=1, le=1_000_000)]
Queued = Annotated[int, Strict(), Field(ge=0, le=10_000_000)]
Rate = Annotated[float, Strict(), Field(ge=0.001, le=1_000_000.0, allow_inf_nan=False)]
Burst = Annotated[int, Strict(), Field(ge=1, le=1_000_000)]
Held = Annotated[int, Strict(), Field(ge=0, le=1_000_000_000)]


class _Fields(_Body):
    def given(self) -> dict[str, Any]:
        """The fields the body named (null included: it clears one)."""
        return {name: getattr(self, name) for name in self.model_fields_set}


class TenantExecutionsIn(_Fields):
    max_running: Running | None = Field(None, description="running at once, every server")
    max_queued: Queued | None = Field(None, description="queued at once; past it: 429")
    rate: Rate | None = Field(None, description="starts a second (a token bucket); past it: 429")
    burst: Burst | None = Field(None, description="starts back to back (default: one second's)")


class TenantActorsIn(_Fields):
    max_running: Running | None = Field(None, description="process() calls at once, fleet-wide")
    append_rate: Rate | None = Field(None, description="events appended a second; past it: 429")
    append_burst: Burst | None = Field(None, description="events back to back")
    max_instances: Held | None = Field(None, description="actor instances it may hold")
    max_timers: Held | None = Field(None, description="pending timers it may hold")


class TenantIn(_Body):
    """PUT changes the fields given (also inside `executions` and `actors`); null clears one
    (the tenant then follows `*`, the defaults, or has no limit)."""

    weight: Weight | None = None
    executions: TenantExecutionsIn | None = None
    actors: TenantActorsIn | None = None


class TenantExecutionsOut(BaseModel):
    max_running: int | None
    max_queued: int | None
    rate: float | None
    burst: int | None


class TenantActorsOut(BaseModel):
    max_running: int | None
    append_rate: float | None
    append_burst: int | None
    max_instances: int | None
    max_timers: int | None


class TenantValuesOut(BaseModel):
    weight: float | None
    executions: TenantExecutionsOut
    actors: TenantActorsOut


class TenantOut(TenantValuesOut):
    tenant: str = Field(description="`*`: the defaults of every tenant without a value of its own")
    updated_by: str | None
    updated_at: float | None
    effective: TenantValuesOut | None = Field(
        description="what applies to the tenant: its own values, else those of `*`"
    )


class TenantListOut(BaseModel):
    items: list[TenantOut]


class AuditOut(BaseModel):
    seq: int
    kind: str
    principal: str
    tenant: str | None
    roles: list[str]
    subject: str | None
    before: Any
    after: Any
    at: float


def audit_json(a: AuditEntry) -> dict[str, Any]:
    return {
        "seq": a.seq,
        "kind": a.kind,
        "principal": a.principal,
        "tenant": a.tenant,
        "roles": list(a.roles),
        "subject": a.subject,
        "before": a.before,
        "after": a.after,
        "at": a.at,
    }


class AuditPageOut(BaseModel):
    items: list[AuditOut]


class FixOut(BaseModel):
    action: Literal["raise_limit", "set_priority"]
    call: str
    role: str
    limit: str | None = None
    to: int | None = None
    priority: int | None = None


class WhyOut(BaseModel):
    start_id: str
    status: StartStatusName
    waiting: bool
    blocked_by: str | None = Field(
        description="the limit that holds it: max_running, max_running_per_session, "
        "max_running_per_workflow, or its tenant's executions.max_running"
    )
    limit: int | None
    running: int | None
    ahead: int | None = Field(description="queued starts that go before it")
    ahead_higher: int | None = Field(
        default=None, description="how many of those ahead have a higher priority"
    )
    eta_seconds: float | None = Field(
        default=None, description="when the starts ahead will have gone, at the recent rate"
    )
    fixes: list[FixOut] = Field(
        default_factory=list, description="changes that would let it go sooner (by role)"
    )
    explanation: str


class PickOut(BaseModel):
    start_id: str
    session: str
    workflow: str
    priority: int


class SessionOut(BaseModel):
    session: str
    running: int
    queued: int


class OthersOut(BaseModel):
    running: int
    queued: int


class SchedulerOut(BaseModel):
    running: int
    queued: int
    max_running: int | None
    slots_free: int | None
    ledger: dict[str, int]
    sessions: list[SessionOut]
    others: OthersOut | None = Field(
        description="to a tenant: every other tenant's sessions as one sum, without names"
    )
    next_picks: list[PickOut]
    fairness: float
    shutting_down: bool


class EventOut(BaseModel):
    stream: str
    tenant: str
    event_id: int


class Problem(BaseModel):
    type: str
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None


class ScheduleIn(_Body):
    """PUT makes or replaces the schedule: exactly one of `cron` (five fields, in `timezone`)
    and `every` (seconds); ticks missed while no server ran: `catch_up` one (one start for
    them all) or skip (none)."""

    workflow: Text
    input: Any = None
    session: Text | None = None
    cron: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    every: Annotated[float, Strict(), Field(ge=1, le=366 * 86400)] | None = None
    timezone: Annotated[str, StringConstraints(min_length=1, max_length=64)] = "UTC"
    catch_up: Literal["one", "skip"] = "one"


class ScheduleOut(BaseModel):
    tenant: str
    name: str
    workflow: str
    input: Any
    session: str
    cron: str | None
    every: float | None
    timezone: str
    catch_up: str
    updated_by: str
    updated_at: float
    next_at: float = Field(description="the next tick due (epoch seconds)")
    last_tick_at: float | None = Field(description="the last tick started (its due time)")
    last_fired_at: float | None = Field(description="when the last tick was started")
    last_start_id: str | None
    last_outcome: str | None = Field(description="the last start's status, or why refused")
    fired: int = Field(description="ticks started")
    missed: int = Field(description="ticks missed or skipped while no server ran")


class ScheduleListOut(BaseModel):
    items: list[ScheduleOut]
