"""The values users of `yoke.executions` hold: principals, limits, starts, executions, audit.

Every value is a frozen, keyword-only dataclass validated at construction, so a bad argument is
refused with a named `YokeError` (`BadType`, `BadValue`) before anything is stored. This module
must never touch the store or the event loop.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from yoke.errors import BadType, BadValue
from yoke.store.records import ExecutionStatus, StartKind, StartStatus
from yoke.store.text import unstorable

ADMIN = "ADMIN"
OPERATOR = "OPERATOR"
OnLimit = Literal["queue", "reject"]


PRIORITY_MAX = 2**63 - 1  # what both stores hold (BIGINT)


def storable_text(value: str, what: str) -> str:
    """Refuse, as `BadValue`, text no database would store. Checked before a start reaches
    the store, where one bad row would fail the batch it travels in."""
    reason = unstorable(value)
    if reason is not None:
        raise BadValue(f"{what} {reason}")
    return value


def check_priority(priority: object) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise BadType(f"priority must be an int, not {type(priority).__name__}")
    if abs(priority) > PRIORITY_MAX:
        raise BadValue(f"priority must be within +-{PRIORITY_MAX}")
    return priority


# One encoder for every call: `json.dumps` with options builds a new one each time.
_CANONICAL = json.JSONEncoder(separators=(",", ":"), sort_keys=True, allow_nan=False)


def encode_json(value: object, what: str) -> str:
    """Canonical JSON text of `value`, or `BadValue` naming `what` if it is not plain JSON."""
    if value is None:  # a workflow's usual input or output
        return "null"
    try:
        return _CANONICAL.encode(value)
    except (TypeError, ValueError) as exc:
        raise BadValue(
            f"{what} must be JSON (dict, list, str, int, float, bool, None): {exc}"
        ) from None


@dataclass(frozen=True, slots=True, init=False)
class Principal:
    """Who acts: a name, its roles (`ADMIN`, `OPERATOR`) and the tenant it belongs to."""

    name: str
    roles: frozenset[str]
    tenant: str | None

    def __init__(self, name: str, roles: Iterable[str] = (), tenant: str | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise BadType("Principal.name must be a non-empty str")
        if isinstance(roles, str) or not all(isinstance(r, str) for r in roles):
            raise BadType("Principal.roles must be an iterable of str")
        if tenant is not None and not isinstance(tenant, str):
            raise BadType("Principal.tenant must be a str or None")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "roles", frozenset(roles))
        object.__setattr__(self, "tenant", tenant)

    def has_any(self, *roles: str) -> bool:
        return any(r in self.roles for r in roles)


def _count(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadType(f"{name} must be an int or None, not {type(value).__name__}")
    if value < 0:
        raise BadValue(f"{name} must be >= 0, got {value}")
    return value


@dataclass(frozen=True, kw_only=True, slots=True)
class Limits:
    """Admission limits; every one is off (None) by default.

    `max_running_per_workflow` is one number for every workflow or a mapping workflow -> number
    (workflows not named are unlimited). `on_limit`: `queue` waits as QUEUED, `reject` raises
    `LimitExceeded`. `max_queued` bounds the queue of this scheduler; past it a start is refused.
    """

    max_running: int | None = None
    max_running_per_session: int | None = None
    max_running_per_workflow: int | Mapping[str, int] | None = None
    max_queued: int | None = None
    on_limit: OnLimit = "queue"

    def __post_init__(self) -> None:
        _count("max_running", self.max_running)
        _count("max_running_per_session", self.max_running_per_session)
        _count("max_queued", self.max_queued)
        per = self.max_running_per_workflow
        if isinstance(per, Mapping):
            frozen: dict[str, int] = {}
            for k, v in per.items():
                if not isinstance(k, str):
                    raise BadType("max_running_per_workflow keys must be workflow names (str)")
                c = _count(f"max_running_per_workflow[{k!r}]", v)
                assert c is not None or v is None
                if c is not None:
                    frozen[k] = c
            object.__setattr__(self, "max_running_per_workflow", MappingProxyType(frozen))
        else:
            _count("max_running_per_workflow", per)
        if self.on_limit not in ("queue", "reject"):
            raise BadValue(f"on_limit must be 'queue' or 'reject', got {self.on_limit!r}")

    def workflow_cap(self, workflow: str) -> int | None:
        per = self.max_running_per_workflow
        if isinstance(per, Mapping):
            return per.get(workflow)
        return per

    def to_json(self) -> dict[str, Any]:
        per = self.max_running_per_workflow
        return {
            "max_running": self.max_running,
            "max_running_per_session": self.max_running_per_session,
            "max_running_per_workflow": dict(per) if isinstance(per, Mapping) else per,
            "max_queued": self.max_queued,
            "on_limit": self.on_limit,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Limits:
        if not isinstance(data, Mapping):
            raise BadType("limits must be a JSON object")
        unknown = set(data) - {
            "max_running",
            "max_running_per_session",
            "max_running_per_workflow",
            "max_queued",
            "on_limit",
        }
        if unknown:
            raise BadValue(f"unknown limit(s): {', '.join(sorted(unknown))}")
        return cls(**data)

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_json(), sort_keys=True))


@dataclass(frozen=True, kw_only=True, slots=True)
class Start:
    """A request for a slot and its answer. `execution_id` once GRANTED; `position` (1 = next)
    while QUEUED in this process's scheduler, estimated in priority-then-arrival order."""

    start_id: str
    status: StartStatus
    workflow: str
    session: str
    tenant: str
    priority: int
    kind: StartKind
    execution_id: str | None = None
    position: int | None = None
    reason: str | None = None
    source_execution_id: str | None = None
    created_at: float = 0.0
    decided_at: float | None = None
    recovery: int = 0  # automatic recoveries in a row that made it (0: asked by a caller)
    due_at: float | None = None  # a delayed start or wake-up: when it is (was) due


@dataclass(frozen=True, kw_only=True, slots=True)
class Failure:
    """Why an execution (or a step's attempt) did not succeed: the exception's `type` and
    `message`, its `traceback` (bounded: the innermost 16 KiB), and the `step` and `attempt`
    it came from, when it came out of a step. Ends yoke decides have their own `type`:
    `Cancelled`, `Aborted` (its server died or shut down), `TimedOut`."""

    type: str | None
    message: str
    traceback: str | None = None
    step: str | None = None
    attempt: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "message": self.message,
            "traceback": self.traceback,
            "step": self.step,
            "attempt": self.attempt,
        }

    def encoded(self) -> str:
        return _CANONICAL.encode(self.to_json())

    @classmethod
    def decoded(cls, text: str) -> Failure:
        """From the JSON text the store keeps (a plain text kept before errors were objects
        is its message)."""
        try:
            data = json.loads(text) if text.startswith("{") else None
        except ValueError:
            data = None
        if not isinstance(data, dict):
            return cls(type=None, message=text)
        attempt = data.get("attempt")
        return cls(
            type=_text_or_none(data.get("type")),
            message=str(data.get("message") or ""),
            traceback=_text_or_none(data.get("traceback")),
            step=_text_or_none(data.get("step")),
            attempt=attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else None,
        )

    def __str__(self) -> str:
        head = f"{self.type}: {self.message}" if self.type else self.message
        if self.step is not None:
            head += f" (step {self.step!r}, attempt {self.attempt})"
        return head


def _text_or_none(value: object) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True, kw_only=True, slots=True)
class Execution:
    execution_id: str
    status: ExecutionStatus
    workflow: str
    session: str
    tenant: str
    input: Any
    output: Any = None
    error: Failure | None = None
    start_id: str | None = None
    parent_id: str | None = None
    restarted_from: str | None = None
    resumed_from: str | None = None
    created_at: float = 0.0
    finished_at: float | None = None
    waiting_for: str | None = None  # WAITING: the signal it waits for (None: a sleep)


@dataclass(frozen=True, kw_only=True, slots=True)
class Page:
    """One page of `list()`: newest first; pass `next_cursor` as `cursor` for the next one."""

    items: tuple[Execution, ...]
    next_cursor: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Change:
    """A runtime change shown to reviewers before it happens."""

    kind: Literal["limits", "priority", "tenant"]
    principal: Principal
    subject: str | None
    before: Any
    after: Any


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditEntry:
    seq: int
    kind: str
    principal: str
    tenant: str | None
    roles: tuple[str, ...]
    subject: str | None
    before: Any
    after: Any
    at: float


def check_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise BadType("timeout must be a number of seconds or None")
    if math.isnan(timeout) or timeout < 0:
        raise BadValue(f"timeout must be >= 0, got {timeout}")
    return float(timeout)


MAX_DELAY = 366 * 86_400.0 * 100  # how far ahead a start, sleep or wait may be (a century)


def check_seconds(value: object, what: str) -> float:
    """A finite, non-negative number of seconds (not a bool), or `BadType` / `BadValue`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadType(f"{what} must be a number of seconds, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise BadValue(f"{what} must be a finite number >= 0, got {value}")
    if value > MAX_DELAY:
        raise BadValue(f"{what} must be at most {MAX_DELAY:.0f} seconds ahead")
    return float(value)


def due_time(at: object, delay: object, *, now: float) -> float | None:
    """When a delayed start is due (`at`: epoch seconds, in the past means now; `delay`:
    seconds from `now`), or None for a start now."""
    if at is None and delay is None:
        return None
    if at is not None and delay is not None:
        raise BadValue("give at or delay, not both")
    if delay is not None:
        return now + check_seconds(delay, "delay")
    if isinstance(at, bool) or not isinstance(at, int | float):
        raise BadType(f"at must be epoch seconds, not {type(at).__name__}")
    if not math.isfinite(at):
        raise BadValue(f"at must be finite, got {at}")
    return max(now, now + check_seconds(max(0.0, float(at) - now), "at"))
