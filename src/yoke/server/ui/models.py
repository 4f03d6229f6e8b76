"""The JSON shapes of the dashboard's `/v1` twins, for the OpenAPI document (and so for the
schema checks the test suite runs against real answers). This module must never serve."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from yoke.server.models import AuditOut, ErrorOut, ExecutionOut, LimitsOut


class OverviewOut(BaseModel):
    principal: str
    tenant: str | None
    roles: list[str]
    slots_used: int = Field(description="slots taken across every server process (the ledger)")
    slots_total: int | None = Field(description="max_running; null when unlimited")
    running: int
    queued: int
    refused_last_minute: int | None = Field(description="429 and 503 answers (operators)")
    starts_per_second: float = Field(description="grants per second over the last 10 s")
    workers_live: int | None
    executors_live: int | None
    executor_mode: str
    oldest_wait_seconds: float | None
    shutting_down: bool


class QueueItemOut(BaseModel):
    pick: int | None = Field(description="predicted pick order, 1 = next; null when held")
    position: int | None
    start_id: str
    session: str
    workflow: str
    priority: int
    age_seconds: float
    blocked_by: str | None
    why: str


class QueueLimitsOut(LimitsOut):
    set_by: str | None = Field(description="who set the limits in force (null: configuration)")
    set_at: float | None


class ScheduledStartOut(BaseModel):
    start_id: str
    tenant: str
    session: str
    workflow: str
    priority: int
    due_at: float | None = Field(description="when it joins the queue (epoch seconds)")


class AdmissionOut(BaseModel):
    queued: int | None
    shown: int
    query: str | None
    items: list[QueueItemOut]
    scheduled: list[ScheduledStartOut] = Field(
        description="delayed starts (`at`, `delay`) not yet due, soonest first; a plain "
        "tenant sees its own"
    )
    limits: QueueLimitsOut
    slots_used: int


class FairnessItemOut(BaseModel):
    session: str
    weight: float
    queued: int
    running: int
    starts: int
    share_starts: float
    share_running: float | None = Field(
        description="its share of the running executions here (OPERATOR or ADMIN)"
    )
    target_share: float | None = Field(
        description="its tenant's weighted share of the slots, split between the tenant's"
        " sessions with work (OPERATOR or ADMIN)"
    )
    wait_p50: float | None
    wait_p99: float | None
    starving: bool = Field(description="queued, and no start in the window while others had")


class RefusedOut(BaseModel):
    rate: int = Field(description="refused by the tenant's executions.rate")
    queue_bound: int = Field(description="refused by the tenant's executions.max_queued")
    limit: int = Field(description="refused by the limits (on_limit=reject, max_queued)")


class FairnessTenantOut(BaseModel):
    tenant: str
    weight: float
    queued: int
    running: int
    share_running: float | None = Field(
        description="its share of the running executions here (OPERATOR or ADMIN)"
    )
    target_share: float | None = Field(
        description="weight / sum of the weights of tenants with work (OPERATOR or ADMIN)"
    )
    starts: int = Field(description="granted in the window")
    refused_last_minute: RefusedOut


class FoldedOut(BaseModel):
    tenant: str
    starts: int
    wait_p50: float | None
    wait_p99: float | None


class ActorTenantOut(BaseModel):
    tenant: str = Field(description="a tenant, or _other: the rest summed")
    weight: float
    processed: int
    backlog: int = Field(description="events this worker holds and has not started")
    oldest_pending: float | None = Field(description="seconds since the oldest was appended")
    recent_share: float = Field(description="its part of this worker's last 1,000 starts")
    wait_p50: float | None = Field(description="append -> first start, a bucket's upper bound")
    wait_p99: float | None


class ActorFairnessOut(BaseModel):
    jain: float | None = Field(description="over the backlogged tenants (OPERATOR or ADMIN)")
    items: list[ActorTenantOut]


class FairnessOut(BaseModel):
    window_seconds: int
    jain_tenants: float | None = Field(
        description="Jain's index over the tenants with work, of running per weight"
        " (OPERATOR or ADMIN)"
    )
    tenants: list[FairnessTenantOut] = Field(
        description="tenants first, most under-served first (a tenant sees only its own)"
    )
    jain: float
    sessions_with_work: int | None
    starts: int
    running: int
    query: str | None
    items: list[FairnessItemOut]
    folded: list[FoldedOut] = Field(
        description="per tenant: its sessions beyond those the dashboard names each second, "
        "summed (a tenant sees only its own)"
    )
    actors: ActorFairnessOut | None = Field(
        description="this process's actor worker, per tenant (a tenant sees its own)"
    )


class SeriesOut(BaseModel):
    seconds: int
    t: list[float]
    sessions: list[str]
    starts: list[float]
    refused: list[float] | None
    jain: list[float | None] | None
    waits: dict[str, list[float | None]]


class StepOut(BaseModel):
    position: int
    name: str
    status: Literal["SUCCEEDED", "RETRYING", "FAILED"] = Field(
        description="RETRYING: an attempt failed and the next is due at retry_at"
    )
    result: Any = None
    attempts: int = Field(description="attempts made, counted across resumes and recoveries")
    error: ErrorOut | None = Field(description="the last failed attempt's error")
    retry_at: float | None
    recorded_at: float


class LineageOut(BaseModel):
    execution_id: str
    status: str


class LinkOut(BaseModel):
    execution_id: str
    status: str
    workflow: str


class RerunOut(LinkOut):
    kind: Literal["restart", "resume"]


class ExecutionDetailOut(ExecutionOut):
    children: list[LinkOut] = Field(description="child workflows it started (first 50)")
    reruns: list[RerunOut] = Field(description="executions restarted or resumed from it")
    steps: list[StepOut]
    next_cursor: str | None = Field(description="pass as cursor for the next page of steps")
    lineage: list[LineageOut]


class TimerOut(BaseModel):
    timer_id: int
    tenant: str
    stream: str
    fire_at: float
    due_in_seconds: float
    data: Any = None


class TimerListOut(BaseModel):
    items: list[TimerOut]


class AuditRecentOut(BaseModel):
    items: list[AuditOut]
    next_before: int | None


MODELS: list[type[BaseModel]] = [
    OverviewOut,
    AdmissionOut,
    FairnessOut,
    SeriesOut,
    ExecutionDetailOut,
    TimerListOut,
    AuditRecentOut,
]
