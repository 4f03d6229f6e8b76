"""A step's retries: the rule (`Retry`), a step's timeout (`StepTimeout`), and the bookkeeping of
its attempts (`Attempts`).

`Retry(max_attempts=3, backoff=0.5, max_backoff=60, jitter=0.2, retry_on=(Exception,))`: a step
that raises one of `retry_on` is tried again, up to `max_attempts` attempts in all, after a
pause that follows yoke's one retry rule (`yoke.retry.RetryPolicy.pause`: `backoff`, doubled
for each failure more up to `max_backoff`, drawn up to `jitter` shorter). `ctx.step(...,
retry=)` sets it for one step, `@app.workflow(retry=)` for the steps of a workflow that name
none; without either a step is tried once.

Attempts are counted across resumes and recoveries, because every failed attempt is recorded
(RETRYING, with the time the next one is due) before the pause: an execution resumed or
recovered from that record makes the next attempt when it is due, numbered on, within the same
budget. A step that gave up (FAILED) and is run again by a resume gets a new budget of
`max_attempts`, its attempts still numbered on from the record.

This module must never await, touch the store or read a clock: `Attempts` is told the
record it starts from and each failure, and says what follows.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from yoke.errors import BadType, BadValue
from yoke.retry import RetryPolicy
from yoke.store.records import StepRow, StepStatus

MAX_ATTEMPTS = 1_000_000


class StepTimeout(TimeoutError):
    """A step's attempt ran past its `timeout`: raised in the workflow (retried like any other
    exception its `retry_on` names; `TimeoutError` is an `Exception`)."""

    def __init__(self, step: str, timeout: float) -> None:
        super().__init__(f"step {step!r} ran past its timeout of {timeout:g} s")
        self.step = step
        self.timeout = timeout


@dataclass(frozen=True, kw_only=True, slots=True)
class Retry:
    max_attempts: int = 3
    backoff: float = 0.5
    max_backoff: float = 60.0
    jitter: float = 0.2
    retry_on: tuple[type[BaseException], ...] = (Exception,)

    def __post_init__(self) -> None:
        n = self.max_attempts
        if isinstance(n, bool) or not isinstance(n, int):
            raise BadType("Retry.max_attempts must be an int")
        if not 1 <= n <= MAX_ATTEMPTS:
            raise BadValue(f"Retry.max_attempts must be from 1 to {MAX_ATTEMPTS}, got {n}")
        for name in ("backoff", "max_backoff", "jitter"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise BadType(f"Retry.{name} must be a number")
            if not math.isfinite(value) or value < 0:
                raise BadValue(f"Retry.{name} must be a finite number >= 0, got {value}")
        if self.max_backoff < self.backoff:
            raise BadValue("Retry.max_backoff must not be shorter than Retry.backoff")
        if self.jitter > 1:
            raise BadValue(f"Retry.jitter must be at most 1, got {self.jitter}")
        kinds = self.retry_on
        if isinstance(kinds, type):
            kinds = (kinds,)
        if not isinstance(kinds, tuple) or not all(
            isinstance(k, type) and issubclass(k, BaseException) for k in kinds
        ):
            raise BadType("Retry.retry_on must be an exception class or a tuple of them")
        object.__setattr__(self, "retry_on", kinds)

    @property
    def policy(self) -> RetryPolicy:
        return RetryPolicy(first=self.backoff, most=self.max_backoff, jitter=self.jitter)

    def pause(self, failures: int, rng: random.Random | None = None) -> float:
        """The pause after `failures` failed attempts of the current budget (1 = the first)."""
        return self.policy.pause(failures, rng)

    def retries(self, exc: BaseException) -> bool:
        return isinstance(exc, self.retry_on)


ONCE = Retry(max_attempts=1)  # a step with no retry rule


def check_retry(retry: object) -> Retry | None:
    if retry is not None and not isinstance(retry, Retry):
        raise BadType(f"retry must be a yoke.Retry or None, not {type(retry).__name__}")
    return retry


def check_step_timeout(timeout: object, what: str = "timeout") -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise BadType(f"{what} must be a number of seconds or None")
    if not math.isfinite(timeout) or timeout <= 0:
        raise BadValue(f"{what} must be a finite number of seconds > 0, got {timeout}")
    return float(timeout)


class Attempts:
    """The attempts of one step in one execution, from the record it starts from (None: never
    tried). `begin()` numbers the next attempt; `failed(exc)` says whether another follows and
    after what pause (None: the step gives up)."""

    __slots__ = ("due", "first", "made", "rule")

    def __init__(self, rule: Retry, recorded: StepRow | None) -> None:
        self.rule = rule
        self.made = 0  # attempts made so far, counted on from the record
        self.first = 1  # the first attempt of the current budget
        self.due: float | None = None  # when the next attempt is due (wall clock)
        if recorded is not None and recorded.status is not StepStatus.SUCCEEDED:
            self.made = recorded.attempts
            if recorded.status is StepStatus.FAILED:  # run again after it gave up: new budget
                self.first = recorded.attempts + 1
            else:
                self.first = recorded.first_attempt
                self.due = recorded.retry_at

    def __repr__(self) -> str:
        return f"Attempts(made={self.made}, first={self.first}, due={self.due}, {self.rule})"

    def begin(self) -> int:
        self.made += 1
        self.due = None
        return self.made

    def failed(self, exc: BaseException, rng: random.Random | None = None) -> float | None:
        used = self.made - self.first + 1
        if used >= self.rule.max_attempts or not self.rule.retries(exc):
            return None
        return self.rule.pause(used, rng)
