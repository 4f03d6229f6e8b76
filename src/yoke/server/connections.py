"""Who may hold a connection to the server, and for how long.

Each open connection holds a file descriptor, and a process has a fixed number of them. A
client that opens connections and sends their heads a byte at a time (or never) can hold every
one, and then the next client's connection is dropped as it is accepted, and the store can
open no file or socket either. Three rules keep descriptors for everyone else:

- **Head deadline.** A request head must be complete `header_timeout` seconds after it began:
  when the connection opened, or, on a kept-alive connection, at the first byte of its next
  request. Trickling bytes does not extend it.
- **Per client.** One client address holds at most `per_client` connections (an IPv6 client:
  one /64, what one host is usually given). A trusted proxy is not one client: it carries many,
  so its connections count only towards the total (bounding each of its clients is its job).
- **Capacity.** The server holds at most `capacity` client connections: its open-file limit
  less a reserve for the store, the event loop and the log. Past it, a new connection takes
  the place of the connection that has waited longest, for a head or idle between requests;
  a connection whose request is in progress is never closed to make room. With none waiting,
  the new connection is refused.

A slow client thus loses its connections to new ones, oldest first, while a client whose head
arrives at once is served: the capacity is never a wall that the slowest clients hold.

Connections are opaque keys (the protocol objects). `_waiting` keeps those between requests in
the order they began to wait (a dict keeps insertion order, and a connection that waits again
is put back at the end), so the oldest is the first: finding what to close is O(1), and the
walk for expired heads stops at the first one still in time.

This module must never do I/O or read a clock: the protocol asks it and does what it says.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Hashable
from dataclasses import dataclass, field
from enum import Enum
from typing import Generic, TypeVar

C = TypeVar("C", bound=Hashable)


class Phase(Enum):
    HEAD = "head"  # a request head is owed: the connection is new, or a request has begun
    REQUEST = "request"  # the head is complete and the answer not yet finished
    IDLE = "idle"  # kept alive between an answer and the next request's first byte


# Read on every request: a module global is found in a tenth of the time an Enum member is.
_HEAD, _IDLE = Phase.HEAD, Phase.IDLE


class Verdict(Enum):
    ADMITTED = "admitted"
    TOO_MANY_FROM_CLIENT = "too many from client"  # its address holds `per_client` already
    FULL = "full"  # at capacity, and no connection waits to be closed instead


class TrustedProxies:
    """The addresses of `forwarded_allow_ips` (addresses, CIDR ranges, `*` for any), as
    uvicorn reads them for the forwarded headers."""

    def __init__(self, spec: str) -> None:
        items = [item.strip() for item in spec.split(",") if item.strip()]
        self.any = "*" in items
        self._networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        self._literals: set[str] = set()
        for item in items:
            try:
                self._networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                self._literals.add(item)  # a unix socket path, or a name uvicorn matches as is
        self._cached = functools.lru_cache(maxsize=4096)(self._contains)

    def __contains__(self, host: str) -> bool:
        return self._cached(host)

    def _contains(self, host: str) -> bool:
        if self.any or host in self._literals:
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in network for network in self._networks)


@functools.lru_cache(maxsize=4096)
def client_of(host: str) -> str:
    """The key a peer address is counted under: an IPv4 address itself, an IPv6 one its /64."""
    if ":" not in host:
        return host
    try:
        address = ipaddress.IPv6Address(host.split("%", 1)[0])
    except ValueError:
        return host
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(ipaddress.IPv6Network((address, 64), strict=False))


@dataclass(frozen=True, kw_only=True, slots=True)
class ConnectionLimits:
    header_timeout: float = 10.0  # seconds from a head's beginning to its end
    per_client: int = 256  # connections of one client address at most
    capacity: int | None = None  # client connections of the server at most; None: no bound
    trusted: TrustedProxies = field(default_factory=lambda: TrustedProxies(""))


@dataclass(frozen=True, kw_only=True, slots=True)
class ConnectionStats:
    open: int
    heads: int  # connections owed a head
    idle: int  # kept alive between requests
    clients: int  # distinct client addresses with a connection open (trusted proxies apart)
    refused_per_client: int  # since the start, each a new connection closed at once
    refused_full: int
    made_room: int  # waiting connections closed for a new one
    timed_out: int  # heads not complete by their deadline


class ConnectionTable(Generic[C]):
    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self._client: dict[C, str | None] = {}  # every open connection: its client key
        self._per_client: dict[str, int] = {}
        self._waiting: dict[C, tuple[float, Phase]] = {}  # oldest first, see the module doc
        self._refused_per_client = 0
        self._refused_full = 0
        self._made_room = 0
        self._timed_out = 0

    @property
    def open(self) -> int:
        return len(self._client)

    def admit(self, conn: C, peer: str | None, now: float) -> tuple[Verdict, C | None]:
        """Take a new connection from `peer` (None: no address, a unix socket), or refuse it.
        When admitted at capacity, the second value is the connection to close to make room:
        the table has let it go already."""
        key = None if peer is None or peer in self.limits.trusted else client_of(peer)
        if key is not None and self._per_client.get(key, 0) >= self.limits.per_client:
            self._refused_per_client += 1
            return Verdict.TOO_MANY_FROM_CLIENT, None
        room: C | None = None
        capacity = self.limits.capacity
        if capacity is not None and len(self._client) >= capacity:
            room = next(iter(self._waiting), None)
            if room is None:
                self._refused_full += 1
                return Verdict.FULL, None
            self.forget(room)
            self._made_room += 1
        self._client[conn] = key
        if key is not None:
            self._per_client[key] = self._per_client.get(key, 0) + 1
        self._waiting[conn] = (now, _HEAD)
        return Verdict.ADMITTED, room

    def head_begins(self, conn: C, now: float) -> None:
        """The first byte of a request arrived: an idle connection now owes a head. (A new
        connection's deadline runs from its opening, and a request pipelined behind one in
        progress waits for that one's answer first.)"""
        waiting = self._waiting.get(conn)
        if waiting is not None and waiting[1] is _IDLE:
            del self._waiting[conn]
            self._waiting[conn] = (now, _HEAD)

    def head_complete(self, conn: C) -> None:
        self._waiting.pop(conn, None)

    def answered(self, conn: C, now: float, *, head_begun: bool) -> None:
        """An answer is finished and no request is next in line: the connection waits, idle,
        or for the rest of a head whose first bytes came in already."""
        if conn in self._client:
            self._waiting.pop(conn, None)
            self._waiting[conn] = (now, _HEAD if head_begun else _IDLE)

    def forget(self, conn: C) -> None:
        """The connection is closed (or about to be): it counts no more. Idempotent."""
        if conn not in self._client:
            return
        key = self._client.pop(conn)
        self._waiting.pop(conn, None)
        if key is not None:
            left = self._per_client[key] - 1
            if left:
                self._per_client[key] = left
            else:
                del self._per_client[key]

    def expired(self, now: float) -> list[C]:
        """The connections whose head is past its deadline; the table has let them go."""
        deadline = now - self.limits.header_timeout
        late = []
        for conn, (since, phase) in self._waiting.items():
            if since > deadline:
                break  # every later one began to wait later still
            if phase is _HEAD:
                late.append(conn)
        for conn in late:
            self.forget(conn)
        self._timed_out += len(late)
        return late

    def phase(self, conn: C) -> Phase | None:
        if conn not in self._client:
            return None
        waiting = self._waiting.get(conn)
        return Phase.REQUEST if waiting is None else waiting[1]

    def stats(self) -> ConnectionStats:
        heads = sum(1 for _, phase in self._waiting.values() if phase is Phase.HEAD)
        return ConnectionStats(
            open=len(self._client),
            heads=heads,
            idle=len(self._waiting) - heads,
            clients=len(self._per_client),
            refused_per_client=self._refused_per_client,
            refused_full=self._refused_full,
            made_room=self._made_room,
            timed_out=self._timed_out,
        )

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"<ConnectionTable open={s.open} heads={s.heads} idle={s.idle} "
            f"clients={s.clients} refused={s.refused_per_client}+{s.refused_full} "
            f"made_room={s.made_room} timed_out={s.timed_out}>"
        )
