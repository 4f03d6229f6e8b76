"""Settings of a yoke process, read from the environment (`YOKE_*`) into one frozen value.

Parsing is explicit so that a bad value names the variable it came from (`BadValue`), and the
rest of yoke receives typed fields instead of strings. This module must never open a database,
read a clock or import any part of yoke but `errors`: it only turns text into values.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from yoke.errors import BadType, BadValue

DEFAULT_DATABASE_URL = "sqlite:///./.yoke/yoke.db"


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything a yoke process is configured with. `from_env` builds it from `YOKE_*`."""

    database_url: str = DEFAULT_DATABASE_URL
    # Seconds running executions get to finish on shutdown before they are aborted.
    execution_shutdown_timeout: float = 30.0
    # How often this process writes its heartbeat, and after how long without one a process is
    # taken for dead (its RUNNING executions and QUEUED starts are then marked ABORTED).
    heartbeat_interval: float = 5.0
    instance_stale_after: float = 30.0
    # Backup poll for slots freed by other processes (PostgreSQL also wakes on NOTIFY).
    slot_poll_interval: float = 1.0
    sqlite_busy_timeout: float = 5.0
    pg_pool_min: int = 1
    pg_pool_max: int = 10
    pg_connect_timeout: float = 5.0
    instance_id: str | None = None
    # Limits from configuration; the newest limits in the control log win over these at boot.
    max_running: int | None = None
    max_running_per_session: int | None = None
    max_running_per_workflow: int | None = None
    max_queued: int | None = None
    on_limit: str = "queue"

    def __post_init__(self) -> None:
        for name in (
            "execution_shutdown_timeout",
            "heartbeat_interval",
            "instance_stale_after",
            "slot_poll_interval",
            "sqlite_busy_timeout",
            "pg_connect_timeout",
        ):
            _check_seconds(name, getattr(self, name))
        for name in (
            "max_running",
            "max_running_per_session",
            "max_running_per_workflow",
            "max_queued",
        ):
            _check_count(name, getattr(self, name))
        for name in ("pg_pool_min", "pg_pool_max"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise BadType(f"{name} must be an int, not {type(value).__name__}")
            if value < 1:
                raise BadValue(f"{name} must be at least 1, got {value}")
        if self.pg_pool_min > self.pg_pool_max:
            raise BadValue("pg_pool_min must not exceed pg_pool_max")
        if self.on_limit not in ("queue", "reject"):
            raise BadValue(f"on_limit must be 'queue' or 'reject', got {self.on_limit!r}")
        if not isinstance(self.database_url, str) or not self.database_url:
            raise BadValue("database_url must be a non-empty string")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Read `YOKE_<FIELD>` variables (upper-case field names); `overrides` win over them."""
        source = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            var = "YOKE_" + f.name.upper()
            raw = source.get(var)
            if raw is None or raw.strip() == "":
                continue
            values[f.name] = _parse(var, raw.strip(), f.type)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def with_(self, **changes: Any) -> Settings:
        return replace(self, **changes)


def _parse(var: str, raw: str, annotation: object) -> Any:
    kind = str(annotation)
    if "float" in kind:
        try:
            return float(raw)
        except ValueError:
            raise BadValue(f"{var} must be a number of seconds, got {raw!r}") from None
    if "int" in kind:
        if raw.lower() in ("none", "off", "unlimited"):
            return None
        try:
            return int(raw)
        except ValueError:
            raise BadValue(f"{var} must be an integer, got {raw!r}") from None
    return raw


def _check_seconds(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadType(f"{name} must be a number of seconds, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise BadValue(f"{name} must be a finite number >= 0, got {value}")


def _check_count(name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadType(f"{name} must be an int or None, not {type(value).__name__}")
    if value < 0:
        raise BadValue(f"{name} must be >= 0, got {value}")
