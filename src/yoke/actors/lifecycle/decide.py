"""`decide(observation, now, policy) -> actions`: which tenants' executors should start, stop
or be killed on this worker. Pure: no I/O, no asyncio, no clock (`now` is the caller's
monotonic time); `RuntimeLifecycleService` observes, calls it, and carries the actions out.

Level-triggered, like a reconcile: each call looks at the whole observation, not at what
changed, so a lost wake-up costs latency, never correctness. The rules, per tenant:

* start: no live executor (none yet, or its last life ended), and work to do: events pending
  for it on this worker, or a timer of its falling due within `prewarm` seconds; never before
  its backoff ends (a tenant whose executors keep failing cannot take the boots of others).
* stop (the specification's stop rule): a READY executor keeps running while `pending_events > 0 or
  active_dispatch > 0`; with neither for `idle_secs` (and no timer due within `prewarm`), it
  stops. Only on a fresh observation: when the store could not be read, nothing is stopped.
* kill: a STARTING executor past `boot_timeout` (its own boot deadline kills it first; this is
  the sweep behind it).

A stop is only asked here; the pool checks again, with no await between its check and the
stop, that nothing came in meanwhile (`ExecutorPool.stop`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Phase(Enum):
    """What a tenant's executor on this worker is doing (as `ExecutorState`, plus NONE)."""

    NONE = "NONE"  # never started here, or its last life ended (STOPPED or FAILED)
    STARTING = "STARTING"
    READY = "READY"
    DRAINING = "DRAINING"


class Kind(Enum):
    START = "start"
    STOP = "stop"
    KILL = "kill"


@dataclass(frozen=True, kw_only=True, slots=True)
class TenantObservation:
    tenant: str
    phase: Phase
    pending: bool  # events of it wait on this worker (in the store, or held by the drain)
    active: int  # process() calls running in its executor now
    busy_at: float  # when it last had work (pending or active), monotonic
    since: float  # when its executor's boot began (its spawn; now, while it waits for a slot)
    backoff_until: float  # no start before this
    timer_due: float | None  # when its next timer falls due, monotonic (None: none known)


@dataclass(frozen=True, kw_only=True, slots=True)
class Observation:
    tenants: tuple[TenantObservation, ...]
    fresh: bool = True  # the store was read for it (False: no stop decisions)


@dataclass(frozen=True, kw_only=True, slots=True)
class Policy:
    idle_secs: float = 60.0
    boot_timeout: float = 10.0
    # Seconds ahead of a timer that its tenant's executor is started: the timer poll's period
    # and a boot, so a timer seen by one poll is warm before the next poll could see it.
    prewarm: float = 12.0


@dataclass(frozen=True, kw_only=True, slots=True)
class Action:
    kind: Kind
    tenant: str
    reason: str


def decide(obs: Observation, now: float, policy: Policy) -> list[Action]:
    out: list[Action] = []
    for t in obs.tenants:
        timer_soon = t.timer_due is not None and t.timer_due - now <= policy.prewarm
        if t.phase is Phase.NONE:
            if now < t.backoff_until:
                continue
            if t.pending:
                out.append(Action(kind=Kind.START, tenant=t.tenant, reason="pending"))
            elif timer_soon:
                out.append(Action(kind=Kind.START, tenant=t.tenant, reason="timer"))
        elif t.phase is Phase.STARTING:
            if now - t.since > policy.boot_timeout:
                out.append(Action(kind=Kind.KILL, tenant=t.tenant, reason="boot_timeout"))
        elif t.phase is Phase.READY:
            idle = not t.pending and t.active == 0
            if obs.fresh and idle and not timer_soon and now - t.busy_at >= policy.idle_secs:
                out.append(Action(kind=Kind.STOP, tenant=t.tenant, reason="idle"))
    return out
