"""How every loop of yoke waits out a store that does not answer: one policy, one helper.

`RetryPolicy` is the rule (from `Settings`, `YOKE_RETRY_*`): the first pause, the longest, the
jitter, and the give-up rule of a stopping process. `Backoff` is the pause state of one loop
(`failed()` gives the next pause, doubling with jitter; `ok()` starts over); `until_done` runs a
write until the store takes it. The drain, the completions, the custom pick, the worker
heartbeat, the timers, an execution's finish, a grant batch's read-back, the PostgreSQL
listeners, the restarts of executor processes and portals, a re-read of another process's rows
and SQLite's switch of a new file to WAL all wait through these.

Only a transient error is waited out (`yoke.errors.TRANSIENT`: the store did not answer). A
permanent one (a constraint, a value the store refuses) would get the same answer forever, so
`until_done` raises it at once and each caller handles it where it happens: a claimed actor
event becomes a dead letter with the error (`actors/refusals.py`), an execution's end is
recorded FAILED with it. A loop that holds nothing while it waits (the claimer, a heartbeat,
the timers, the lifecycle's observation) goes on after a permanent error, logged as an error
(`severity`) and after the longest pause (`Backoff.failed(exc)`), not in a quick retry.

Jitter: each pause is drawn from [pause * (1 - jitter), pause], so processes that lost the same
store at the same moment do not all come back in step. The draw comes from an injected
`random.Random` where a test needs it repeatable.

This module must never import a part of yoke but `errors`, and never reads a clock: it only
sleeps the pauses it computes.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from yoke.errors import TRANSIENT, BadType, BadValue, StoreUnavailable, YokeError

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    first: float = 0.2  # seconds before the second attempt
    most: float = 5.0  # pauses double up to this: a returning store is noticed soon
    jitter: float = 0.2  # each pause is drawn from [p * (1 - jitter), p]
    stopping_attempts: int = 3  # a stopping process gives a write up after this many failures

    def __post_init__(self) -> None:
        for name in ("first", "most", "jitter"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise BadType(f"retry {name} must be a number, not {type(value).__name__}")
            if not math.isfinite(value) or value < 0:
                raise BadValue(f"retry {name} must be a finite number >= 0, got {value}")
        if self.jitter > 1:
            raise BadValue(f"retry jitter must be at most 1, got {self.jitter}")
        if self.most < self.first:
            raise BadValue("the longest retry pause must not be shorter than the first")
        n = self.stopping_attempts
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise BadValue(f"retry stopping_attempts must be an int >= 1, got {n!r}")

    def pause(self, failures: int, rng: random.Random | None = None) -> float:
        """The pause after `failures` failures in a row (1 = the first): the first pause,
        doubled for each failure more up to the longest, drawn with jitter. For a loop that
        keeps its failure count elsewhere (an executor's crashes, a portal's restarts)."""
        pause = min(self.first * 2.0 ** min(max(failures, 1) - 1, 64), self.most)
        return pause * (1 - self.jitter * (rng or _RNG).random())

    def starting_at(self, first: float) -> RetryPolicy:
        """The same rule from another first pause (a loop configured with its own)."""
        return replace(self, first=first, most=max(self.most, first))


class Backoff:
    """The pause state of one loop: `failed()` after a failure gives the pause to sleep (the
    first, then doubling to the longest, each drawn with jitter); `ok()` after a success."""

    __slots__ = ("_policy", "_rng", "attempts")

    def __init__(self, policy: RetryPolicy, rng: random.Random | None = None) -> None:
        self._policy = policy
        self._rng = rng or _RNG
        self.attempts = 0  # failures since the last success

    def __repr__(self) -> str:
        return f"Backoff(attempts={self.attempts}, policy={self._policy})"

    def failed(self, exc: BaseException | None = None) -> float:
        """The pause after a failure. After a permanent error (`exc` not transient) it is the
        longest: asked again soon, the store would give the same answer."""
        self.attempts += 1
        if exc is not None and not isinstance(exc, TRANSIENT):
            return self._policy.most
        return self._policy.pause(self.attempts, self._rng)

    def ok(self) -> None:
        self.attempts = 0

    def give_up(self, stopping: bool) -> bool:
        """The give-up rule: only a stopping process gives up, after `stopping_attempts`."""
        return stopping and self.attempts >= self._policy.stopping_attempts


def severity(exc: BaseException) -> int:
    """How a loop that goes on after `exc` logs it: a transient error is a warning (it waits
    the store out), a permanent one an error (someone must look: it will not pass by itself)."""
    return logging.WARNING if isinstance(exc, TRANSIENT) else logging.ERROR


async def until_done(
    write: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    what: str,
    stopping: Callable[[], bool],
    log: logging.Logger,
    transient: tuple[type[YokeError], ...] = TRANSIENT,
) -> tuple[T, int] | None:
    """`await write()` until it succeeds; a `transient` error (the store is down) is logged
    and retried after a `Backoff` pause. Any other error is raised at once: the store refused
    the write for good, and its caller handles that where it happens. Returns the answer
    and the attempts it took (after more than one, an earlier attempt may have been written
    though its answer was lost). Returns None only once `stopping()` and the policy's give-up
    rule says so."""
    backoff: Backoff | None = None  # made at the first failure: most writes need none
    while True:
        try:
            return await write(), 1 if backoff is None else backoff.attempts + 1
        except transient as exc:
            if backoff is None:
                backoff = Backoff(policy)
            pause = backoff.failed()
            if backoff.give_up(stopping()):
                log.error("%s was given up (stopping): %s", what, exc)
                return None
            log.warning(
                "%s failed (attempt %d, retrying in %.2fs): %s", what, backoff.attempts, pause, exc
            )
            await asyncio.sleep(pause)


async def within(seconds: float | None, what: str, aw: Awaitable[T]) -> T:
    """`await aw`, given `seconds` (None: no bound) to answer; past them `StoreUnavailable` is
    raised instead (an answer a caller can act on, HTTP 503 with Retry-After, rather than a
    request that hangs with the store). `aw` runs as a task of its own and is left to end by
    itself: cancelling a query on a silent connection can itself wait for the network, and
    what `aw` handed to others (a batch already sent) goes on without it anyway."""
    if seconds is None:
        return await aw
    task = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait([task], timeout=seconds)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if done:
        return task.result()
    _ABANDONED.add(task)
    task.add_done_callback(_forget)
    raise no_answer(seconds, what)


def no_answer(seconds: float, what: str) -> StoreUnavailable:
    """The error of a wait for the store given up after `seconds` (`within`)."""
    return StoreUnavailable(
        f"the store did not answer within {seconds:g} s (trying to {what}); if it was "
        "recorded meanwhile, a retry with the same Idempotency-Key finds it"
    )


_ABANDONED: set[asyncio.Future[Any]] = set()  # waits given up on, kept until they end


def _forget(task: asyncio.Future[Any]) -> None:
    _ABANDONED.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: nobody waits for it any more


_RNG = random.Random()
