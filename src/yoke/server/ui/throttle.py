"""Failed dashboard logins, counted per client so that a token cannot be guessed from the form.

A client (its address as the server sees it: the peer, or what a trusted proxy forwards; an
IPv6 client by its /64, which one host usually holds whole) may fail `failures` times within
`window` seconds; beyond that the form answers 429 with Retry-After, before it looks at the
token, until the oldest of those failures leaves the window. A success does not clear the count
(a valid token in hand says nothing about the guesses made before it).

The form takes a token and nothing else: a token that is not valid names no principal, so there
is no name to count failures by; the address is the one key. Memory is bounded: at most
`max_clients` clients with failures are remembered (the one failed least lately is forgotten
first), each with at most `failures` times. This module must never read a token.
"""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict, deque
from collections.abc import Callable

FAILURES = 10  # failed logins a client may make within WINDOW
WINDOW = 300.0  # seconds
MAX_CLIENTS = 10_000


def client_key(host: str | None) -> str:
    """The key of a client address: an IPv6 address by its /64, anything else as is."""
    if not host:
        return "?"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host[:100]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class LoginThrottle:
    def __init__(
        self,
        *,
        failures: int = FAILURES,
        window: float = WINDOW,
        max_clients: int = MAX_CLIENTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.failures = failures
        self.window = window
        self.max_clients = max_clients
        self._clock = clock
        self._by_key: OrderedDict[str, deque[float]] = OrderedDict()  # least lately failed first

    def __repr__(self) -> str:
        per = f"{self.failures}/{self.window:g}s"
        return f"LoginThrottle(clients={len(self._by_key)}, failures={per})"

    def __len__(self) -> int:
        return len(self._by_key)

    def retry_after(self, key: str) -> float | None:
        """Seconds until `key` may try again, or None if it may now."""
        times = self._by_key.get(key)
        if times is None or len(times) < self.failures:
            return None
        left = times[0] + self.window - self._clock()
        return left if left > 0 else None

    def failed(self, key: str) -> None:
        now = self._clock()
        times = self._by_key.pop(key, None)
        if times is None:
            times = deque(maxlen=self.failures)
            while len(self._by_key) >= self.max_clients:
                self._by_key.popitem(last=False)
        times.append(now)
        self._by_key[key] = times  # now the most lately failed
