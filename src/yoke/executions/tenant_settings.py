"""A tenant's settings as users see them: one weight, the limits of its executions and those of
its actors, each field bounded; `*` holds the defaults of every tenant without a value of its
own.

    {"weight": w,
     "executions": {"max_running", "max_queued", "rate", "burst"},
     "actors": {"max_running", "append_rate", "append_burst", "max_instances", "max_timers"}}

A change names only the fields it changes (`parse_change`): a field left out stays as it was,
`None` clears it (the tenant then follows `*`, or has no limit). `effective` merges a tenant's
own values over the defaults, field by field. The stored form is one flat row
(`store.tenantverbs.TenantValues`); this module maps between the two and must never touch the
store.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from yoke.errors import BadType, BadValue, Forbidden
from yoke.executions.model import ADMIN, OPERATOR, Principal
from yoke.store.tenantverbs import DEFAULTS, TenantRow, TenantValues
from yoke.store.text import unstorable

MIN_WEIGHT, MAX_WEIGHT = 0.01, 1000.0
MAX_RUNNING = 1_000_000
MAX_QUEUED = 10_000_000
MIN_RATE, MAX_RATE = 0.001, 1_000_000.0  # tokens a second
MAX_BURST = 1_000_000
MAX_HELD = 1_000_000_000  # instances or timers a tenant may hold
MAX_TENANT_NAME = 256

# Each field of the public form: (section, name) -> (stored column, kind, low, high).
_FIELDS: dict[tuple[str, str], tuple[str, str, float, float]] = {
    ("", "weight"): ("weight", "float", MIN_WEIGHT, MAX_WEIGHT),
    ("executions", "max_running"): ("exec_max_running", "int", 1, MAX_RUNNING),
    ("executions", "max_queued"): ("exec_max_queued", "int", 0, MAX_QUEUED),
    ("executions", "rate"): ("exec_rate", "float", MIN_RATE, MAX_RATE),
    ("executions", "burst"): ("exec_burst", "int", 1, MAX_BURST),
    ("actors", "max_running"): ("max_running", "int", 1, MAX_RUNNING),
    ("actors", "append_rate"): ("append_rate", "float", MIN_RATE, MAX_RATE),
    ("actors", "append_burst"): ("append_burst", "int", 1, MAX_BURST),
    ("actors", "max_instances"): ("max_instances", "int", 0, MAX_HELD),
    ("actors", "max_timers"): ("max_timers", "int", 0, MAX_HELD),
}
SECTIONS = {
    "executions": tuple(n for s, n in _FIELDS if s == "executions"),
    "actors": tuple(n for s, n in _FIELDS if s == "actors"),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutionLimits:
    """A tenant's executions: running at once across every server (`max_running`), queued
    at once (`max_queued`), and started per second (`rate`, with `burst` back to back)."""

    max_running: int | None = None
    max_queued: int | None = None
    rate: float | None = None
    burst: int | None = None

    @property
    def bucket(self) -> tuple[float, int] | None:
        """(rate, burst) of its starts' token bucket, or None: no rate. A burst not set is
        one second of the rate (at least 1)."""
        if self.rate is None:
            return None
        return self.rate, self.burst or max(1, math.ceil(self.rate))


@dataclass(frozen=True, kw_only=True, slots=True)
class ActorLimits:
    """A tenant's actors: concurrent `process()` calls across the fleet (`max_running`),
    appended events per second (`append_rate`, `append_burst`), and how many instances and
    pending timers it may hold."""

    max_running: int | None = None
    append_rate: float | None = None
    append_burst: int | None = None
    max_instances: int | None = None
    max_timers: int | None = None

    @property
    def bucket(self) -> tuple[float, int] | None:
        """(rate, burst) of its appends' token bucket, or None (as `ExecutionLimits.bucket`)."""
        if self.append_rate is None:
            return None
        return self.append_rate, self.append_burst or max(1, math.ceil(self.append_rate))


@dataclass(frozen=True, kw_only=True, slots=True)
class TenantSettings:
    tenant: str
    weight: float | None = None  # None: the defaults' weight, else 1
    executions: ExecutionLimits = ExecutionLimits()
    actors: ActorLimits = ActorLimits()
    updated_by: str | None = None  # None: never set
    updated_at: float | None = None

    @property
    def max_running(self) -> int | None:
        """The actors' `max_running` (its name before executions had limits of their own)."""
        return self.actors.max_running

    @property
    def share(self) -> float:
        """The weight that applies when nothing else is known: its own, else 1."""
        return 1.0 if self.weight is None else self.weight

    def to_json(self) -> dict[str, Any]:
        return {
            "weight": self.weight,
            "executions": {n: getattr(self.executions, n) for n in SECTIONS["executions"]},
            "actors": {n: getattr(self.actors, n) for n in SECTIONS["actors"]},
        }

    def values(self) -> TenantValues:
        """The stored form."""
        flat: dict[str, Any] = {}
        for (section, name), (column, *_) in _FIELDS.items():
            holder = self if not section else getattr(self, section)
            flat[column] = getattr(holder, name)
        return TenantValues(**flat)


def from_values(
    tenant: str,
    values: TenantValues,
    *,
    updated_by: str | None = None,
    updated_at: float | None = None,
) -> TenantSettings:
    sections: dict[str, dict[str, Any]] = {"executions": {}, "actors": {}}
    weight = None
    for (section, name), (column, *_) in _FIELDS.items():
        value = getattr(values, column)
        if section:
            sections[section][name] = value
        else:
            weight = value
    return TenantSettings(
        tenant=tenant,
        weight=weight,
        executions=ExecutionLimits(**sections["executions"]),
        actors=ActorLimits(**sections["actors"]),
        updated_by=updated_by,
        updated_at=updated_at,
    )


def from_row(row: TenantRow) -> TenantSettings:
    return from_values(row.tenant, row.values, updated_by=row.updated_by, updated_at=row.updated_at)


def effective(own: TenantSettings, defaults: TenantSettings | None) -> TenantSettings:
    """What applies to a tenant: each field its own, else the defaults' (`*`)."""
    if defaults is None:
        return own
    merged = own.values().or_defaults(defaults.values())
    return from_values(own.tenant, merged, updated_by=own.updated_by, updated_at=own.updated_at)


@dataclass(frozen=True, kw_only=True, slots=True)
class Change:
    """The fields a change names, by stored column: a value sets it, None clears it."""

    columns: Mapping[str, Any]

    def applied_to(self, before: TenantSettings) -> TenantSettings:
        current = before.values()
        merged = {f.name: getattr(current, f.name) for f in fields(current)}
        merged.update(self.columns)
        return from_values(before.tenant, TenantValues(**merged))


_UNSET: Any = object()


def parse_change(
    *,
    weight: object = _UNSET,
    executions: object = _UNSET,
    actors: object = _UNSET,
) -> Change:
    """A change from the public form; a bad or unknown field is refused (`BadType`,
    `BadValue`) before anything is read or written."""
    columns: dict[str, Any] = {}
    if weight is not _UNSET:
        columns["weight"] = check_field("", "weight", weight)
    for section, given in (("executions", executions), ("actors", actors)):
        if given is _UNSET or given is None:
            continue
        if not isinstance(given, Mapping):
            raise BadType(f"{section} must be an object of fields, got {type(given).__name__}")
        unknown = sorted(str(k) for k in given if k not in SECTIONS[section])
        if unknown:
            raise BadValue(
                f"unknown {section} field(s): {', '.join(unknown)}; known: "
                f"{', '.join(SECTIONS[section])}"
            )
        for name, value in given.items():
            columns[_FIELDS[(section, name)][0]] = check_field(section, name, value)
    if not columns:
        raise BadValue("give weight, executions and/or actors: nothing to change")
    return Change(columns=columns)


def check_field(section: str, name: str, value: object) -> Any:
    """One field's value, bounded; None (clear it) always passes."""
    if value is None:
        return None
    _, kind, low, high = _FIELDS[(section, name)]
    what = f"{section}.{name}" if section else name
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise BadType(f"{what} must be an int or null, got {type(value).__name__}")
        if not low <= value <= high:
            raise BadValue(f"{what} must be between {int(low)} and {int(high)}, got {value}")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadType(f"{what} must be a number or null, got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number) or not low <= number <= high:
        raise BadValue(f"{what} must be between {low} and {high}, got {value!r}")
    return number


def check_tenant(tenant: object, *, defaults_ok: bool = False) -> str:
    """A tenant's name: 1-256 characters of storable text without `/`; `*` only where the
    defaults may be named (the settings), never as a tenant that owns work."""
    if not isinstance(tenant, str):
        raise BadType(f"tenant must be a str, got {type(tenant).__name__}")
    if tenant == DEFAULTS:
        if defaults_ok:
            return tenant
        raise BadValue("`*` names the defaults of every tenant, not a tenant")
    if not tenant or len(tenant) > MAX_TENANT_NAME or "/" in tenant:
        raise BadValue(f"a tenant is 1-{MAX_TENANT_NAME} characters without '/', got {tenant!r}")
    reason = unstorable(tenant)
    if reason is not None:
        raise BadValue(f"tenant {reason}")
    return tenant


def own_tenant(principal: Principal | None) -> str | None:
    """The tenant `principal` is bound to: its own, or a plain principal's name (a principal
    without OPERATOR or ADMIN is a tenant of its own); None for a trusted caller (no principal,
    or an OPERATOR or ADMIN bound to no tenant)."""
    if principal is None:
        return None
    if principal.tenant or not principal.has_any(OPERATOR, ADMIN):
        return principal.tenant or principal.name
    return None


def default_session(principal: Principal | None) -> str:
    """The session of a start that names none, by every path (the API, the Python call): the
    tenant its principal is bound to, else `default`."""
    return own_tenant(principal) or "default"


def start_tenant(principal: Principal | None, session: str, tenant: str | None) -> str:
    """Whose start it is. A principal bound to a tenant (its own, or a plain principal's
    name) starts in that tenant and no other; a trusted caller (the Python API without a
    principal, an OPERATOR or ADMIN without a tenant) names it with `tenant`, else it is the
    session's first segment before `/`."""
    own = own_tenant(principal)
    if principal is not None and own is not None:
        if tenant is not None and tenant != own:
            raise Forbidden(f"{principal.name} starts in tenant {own!r} only, not {tenant!r}")
        return check_tenant(own)
    if tenant is not None:
        return check_tenant(tenant)
    first = session.split("/", 1)[0]
    if not first:
        raise BadValue(f"session {session!r} names no tenant: give tenant= or a session 't/...'")
    return check_tenant(first)
