"""Settings of executor processes and of the lifecycle that starts and stops them (`YOKE_*`).

Each field carries its meaning; `docs/CONFIGURATION.md` lists them with their variables
(`ENV`), generated from here. `YOKE_SCHEDULE_WAKE_POLL_SECS` and `YOKE_NOTIFY_POLL_BACKUP_SECS`
(`ActorSettings`) also pace the lifecycle's timer pre-warm and its backup poll. This module
only turns text into values.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from yoke.config import load_env, setting
from yoke.errors import BadValue

Mode = Literal["inline", "process"]

ENV = {  # field -> variable
    "mode": "YOKE_EXECUTORS",
    "idle_secs": "YOKE_EXECUTOR_IDLE_SECS",
    "boot_concurrency": "YOKE_EXECUTOR_BOOT_CONCURRENCY",
    "warm_spares": "YOKE_EXECUTOR_WARM_SPARES",
    "boot_timeout": "YOKE_EXECUTOR_BOOT_TIMEOUT_SECS",
    "dispatch_timeout": "YOKE_DISPATCH_TIMEOUT_SECS",
    "memory_mb": "YOKE_EXECUTOR_MEMORY_MB",
    "max_frame_bytes": "YOKE_EXECUTOR_MAX_FRAME_BYTES",
    "backoff": "YOKE_EXECUTOR_BACKOFF_SECS",
    "uids": "YOKE_EXECUTOR_UIDS",
    "uid_base": "YOKE_EXECUTOR_UID_BASE",
    "uid_count": "YOKE_EXECUTOR_UID_COUNT",
    "cgroup": "YOKE_EXECUTOR_CGROUP",
    "namespaces": "YOKE_EXECUTOR_NAMESPACES",
    "allow_weak_isolation": "YOKE_EXECUTOR_ALLOW_WEAK_ISOLATION",
    "directory": "YOKE_EXECUTOR_DIR",
    "python": "YOKE_EXECUTOR_PYTHON",
    "pass_env": "YOKE_EXECUTOR_ENV",
    "hot_interval": "YOKE_HOT_RECONCILE_INTERVAL_SECS",
    "cold_interval": "YOKE_COLD_RECONCILE_INTERVAL_SECS",
}


@dataclass(frozen=True, kw_only=True)
class ExecutorSettings:
    mode: str = setting(
        "inline", "where `process()` runs: `inline` (in the worker) or `process` (per tenant)"
    )
    idle_secs: float = setting(
        60.0, "an executor with nothing pending and nothing running this long stops"
    )
    boot_concurrency: int = setting(0, "executors booting at once per worker (0: CPU count)")
    warm_spares: int = setting(
        1,
        "executors a worker keeps booted ahead of need, bound to no tenant: a cold tenant's "
        "executor is a spare bound to it (0: none, every executor boots when needed)",
    )
    boot_timeout: float = setting(10.0, "an executor not READY this long after its spawn is killed")
    dispatch_timeout: float = setting(300.0, "a `process()` call running longer kills its executor")
    memory_mb: int = setting(1024, "RLIMIT_AS of an executor, in MiB (0: none)")
    max_frame_bytes: int = setting(
        16 * 1024 * 1024, "the largest frame a worker reads from an executor"
    )
    backoff: float = setting(
        0.5, "first pause before a tenant whose executor failed starts again (doubles, to 60 s)"
    )
    uids: int = setting(1, "a uid per tenant when the worker runs as root (0: never)")
    uid_base: int = setting(2_000_000, "the first of the tenant uids")
    uid_count: int = setting(1_000_000, "how many tenant uids there are")
    cgroup: str = setting("", "a delegated cgroup v2 directory: one cgroup per executor below it")
    namespaces: str = setting(
        "auto",
        "each executor in namespaces of its own with bubblewrap: `auto` (when bwrap is found "
        "and its probe passes), `on` (refuse to start without them) or `off`",
    )
    allow_weak_isolation: int = setting(
        0,
        "1: as root, start executors even when tenant code would run as root (no uid per "
        "tenant, no namespaces); a WARNING says so at start",
    )
    directory: str = setting("", "parent of the tenants' working directories (default: tmp)")
    python: str = setting("", "the Python that runs executors (default: the worker's)")
    pass_env: str = setting(
        "", "comma-separated names of variables an executor may see (never credentials)"
    )
    hot_interval: float = setting(5.0, "the lifecycle's sweep of running executors (idle stop)")
    cold_interval: float = setting(
        30.0, "the lifecycle's sweep of tenants with pending events and no executor"
    )

    def __post_init__(self) -> None:
        if self.mode not in ("inline", "process"):
            raise BadValue(f"executors must be 'inline' or 'process', got {self.mode!r}")
        if self.namespaces not in ("auto", "on", "off"):
            raise BadValue(f"{ENV['namespaces']} must be auto, on or off, got {self.namespaces!r}")
        if not self.boot_concurrency:
            object.__setattr__(self, "boot_concurrency", os.cpu_count() or 1)
        for name in ("boot_concurrency", "max_frame_bytes", "uid_base", "uid_count"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise BadValue(f"{ENV[name]} must be an int >= 1, got {v!r}")
        for name in ("memory_mb", "uids", "warm_spares", "allow_weak_isolation"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise BadValue(f"{ENV[name]} must be an int >= 0, got {v!r}")
        for name in (
            "idle_secs",
            "boot_timeout",
            "dispatch_timeout",
            "backoff",
            "hot_interval",
            "cold_interval",
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
                raise BadValue(f"{ENV[name]} must be a number of seconds > 0, got {v!r}")

    @property
    def passed_env(self) -> list[str]:
        return [n.strip() for n in self.pass_env.split(",") if n.strip()]

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> ExecutorSettings:
        return load_env(cls, ENV, env, overrides)

    def with_(self, **changes: Any) -> ExecutorSettings:
        return replace(self, **changes)


def mode_of(value: str | None) -> Mode:
    if value == "process":
        return "process"
    if value in (None, "inline"):
        return "inline"
    raise BadValue(f"executors must be 'inline' or 'process', got {value!r}")
