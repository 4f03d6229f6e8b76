"""yoke.actors: actors drained from per-instance queues, timers, and workers (the actors
specification, docs/decisions.md).

`@app.actor(subscribe=[...], key="field", queue=yoke.Queue(...))` on `async def process(ctx,
event)`; `await app.append(stream, data)` fans an event out to the subscribed instances;
`QueueDrainScheduler` drains the instances this worker owns, `TimerDispatch` fires due
`scheduled_events`, `WorkerHeartbeat` keeps ownership. Where to look: the pick is in `drain`,
fan-out in `definitions.ActorRegistry.route`, the store verbs in `yoke/store/actorverbs.py`, SQL
(claim, complete, takeover...) in the "actors" section of `yoke/store/sql/<dialect>/queries.sql`.
This package never imports `server` or `executions`, and never names a store backend.
"""

from __future__ import annotations

from yoke.actors.ctx import ActorCtx, Fenced, StateHandle
from yoke.actors.definitions import ActorDef, ActorRegistry, Backoff, Event, Queue
from yoke.actors.drain import DrainConfig, DrainStats, QueueDrainScheduler
from yoke.actors.inspection import ActorInspector, InstanceView, WorkerStatus
from yoke.actors.metrics import ActorMetrics
from yoke.actors.protocol import ActorStore
from yoke.actors.runtime import ActorRuntime
from yoke.actors.settings import ActorSettings
from yoke.actors.timers import TimerDispatch
from yoke.actors.workers import WorkerHeartbeat

# The actors specification: "Legacy names ... ActorScheduler remain as type aliases."
ActorScheduler = QueueDrainScheduler
timer_dispatch = TimerDispatch

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
    "Queue",
    "QueueDrainScheduler",
    "StateHandle",
    "TimerDispatch",
    "WorkerHeartbeat",
    "WorkerStatus",
    "timer_dispatch",
]
