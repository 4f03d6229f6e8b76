"""One call of the v1 API as plain data, and the rule that says whether to send it again.

`Call` is what a client method asks for (method, path, query, JSON body, Idempotency-Key); both
clients send it with their own httpx client, so the sync and the async client cannot disagree
about what a method sends. `Retries` decides, from a call and what came back, whether to try
again and after how long:

- a 503 with `Retry-After` (a standby, a server shutting down, a store outage: nothing was
  done) is tried again, whatever the call, after at least the time the server asked;
- a failure to connect (nothing was sent) is tried again, whatever the call;
- a connection lost after the request went out, and a proxy's 502 or 504, only for a call
  that is safe to send twice: a read, a PUT, or a creating POST with an Idempotency-Key (the
  server replays the first answer to the same key). A start, restart, resume or event append
  always has a key: the client makes one when the caller gives none, and sends the same key
  on every attempt, so a retry can never start twice.

Tries are bounded (`attempts`), and so is a `Retry-After` the client waits out (`longest`).
This module must never do I/O.
"""

from __future__ import annotations

import enum
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from yoke.client.problems import retry_after
from yoke.retry import RetryPolicy

DEFAULT_URL = "http://127.0.0.1:8000"  # where `yoke serve` listens by default
DEFAULT_TIMEOUT = 30.0
NO_BODY: Any = object()
PAUSES = RetryPolicy(first=0.2, most=5.0, jitter=0.2)  # between tries, doubling


def new_key() -> str:
    """A fresh Idempotency-Key (128 random bits)."""
    return os.urandom(16).hex()


def segment(value: str) -> str:
    """One path segment: an id or name may hold any character, `/` included."""
    return quote(value, safe="")


@dataclass(frozen=True, kw_only=True, slots=True)
class Call:
    method: str
    path: str
    params: Mapping[str, Any] = field(default_factory=dict)  # None values are left out
    body: Any = NO_BODY
    key: str | None = None  # the Idempotency-Key, the same on every attempt
    wait: float | None = None  # a long-poll: the answer may take this long more
    extra: Mapping[str, str] = field(default_factory=dict)  # more headers (a raw call's)

    @property
    def replayable(self) -> bool:
        """Sent twice, it does no more than once."""
        return self.method in ("GET", "HEAD", "PUT") or self.key is not None

    def query(self) -> dict[str, str]:
        return {k: _text(v) for k, v in self.params.items() if v is not None}

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", **self.extra}
        if self.body is not NO_BODY:
            headers["Content-Type"] = "application/json"
        if self.key is not None:
            headers["Idempotency-Key"] = self.key
        return headers

    def content(self) -> bytes | None:
        if self.body is NO_BODY:
            return None
        return json.dumps(self.body, separators=(",", ":"), allow_nan=False).encode()

    def timeout(self, base: float) -> httpx.Timeout:
        return httpx.Timeout(base + (self.wait or 0.0), connect=min(base, 10.0))


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class Failure(enum.Enum):
    """How a call went without an answer."""

    NOT_SENT = "not sent"  # the connection was never made: the server saw nothing
    LOST = "lost"  # sent, then the connection failed: the server may have acted


def failure_of(exc: httpx.TransportError) -> Failure:
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return Failure.NOT_SENT
    return Failure.LOST


@dataclass(frozen=True, kw_only=True, slots=True)
class Answer:
    status: int
    headers: Mapping[str, str]  # names in lower case
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass(frozen=True, kw_only=True, slots=True)
class Retries:
    attempts: int = 4  # tries in all, the first included
    pauses: RetryPolicy = PAUSES
    longest: float = 30.0  # a Retry-After longer than this is not waited out

    def after_answer(self, call: Call, answer: Answer, tries: int) -> float | None:
        """Seconds to wait before trying `call` again, or None to take this answer."""
        if tries >= self.attempts:
            return None
        if answer.status == 503:
            after = retry_after(answer.headers)
            if after is None or after > self.longest:
                return None
            return max(after, self.pauses.pause(tries))
        if answer.status in (502, 504) and call.replayable:
            return self.pauses.pause(tries)
        return None

    def after_failure(self, call: Call, failure: Failure, tries: int) -> float | None:
        """Seconds to wait before trying `call` again, or None to give up."""
        if tries >= self.attempts:
            return None
        if failure is Failure.NOT_SENT or call.replayable:
            return self.pauses.pause(tries)
        return None
