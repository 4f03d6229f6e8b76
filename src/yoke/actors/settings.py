"""Settings of the actor runtime, from `YOKE_*` variables (the seed's names where it has them).

| variable | default | meaning |
| --- | --- | --- |
| `YOKE_WORKER_ID` | `{hostname}-{uuid}` | stable identity of this worker |
| `YOKE_WORKER_CONCURRENCY` | 64 | concurrent `process()` calls per worker, shared by tenants |
| `YOKE_WORKER_HEARTBEAT_SECS` | 15 | heartbeat period of `runtime_workers` |
| `YOKE_WORKER_STALE_SECS` | 60 | a worker silent this long is stale; others take its instances |
| `YOKE_NOTIFY_POLL_BACKUP_SECS` | 15 | drain backup poll when a NOTIFY was missed |
| `YOKE_SCHEDULE_WAKE_POLL_SECS` | 10 | timer backup poll |
| `YOKE_ACTOR_BATCH_SIZE` | 1000 | rows per claim / completion statement |
| `YOKE_ACTOR_PREFETCH` | 2048 | claimed rows held by a worker beyond the running ones |
| `YOKE_WORKER_SHUTDOWN_TIMEOUT` | 10 | seconds running `process()` calls get at shutdown |

This module only turns text into values: no database, no clock.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from yoke.errors import BadValue


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{uuid.uuid4()}"


_ENV = {
    "worker_id": "YOKE_WORKER_ID",
    "concurrency": "YOKE_WORKER_CONCURRENCY",
    "heartbeat_interval": "YOKE_WORKER_HEARTBEAT_SECS",
    "stale_after": "YOKE_WORKER_STALE_SECS",
    "poll_interval": "YOKE_NOTIFY_POLL_BACKUP_SECS",
    "timer_poll_interval": "YOKE_SCHEDULE_WAKE_POLL_SECS",
    "batch_size": "YOKE_ACTOR_BATCH_SIZE",
    "prefetch": "YOKE_ACTOR_PREFETCH",
    "shutdown_timeout": "YOKE_WORKER_SHUTDOWN_TIMEOUT",
}


@dataclass(frozen=True, kw_only=True)
class ActorSettings:
    worker_id: str = ""  # "" = default_worker_id(), drawn once per settings value
    concurrency: int = 64
    heartbeat_interval: float = 15.0
    stale_after: float = 60.0
    poll_interval: float = 15.0
    timer_poll_interval: float = 10.0
    batch_size: int = 1000
    prefetch: int = 2048
    shutdown_timeout: float = 10.0

    def __post_init__(self) -> None:
        if not self.worker_id:
            object.__setattr__(self, "worker_id", default_worker_id())
        for name in ("concurrency", "batch_size"):
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
            "poll_interval",
            "timer_poll_interval",
            "shutdown_timeout",
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
                raise BadValue(f"{name} must be a number of seconds > 0, got {v!r}")
        if self.stale_after <= self.heartbeat_interval:
            raise BadValue("stale_after must be longer than heartbeat_interval")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> ActorSettings:
        source = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = source.get(_ENV[f.name], "").strip()
            if not raw:
                continue
            kind = str(f.type)
            try:
                values[f.name] = (
                    int(raw) if kind == "int" else float(raw) if kind == "float" else raw
                )
            except ValueError:
                raise BadValue(f"{_ENV[f.name]} must be a number, got {raw!r}") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def with_(self, **changes: Any) -> ActorSettings:
        return replace(self, **changes)
