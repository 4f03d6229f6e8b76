"""yoke: a fair, durable, multi-tenant scheduler.

This module is the curated public surface: what users import. Everything else is importable but
internal. `yoke.fair` (the in-process schedulers) is imported as its own module so that using it
costs nothing of the durable parts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from yoke.errors import (
    BadType,
    BadValue,
    Conflict,
    Forbidden,
    IdempotencyConflict,
    InvalidArgument,
    LimitExceeded,
    NotFound,
    QuotaExceeded,
    RateLimited,
    ShuttingDown,
    StoreError,
    StoreUnavailable,
    Unauthorized,
    WaitTimeout,
    YokeError,
)
from yoke.lazy import lazy_names

__version__ = "0.1.0"

__all__ = [
    "BadType",
    "BadValue",
    "Conflict",
    "Forbidden",
    "IdempotencyConflict",
    "InvalidArgument",
    "LimitExceeded",
    "NotFound",
    "QuotaExceeded",
    "RateLimited",
    "ShuttingDown",
    "StoreError",
    "StoreUnavailable",
    "Unauthorized",
    "WaitTimeout",
    "YokeError",
    "__version__",
]

# The durable parts are imported on first use, so that `import yoke` (and `yoke.fair`) does not
# load a database driver it will not need.
_LAZY = {
    "App": "yoke.app",
    "NotRunning": "yoke.errors",
    "ReplayMismatch": "yoke.errors",
    "Vetoed": "yoke.errors",
    **dict.fromkeys(
        (
            "ChildFailed",
            "Context",
            "Execution",
            "ExecutionStatus",
            "Failure",
            "Limits",
            "Page",
            "Principal",
            "Retry",
            "Start",
            "StartStatus",
            "StepTimeout",
        ),
        "yoke.executions",
    ),
    **dict.fromkeys(
        (
            "ActorCtx",
            "ActorScheduler",
            "Backoff",
            "Fenced",
            "PortalCtx",
            "Queue",
            "QueueDrainScheduler",
            "RuntimeLifecycleService",
            "TenantSchedulerService",
        ),
        "yoke.actors",
    ),
}
__all__ += [
    "ActorCtx",
    "ActorScheduler",
    "App",
    "Backoff",
    "ChildFailed",
    "Context",
    "Execution",
    "ExecutionStatus",
    "Failure",
    "Fenced",
    "Limits",
    "NotRunning",
    "Page",
    "PortalCtx",
    "Principal",
    "Queue",
    "QueueDrainScheduler",
    "ReplayMismatch",
    "Retry",
    "RuntimeLifecycleService",
    "Start",
    "StartStatus",
    "StepTimeout",
    "TenantSchedulerService",
    "Vetoed",
]

if TYPE_CHECKING:
    from yoke.actors import (
        ActorCtx,
        ActorScheduler,
        Backoff,
        Fenced,
        PortalCtx,
        Queue,
        QueueDrainScheduler,
        RuntimeLifecycleService,
        TenantSchedulerService,
    )
    from yoke.app import App
    from yoke.errors import NotRunning, ReplayMismatch, Vetoed
    from yoke.executions import (
        ChildFailed,
        Context,
        Execution,
        ExecutionStatus,
        Failure,
        Limits,
        Page,
        Principal,
        Retry,
        Start,
        StartStatus,
        StepTimeout,
    )


__getattr__ = lazy_names(__name__, _LAZY, globals())
