"""yoke.actors: actors drained from per-instance queues, timers, and workers (the actors
specification, docs/decisions.md).

`@app.actor(subscribe=[...], key="field", queue=yoke.Queue(...))` on `async def process(ctx,
event)`; `await app.append(stream, data)` fans an event out to the subscribed instances;
`QueueDrainScheduler` drains the instances this worker owns, `TimerDispatch` fires due
`scheduled_events`, `WorkerHeartbeat` keeps ownership, and with `executors="process"`
`RuntimeLifecycleService` starts and stops the per-tenant executor processes that run
`process()` (`actors/executor/`). Where to look: the pick is in `drain`, fan-out in
`definitions.ActorRegistry.route`, how a call is run in `runner`, the store verbs in
`yoke/store/actorverbs.py`, SQL (claim, complete, takeover...) in the "actors" section of
`yoke/store/sql/<dialect>/queries.sql`.

The names below are loaded on first use: an executor process imports only what it runs (the
definitions and `ctx`), not the worker's services. This package never imports `server` or
`executions`, and never names a store backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from yoke.lazy import lazy_names

_LAZY = {
    "ActorCtx": "yoke.actors.ctx",
    "Fenced": "yoke.actors.ctx",
    "StateHandle": "yoke.actors.ctx",
    "ActorDef": "yoke.actors.definitions",
    "ActorRegistry": "yoke.actors.definitions",
    "Backoff": "yoke.actors.definitions",
    "Event": "yoke.actors.definitions",
    "Queue": "yoke.actors.definitions",
    "DrainConfig": "yoke.actors.drain_parts",
    "DrainStats": "yoke.actors.drain_parts",
    "QueueDrainScheduler": "yoke.actors.drain",
    "ActorInspector": "yoke.actors.inspection",
    "InstanceView": "yoke.actors.inspection",
    "WorkerStatus": "yoke.actors.inspection",
    "ActorMetrics": "yoke.actors.metrics",
    "ActorStore": "yoke.actors.protocol",
    "ActorRuntime": "yoke.actors.runtime",
    "ActorSettings": "yoke.actors.settings",
    "TimerDispatch": "yoke.actors.timers",
    "WorkerHeartbeat": "yoke.actors.workers",
    "RuntimeLifecycleService": "yoke.actors.lifecycle.service",
    "PortalCtx": "yoke.actors.portals",
}
# The actors specification: "Legacy names TenantSchedulerService and ActorScheduler remain
# as type aliases."
_ALIASES = {
    "ActorScheduler": "QueueDrainScheduler",
    "TenantSchedulerService": "RuntimeLifecycleService",
    "timer_dispatch": "TimerDispatch",
}

__all__ = [
    "ActorCtx",
    "ActorDef",
    "ActorInspector",
    "ActorMetrics",
    "ActorRegistry",
    "ActorRuntime",
    "ActorScheduler",
    "ActorSettings",
    "ActorStore",
    "Backoff",
    "DrainConfig",
    "DrainStats",
    "Event",
    "Fenced",
    "InstanceView",
    "PortalCtx",
    "Queue",
    "QueueDrainScheduler",
    "RuntimeLifecycleService",
    "StateHandle",
    "TenantSchedulerService",
    "TimerDispatch",
    "WorkerHeartbeat",
    "WorkerStatus",
    "timer_dispatch",
]

if TYPE_CHECKING:
    from yoke.actors.ctx import ActorCtx, Fenced, StateHandle
    from yoke.actors.definitions import ActorDef, ActorRegistry, Backoff, Event, Queue
    from yoke.actors.drain import QueueDrainScheduler
    from yoke.actors.drain_parts import DrainConfig, DrainStats
    from yoke.actors.inspection import ActorInspector, InstanceView, WorkerStatus
    from yoke.actors.lifecycle.service import RuntimeLifecycleService
    from yoke.actors.metrics import ActorMetrics
    from yoke.actors.portals import PortalCtx
    from yoke.actors.protocol import ActorStore
    from yoke.actors.runtime import ActorRuntime
    from yoke.actors.settings import ActorSettings
    from yoke.actors.timers import TimerDispatch
    from yoke.actors.workers import WorkerHeartbeat

    ActorScheduler = QueueDrainScheduler
    TenantSchedulerService = RuntimeLifecycleService
    timer_dispatch = TimerDispatch


__getattr__ = lazy_names(__name__, _LAZY, globals(), aliases=_ALIASES)
