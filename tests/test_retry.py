"""The one retry rule every loop of yoke waits through (`yoke.retry`), and its settings."""

from __future__ import annotations

import logging
import random
import re
from pathlib import Path

import pytest

import yoke
from yoke.config import Settings
from yoke.errors import TRANSIENT, BadValue, Conflict, StoreError, StoreUnavailable
from yoke.retry import Backoff, RetryPolicy, severity, until_done

log = logging.getLogger("tests.retry")


def test_pauses_double_from_the_first_to_the_longest_with_jitter_below_each() -> None:
    policy = RetryPolicy(first=0.1, most=0.5, jitter=0.2)
    b = Backoff(policy, random.Random(7))
    pauses = [b.failed() for _ in range(6)]
    for pause, nominal in zip(pauses, [0.1, 0.2, 0.4, 0.5, 0.5, 0.5], strict=True):
        assert nominal * 0.8 <= pause <= nominal
    assert len(set(pauses[3:])) == 3  # drawn, not one fixed value: processes do not move in step
    assert b.attempts == 6
    b.ok()
    assert b.attempts == 0 and 0.08 <= b.failed() <= 0.1


def test_without_jitter_the_pauses_are_exact() -> None:
    b = Backoff(RetryPolicy(first=1.0, most=3.0, jitter=0.0))
    assert [b.failed() for _ in range(4)] == [1.0, 2.0, 3.0, 3.0]


def test_only_a_stopping_process_gives_up_and_only_after_its_attempts() -> None:
    b = Backoff(RetryPolicy(stopping_attempts=2))
    b.failed()
    assert not b.give_up(True)
    b.failed()
    assert b.give_up(True) and not b.give_up(False)


async def test_until_done_retries_a_store_error_and_counts_the_attempts() -> None:
    calls = 0

    async def write() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise StoreUnavailable("down")
        return "ok"

    policy = RetryPolicy(first=0.001, most=0.002)
    got = await until_done(write, policy=policy, what="a write", stopping=lambda: False, log=log)
    assert got == ("ok", 3)


async def test_until_done_gives_up_once_stopping_after_the_policy_attempts() -> None:
    calls = 0

    async def write() -> None:
        nonlocal calls
        calls += 1
        raise StoreUnavailable("down")

    policy = RetryPolicy(first=0.001, most=0.002, stopping_attempts=4)
    got = await until_done(write, policy=policy, what="a write", stopping=lambda: True, log=log)
    assert (got, calls) == (None, 4)


async def test_until_done_lets_other_errors_through() -> None:
    async def write() -> None:
        raise ValueError("a bug, not an outage")

    with pytest.raises(ValueError, match="a bug"):
        await until_done(write, policy=RetryPolicy(), what="w", stopping=lambda: False, log=log)


def test_the_policy_comes_from_the_environment_and_bad_values_are_named() -> None:
    s = Settings.from_env(
        {"YOKE_RETRY_FIRST_PAUSE": "0.5", "YOKE_RETRY_MAX_PAUSE": "8", "YOKE_RETRY_JITTER": "0"}
    )
    assert s.retry() == RetryPolicy(first=0.5, most=8.0, jitter=0.0, stopping_attempts=3)
    with pytest.raises(BadValue, match="longest retry pause"):
        Settings.from_env({"YOKE_RETRY_FIRST_PAUSE": "9", "YOKE_RETRY_MAX_PAUSE": "1"})
    with pytest.raises(BadValue, match="jitter"):
        Settings(retry_jitter=2.0)


def test_pause_after_n_failures_doubles_to_the_longest_with_jitter_below() -> None:
    policy = RetryPolicy(first=0.5, most=3.0, jitter=0.2)
    rng = random.Random(7)
    for failures, full in ((1, 0.5), (2, 1.0), (3, 2.0), (4, 3.0), (10_000, 3.0)):
        pause = policy.pause(failures, rng)
        assert full * 0.8 <= pause <= full
    assert RetryPolicy(first=0.5, most=3.0, jitter=0).pause(2) == 1.0


def test_no_loop_of_yoke_doubles_a_pause_of_its_own() -> None:
    """Every backoff goes through `yoke.retry` (one rule, with jitter): a loop that doubles
    its own pause is a second rule."""
    src = Path(yoke.__file__).parent
    doubling = re.compile(r"min\([^)]*\*\s*2\b|\b2\s*\*\*\s*\(|\*=\s*2\b")
    found = [
        f"{path.relative_to(src)}:{n}"
        for path in sorted(src.rglob("*.py"))
        if path.name != "retry.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if doubling.search(line)
    ]
    assert found == []


async def test_until_done_raises_a_permanent_store_error_at_once() -> None:
    calls = 0

    async def write() -> None:
        nonlocal calls
        calls += 1
        raise Conflict("constraint violated: the same answer every time")

    with pytest.raises(Conflict):
        await until_done(write, policy=RetryPolicy(), what="w", stopping=lambda: False, log=log)
    assert calls == 1  # not retried: asked again, the store would refuse it again


def test_a_loop_waits_the_longest_pause_after_a_permanent_error() -> None:
    b = Backoff(RetryPolicy(first=0.1, most=4.0, jitter=0.0))
    assert b.failed(StoreUnavailable("down")) == 0.1
    assert b.failed(StoreError("refused")) == 4.0
    assert severity(StoreUnavailable("down")) == logging.WARNING
    assert severity(Conflict("refused")) == logging.ERROR
    assert (StoreUnavailable,) == TRANSIENT  # the one list: a new entry is a decision
