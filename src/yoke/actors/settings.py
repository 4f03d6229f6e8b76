"""Settings of the actor runtime, from `YOKE_*` variables (the actors specification's names).

Each field carries its meaning; `docs/CONFIGURATION.md` lists them with their variables
(`ENV`), generated from here. This module only turns text into values: no database, no clock.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from yoke.config import load_env, setting
from yoke.errors import BadValue


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{uuid.uuid4()}"


ENV = {  # field -> variable
    "worker_id": "YOKE_WORKER_ID",
    "concurrency": "YOKE_WORKER_CONCURRENCY",
    "heartbeat_interval": "YOKE_WORKER_HEARTBEAT_SECS",
    "stale_after": "YOKE_WORKER_STALE_SECS",
    "forget_after": "YOKE_WORKER_FORGET_SECS",
    "poll_interval": "YOKE_NOTIFY_POLL_BACKUP_SECS",
    "timer_poll_interval": "YOKE_SCHEDULE_WAKE_POLL_SECS",
    "batch_size": "YOKE_ACTOR_BATCH_SIZE",
    "prefetch": "YOKE_ACTOR_PREFETCH",
    "claim": "YOKE_ACTOR_CLAIM",
    "claim_depth": "YOKE_ACTOR_CLAIM_DEPTH",
    "tenant_settings_poll": "YOKE_TENANT_SETTINGS_POLL_SECS",
    "shutdown_timeout": "YOKE_WORKER_SHUTDOWN_TIMEOUT",
    "placement": "YOKE_PLACEMENT",
    "rebalance_interval": "YOKE_REBALANCE_INTERVAL_SECS",
    "rebalance_tolerance": "YOKE_REBALANCE_TOLERANCE",
    "rebalance_max_moves": "YOKE_REBALANCE_MAX_MOVES",
    "move_grace": "YOKE_MOVE_GRACE_SECS",
}
PLACEMENTS = ("balanced", "tenant", "creator")


@dataclass(frozen=True, kw_only=True)
class ActorSettings:
    worker_id: str = setting("", "stable identity of this worker (default `{hostname}-{uuid}`)")
    concurrency: int = setting(64, "concurrent `process()` calls per worker, shared by tenants")
    heartbeat_interval: float = setting(15.0, "seconds between a worker's heartbeats")
    stale_after: float = setting(
        60.0, "seconds without a heartbeat after which a worker is stale; others take its instances"
    )
    forget_after: float = setting(
        3600.0,
        "seconds after which a stopped or silent worker owning no instance is forgotten: its "
        "row, executors and counters deleted, and dropped from `/v1/workers` and the dashboard",
    )
    poll_interval: float = setting(15.0, "drain backup poll when a NOTIFY was missed")
    timer_poll_interval: float = setting(10.0, "timer backup poll")
    batch_size: int = setting(1000, "rows per claim or completion statement")
    prefetch: int = setting(
        2048,
        "with `YOKE_ACTOR_CLAIM=first-come`: claimed rows a worker holds beyond the running ones",
    )
    claim: str = setting(
        "fair",
        "`fair`: each tenant holds at most its weighted share of concurrency x (1 + claim depth) "
        "claimed rows, claimed again when a quarter is free; `first-come`: up to `prefetch` rows "
        "of whichever tenants come first (the old drain, kept as a baseline)",
    )
    claim_depth: int = setting(
        16, "with the fair claim: rows held per slot beyond the running ones, shared by tenants"
    )
    tenant_settings_poll: float = setting(
        2.0,
        "seconds between a worker's reads of the tenants' weights and caps (`/v1/tenants`); "
        "on PostgreSQL a backup, as a change is announced at once",
    )
    shutdown_timeout: float = setting(10.0, "seconds running `process()` calls get at shutdown")
    placement: str = setting(
        "balanced",
        "where new instances live: `balanced` (rendezvous hash over live workers), `tenant` "
        "(a tenant's instances on one worker) or `creator` (the creating worker)",
    )
    rebalance_interval: float = setting(
        2.0, "seconds between two rebalancing steps (and a giver's look for moves)"
    )
    rebalance_tolerance: float = setting(
        0.1, "a worker within this fraction of its fair share of instances is balanced"
    )
    rebalance_max_moves: int = setting(50, "instances moving at once, fleet-wide, at most")
    move_grace: float = setting(
        10.0, "seconds a giver waits for a moving instance's running calls before it moves anyway"
    )

    def __post_init__(self) -> None:
        if not self.worker_id:
            object.__setattr__(self, "worker_id", default_worker_id())
        if self.claim not in ("fair", "first-come"):
            raise BadValue(f"claim must be 'fair' or 'first-come', got {self.claim!r}")
        if self.placement not in PLACEMENTS:
            raise BadValue(
                f"placement must be one of {', '.join(PLACEMENTS)}, got {self.placement!r}"
            )
        tol = self.rebalance_tolerance
        if isinstance(tol, bool) or not isinstance(tol, int | float) or not 0 <= tol <= 1:
            raise BadValue(f"rebalance_tolerance must be a fraction in [0, 1], got {tol!r}")
        for name in ("concurrency", "batch_size", "claim_depth", "rebalance_max_moves"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise BadValue(f"{name} must be an int >= 1, got {v!r}")
        if (
            isinstance(self.prefetch, bool)
            or not isinstance(self.prefetch, int)
            or self.prefetch < 0
        ):
            raise BadValue(f"prefetch must be an int >= 0, got {self.prefetch!r}")
        for name in (
            "heartbeat_interval",
            "stale_after",
            "forget_after",
            "poll_interval",
            "timer_poll_interval",
            "tenant_settings_poll",
            "shutdown_timeout",
            "rebalance_interval",
            "move_grace",
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
                raise BadValue(f"{name} must be a number of seconds > 0, got {v!r}")
        if self.stale_after <= self.heartbeat_interval:
            raise BadValue("stale_after must be longer than heartbeat_interval")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> ActorSettings:
        return load_env(cls, ENV, env, overrides)

    def with_(self, **changes: Any) -> ActorSettings:
        return replace(self, **changes)
