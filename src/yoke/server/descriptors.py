"""The file descriptors of a serving process: its open-file limit raised to the hard limit at
start, and the share of it that client connections may hold.

The soft limit is often 1024 (a shell's default) while the hard limit allows far more: a
server that keeps the soft limit lets 1,024 idle connections stop it. Raising the soft limit
is what every long-lived server does; the hard limit stays the operator's bound.

Client connections never take the last descriptors: a **reserve** is kept for what the
process opens besides them (the store's files and pooled connections, the event loop's own
descriptors, the log, executors' sockets). It is a quarter of the limit, at least 128 and at
most 4,096 descriptors (and never more than half the limit): 256 of 1,024, so 768 client
connections; 4,096 from a limit of 16,384 on. uvloop (yoke's loop wherever `resource` exists)
hands each accepted connection to the protocol before it accepts the next, so a burst of
connections is refused or makes room one by one and never passes the capacity by more than one.

This module must never open a connection.
"""

from __future__ import annotations

try:
    import resource
except ImportError:  # pragma: no cover - not on Windows: no limit known, no capacity
    resource = None  # type: ignore[assignment]

RESERVE_FLOOR = 128
RESERVE_CEILING = 4096


def raise_open_file_limit() -> int | None:
    """Raise the soft RLIMIT_NOFILE to the hard limit; the soft limit in force after."""
    if resource is None:  # pragma: no cover
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return None if soft == resource.RLIM_INFINITY else soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):  # a platform bound below the hard limit (macOS's OPEN_MAX)
        return soft
    return target


def connection_capacity(limit: int | None) -> int | None:
    """The client connections a process with this open-file limit may hold (None: unbounded)."""
    if limit is None:
        return None
    return limit - min(max(limit // 4, RESERVE_FLOOR), RESERVE_CEILING, limit // 2)
