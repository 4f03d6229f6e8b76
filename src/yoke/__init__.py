"""yoke: a fair, durable, multi-tenant scheduler.

This module is the curated public surface: what users import. Everything else is importable but
internal. `yoke.fair` (the in-process schedulers) is imported as its own module so that using it
costs nothing of the durable parts.
"""

from __future__ import annotations

from yoke.errors import (
    BadType,
    BadValue,
    Conflict,
    Forbidden,
    IdempotencyConflict,
    InvalidArgument,
    LimitExceeded,
    NotFound,
    ShuttingDown,
    StoreError,
    StoreUnavailable,
    Unauthorized,
    YokeError,
)

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
    "ShuttingDown",
    "StoreError",
    "StoreUnavailable",
    "Unauthorized",
    "YokeError",
    "__version__",
]
