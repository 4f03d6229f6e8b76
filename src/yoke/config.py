"""Settings of a yoke process, read from the environment (`YOKE_*`) into one frozen value.

Parsing is explicit so that a bad value names the variable it came from (`BadValue`), and the
rest of yoke receives typed fields instead of strings. This module must never open a database,
read a clock or import any part of yoke but `errors` and `retry`: it only turns text into values.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypeVar

from yoke.errors import BadType, BadValue
from yoke.retry import RetryPolicy

DEFAULT_DATABASE_URL = "sqlite:///./.yoke/yoke.db"
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def setting(default: Any, help: str) -> Any:
    """A settings field with its meaning, which `docs/CONFIGURATION.md` is generated from."""
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything a yoke process is configured with. `from_env` builds it from `YOKE_*`."""

    database_url: str = setting(
        DEFAULT_DATABASE_URL, "`sqlite:///path` (embedded) or `postgresql://...` (shared)"
    )
    execution_shutdown_timeout: float = setting(
        30.0, "seconds running executions get to finish on shutdown before they are aborted"
    )
    heartbeat_interval: float = setting(5.0, "seconds between this process's heartbeats")
    instance_stale_after: float = setting(
        30.0,
        "seconds without a heartbeat after which a process is taken for dead (its RUNNING "
        "executions and QUEUED starts become ABORTED)",
    )
    slot_poll_interval: float = setting(
        1.0, "backup poll for slots freed by other processes (PostgreSQL also wakes on NOTIFY)"
    )
    batch_overlap: int | None = setting(
        None,
        "grant (and finish) batches in the store at once: the next one goes while one commits "
        "(`1`: each waits for the answer to the one before; unset: the store's choice, 1 on "
        "both: 2 measured no faster here)",
    )
    sqlite_busy_timeout: float = setting(5.0, "seconds SQLite waits for a lock")
    pg_pool_min: int = setting(1, "PostgreSQL connections kept open")
    pg_pool_max: int = setting(10, "PostgreSQL connections at most")
    pg_connect_timeout: float = setting(5.0, "seconds to connect to PostgreSQL")
    instance_id: str | None = setting(None, "this process's id (default: drawn at start)")
    # Limits from configuration; the newest limits in the control log win over these at boot.
    max_running: int | None = setting(None, "executions running at once (off: unlimited)")
    max_running_per_session: int | None = setting(None, "executions running per session")
    max_running_per_workflow: int | None = setting(None, "executions running per workflow")
    max_queued: int | None = setting(None, "starts waiting at once")
    on_limit: str = setting("queue", "`queue` (wait, 202) or `reject` (429) when a limit is full")
    # The HTTP server.
    tokens_file: str | None = setting(
        None, "TOML file of bearer tokens; without it the server is loopback-only, all admin"
    )
    idempotency_retention: float = setting(
        24 * 3600.0, "seconds the first answer to an Idempotency-Key is kept for replays"
    )
    idempotency_max_per_tenant: int = setting(
        100_000,
        "Idempotency-Key answers one tenant keeps at most, and apart the keys of its appended "
        "events: past it its oldest are forgotten first",
    )
    ready_timeout: float = setting(
        2.0,
        "seconds the store has to answer `/readyz`; a start, restart or resume that waits this "
        "long with no answer from the store is answered 503 with Retry-After",
    )
    forwarded_allow_ips: str = setting(
        "127.0.0.1,::1",
        "proxies (addresses or CIDR ranges, comma-separated; `*` any) whose X-Forwarded-Proto "
        "and X-Forwarded-For are believed (`--forwarded-allow-ips`): behind such a TLS proxy "
        "the dashboard's session cookie is Secure and logins are counted by the real client",
    )
    max_long_polls_per_tenant: int = setting(
        100, "`?wait=` requests one tenant may hold open at once in a server (429 past it)"
    )
    max_body_bytes: int = setting(1 << 20, "request body size at most (413 past it)")
    max_header_line_bytes: int = setting(
        16 << 10, "request line or one header line at most (414 / 431 past it)"
    )
    max_header_bytes: int = setting(64 << 10, "request line and headers in all at most (431)")
    header_timeout_secs: float = setting(
        10.0,
        "seconds a request head may take, from the connection's opening (or its next "
        "request's first byte) to the head's end; then 408 and the connection closes",
    )
    max_connections_per_client: int = setting(
        256,
        "connections one client address may hold open at once (IPv6: one /64); past it a new "
        "one is answered 429 and closed at once. A proxy of `forwarded_allow_ips` is exempt",
    )
    log_level: str = setting("info", "`debug`, `info`, `warning` or `error` (`--log-level`)")
    log_format: str = setting("text", "`text` or `json`, one object a line (`--log-format`)")
    # High availability (`yoke serve --ha`, PostgreSQL only).
    ha: bool = setting(
        False, "`1`: run as one of a high-availability pair (a leader admits, a standby 503s)"
    )
    ha_lease_ttl_secs: float = setting(
        10.0, "seconds a leader's lease lasts unrenewed (renewed every fifth of it)"
    )
    ha_poll_secs: float = setting(
        1.0, "seconds between a standby's tries to take the lease (it also wakes on NOTIFY)"
    )
    ha_requeue: bool = setting(
        True, "`0`: a new leader records the old leader's queued starts ABORTED, not adopted"
    )
    ha_liveness_lock: bool = setting(
        True, "`0`: no session lock for near-instant failover (behind a transaction pooler)"
    )
    # Workflows that survive failures: recovery, cancel from any server, retention.
    recovery: str = setting(
        "resume",
        "`resume`: a dead server's executions are resumed by a live one, from their last "
        "recorded step, through admission; `abort`: they stay ABORTED, to resume by hand",
    )
    recovery_max: int = setting(
        3, "automatic recoveries in a row of one execution's chain; past it it stays ABORTED"
    )
    request_poll_secs: float = setting(
        0.5,
        "seconds between a server's looks for requests (a cancel) to the executions it runs; "
        "on PostgreSQL a backup, as a request is announced at once",
    )
    retention_secs: float = setting(
        30 * 86400.0,
        "finished executions with their steps, and decided starts, older than this are "
        "deleted (0: kept for ever); stored answers live `YOKE_IDEMPOTENCY_RETENTION`, at "
        "most this",
    )
    prune_interval_secs: float = setting(
        60.0, "seconds between two prunings (one process prunes at a time, under a lease)"
    )
    audit_retention_secs: float | None = setting(
        None, "control-log entries older than this are deleted (unset: the log is kept)"
    )
    # Traces (`yoke[otel]`): the standard OTEL_* variables configure the exporter.
    tracing: str = setting(
        "off",
        "`otel`: a span for each start's life and each `process()` call, through "
        "OpenTelemetry (the `yoke[otel]` extra), taking the caller's W3C `traceparent`",
    )
    # Schedules (`app.schedules`): when a tick is late and when it was missed.
    schedule_grace_secs: float = setting(
        60.0,
        "a schedule's tick found due less than this long ago is started late; older ticks were "
        "missed (no server ran) and follow the schedule's `catch_up`",
    )
    schedule_poll_secs: float = setting(
        10.0,
        "longest sleep of a server's ticker (it wakes for the next tick, and at once on a "
        "schedule's change: NOTIFY on PostgreSQL, in-process on SQLite)",
    )
    # How every loop waits out a store that does not answer (`yoke.retry`).
    retry_first_pause: float = setting(0.2, "seconds before the second attempt of a store call")
    retry_max_pause: float = setting(5.0, "retry pauses double up to this many seconds")
    retry_jitter: float = setting(
        0.2, "each retry pause is drawn up to this fraction shorter (0 to 1)"
    )
    retry_stopping_attempts: int = setting(
        3, "failed attempts after which a stopping process gives a write up"
    )

    def __post_init__(self) -> None:
        for name in (
            "execution_shutdown_timeout",
            "heartbeat_interval",
            "instance_stale_after",
            "slot_poll_interval",
            "sqlite_busy_timeout",
            "pg_connect_timeout",
            "idempotency_retention",
            "ready_timeout",
            "ha_poll_secs",
            "retention_secs",
            "schedule_grace_secs",
        ):
            _check_seconds(name, getattr(self, name))
        for name in ("request_poll_secs", "prune_interval_secs", "schedule_poll_secs"):
            _check_seconds(name, getattr(self, name))
            if getattr(self, name) <= 0:
                raise BadValue(f"{name} must be > 0 seconds")
        if self.audit_retention_secs is not None:
            _check_seconds("audit_retention_secs", self.audit_retention_secs)
        if self.tracing not in ("off", "otel"):
            raise BadValue(f"tracing must be 'off' or 'otel', got {self.tracing!r}")
        if self.recovery not in ("resume", "abort"):
            raise BadValue(f"recovery must be 'resume' or 'abort', got {self.recovery!r}")
        if self.recovery_max is None:  # a workflow that kills its server is never endless
            raise BadValue("recovery_max must be a number of recoveries (0: none)")
        _check_count("recovery_max", self.recovery_max)
        if not (isinstance(self.ha_lease_ttl_secs, int | float) and self.ha_lease_ttl_secs > 0):
            raise BadValue(f"ha_lease_ttl_secs must be > 0, got {self.ha_lease_ttl_secs!r}")
        _check_count("batch_overlap", self.batch_overlap)
        if self.batch_overlap is not None and not 1 <= self.batch_overlap <= 8:
            raise BadValue(f"batch_overlap must be 1 to 8, got {self.batch_overlap}")
        if self.ha_poll_secs <= 0:
            raise BadValue("ha_poll_secs must be > 0")
        for name in ("max_body_bytes", "max_header_line_bytes", "max_header_bytes"):
            _check_count(name, getattr(self, name))
            if getattr(self, name) < 1024:
                raise BadValue(f"{name} must be at least 1024 bytes, got {getattr(self, name)}")
        _check_seconds("header_timeout_secs", self.header_timeout_secs)
        if self.header_timeout_secs <= 0:
            raise BadValue("header_timeout_secs must be > 0")
        _check_count("max_connections_per_client", self.max_connections_per_client)
        if self.max_connections_per_client is None or self.max_connections_per_client < 1:
            raise BadValue("max_connections_per_client must be at least 1")
        if self.idempotency_retention <= 0:
            raise BadValue("idempotency_retention must be > 0 seconds")
        if self.log_level.lower() not in LOG_LEVELS:
            raise BadValue(
                f"log_level must be one of {', '.join(LOG_LEVELS)}, got {self.log_level!r}"
            )
        if self.log_format not in ("text", "json"):
            raise BadValue(f"log_format must be 'text' or 'json', got {self.log_format!r}")
        for name in (
            "max_running",
            "max_running_per_session",
            "max_running_per_workflow",
            "max_queued",
        ):
            _check_count(name, getattr(self, name))
        _check_count("idempotency_max_per_tenant", self.idempotency_max_per_tenant)
        if self.idempotency_max_per_tenant < 1:
            raise BadValue("idempotency_max_per_tenant must be at least 1")
        _check_count("max_long_polls_per_tenant", self.max_long_polls_per_tenant)
        if self.max_long_polls_per_tenant < 1:
            raise BadValue("max_long_polls_per_tenant must be at least 1")
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
        self.retry()  # refuses a bad retry rule now, naming it

    def retry(self) -> RetryPolicy:
        return RetryPolicy(
            first=self.retry_first_pause,
            most=self.retry_max_pause,
            jitter=self.retry_jitter,
            stopping_attempts=self.retry_stopping_attempts,
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Read `YOKE_<FIELD>` variables (upper-case field names); `overrides` win over them."""
        variables = {f.name: "YOKE_" + f.name.upper() for f in fields(cls)}
        return load_env(cls, variables, env, overrides)

    def with_(self, **changes: Any) -> Settings:
        return replace(self, **changes)


S = TypeVar("S")


def load_env(
    cls: type[S], variables: Mapping[str, str], env: Mapping[str, str] | None, overrides: Any
) -> S:
    """The one settings loader (`Settings`, `ActorSettings`, `ExecutorSettings`): each field of
    the dataclass `cls` named in `variables` is read from its variable in `env` (default: the
    process's environment) and parsed by its type (`_parse`); an unset or blank variable leaves
    the default; `overrides` that are not None win over them. `cls` validates the values."""
    source = os.environ if env is None else env
    values: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        var = variables.get(f.name)
        raw = None if var is None else source.get(var)
        if var is None or raw is None or not raw.strip():
            continue
        values[f.name] = _parse(var, raw.strip(), f.type)
    values.update({k: v for k, v in overrides.items() if v is not None})
    return cls(**values)


def _parse(var: str, raw: str, annotation: object) -> Any:
    kind = str(annotation)
    if kind == "bool":
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off"):
            return False
        raise BadValue(f"{var} must be 1 or 0 (true or false), got {raw!r}")
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


@dataclass(frozen=True, kw_only=True, slots=True)
class EnvVar:
    """One environment variable of yoke, for the generated reference."""

    name: str
    default: str
    help: str


def env_vars(cls: type, name_of: Callable[[str], str] | None = None) -> list[EnvVar]:
    """The variables of a settings dataclass, from its fields' `help` (every field needs one)."""
    out: list[EnvVar] = []
    for f in fields(cls):
        help = f.metadata.get("help")
        if not help:
            raise BadValue(f"{cls.__name__}.{f.name} has no help text for the env reference")
        name = name_of(f.name) if name_of else "YOKE_" + f.name.upper()
        out.append(EnvVar(name=name, default=_shown(f.default), help=help))
    return out


def _shown(default: object) -> str:
    if default is None or default == "":
        return "-"
    if isinstance(default, bool):
        return "1" if default else "0"
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


def env_reference(groups: Sequence[tuple[str, Sequence[EnvVar]]]) -> str:
    """Markdown: one table per group of variables."""
    lines = [
        "# Configuration",
        "",
        "Every environment variable yoke reads, with its default and meaning. This page is",
        "generated from the settings (`yoke settings > docs/CONFIGURATION.md`); a test fails",
        "when they differ.",
        "Command-line options (`yoke serve --log-level ...`) win over the environment.",
    ]
    for title, variables in groups:
        lines += ["", f"## {title}", "", "| variable | default | meaning |", "| --- | --- | --- |"]
        lines += [f"| `{v.name}` | `{v.default}` | {v.help} |" for v in variables]
    return "\n".join(lines) + "\n"
