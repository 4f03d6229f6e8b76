"""A failed execution keeps `error: {type, message, traceback, step, attempt}`: the traceback is
its innermost 16 KiB, the message bounded, the step named when the workflow's exception came
out of a step (or was raised from one); the failing step is in its steps, FAILED with its error
and attempts; the server logs one line per failed execution, control characters escaped. Both
stores, and over HTTP."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

import yoke
from yoke.executions import Context, ExecutionStatus, StepStatus
from yoke.executions.failures import MESSAGE_BYTES, TRACEBACK_BYTES, printable, tail

from .helpers import make_app

QUICK = yoke.Retry(max_attempts=2, backoff=0.01, max_backoff=0.01)


def _deep(n: int) -> None:
    if n == 0:
        raise ValueError("bottom " + "é" * 20_000)  # a message past its bounds, not ASCII
    _deep(n - 1)


class Refused(Exception):
    pass


async def test_the_error_is_bounded_and_names_its_step(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(database_url)

    @app.workflow()
    async def deep(ctx: Context, input: Any) -> Any:
        await ctx.step("ok", lambda: 1)
        try:
            await ctx.step("dig", _deep, 400, retry=QUICK)
        except ValueError as exc:
            raise Refused("gave up digging\nEVIL\x1b[31m line") from exc

    @app.workflow()
    async def outside(ctx: Context, input: Any) -> Any:
        await ctx.step("fine", lambda: 1)
        raise KeyError("not from a step")

    caplog.set_level(logging.WARNING, logger="yoke.executions")
    async with app.running():
        a = await app.executions.start("deep")
        b = await app.executions.start("outside")
        assert a.execution_id is not None and b.execution_id is not None
        failed = await app.executions.wait(a.execution_id, 10)
        other = await app.executions.wait(b.execution_id, 10)
        assert app.store is not None
        steps = await app.store.steps_of(a.execution_id)
    e = failed.error
    assert failed.status is ExecutionStatus.FAILED and e is not None
    assert (e.type, e.step, e.attempt) == ("Refused", "dig", 2)
    assert e.message == "gave up digging\nEVIL\x1b[31m line"
    assert e.traceback is not None
    assert len(e.traceback.encode()) <= TRACEBACK_BYTES
    assert e.traceback.startswith("[... ") and e.traceback.rstrip().endswith(
        "Refused: gave up digging\nEVIL\x1b[31m line"
    )
    assert "in deep" in e.traceback  # the frames nearest the raise are the ones kept
    assert [(s.name, s.status, s.attempts) for s in steps] == [
        ("ok", StepStatus.SUCCEEDED, 1),
        ("dig", StepStatus.FAILED, 2),
    ]
    step_error = json.loads(steps[1].error or "{}")
    assert step_error["type"] == "ValueError" and step_error["attempt"] == 2
    assert len(step_error["message"].encode()) <= MESSAGE_BYTES
    assert step_error["message"].endswith("bytes cut]")
    assert other.error is not None and (other.error.type, other.error.step) == ("KeyError", None)
    lines = [r.getMessage() for r in caplog.records if "execution failed" in r.getMessage()]
    assert len(lines) == 2  # one per failed execution, none per failed attempt
    mine = next(line for line in lines if a.execution_id in line)
    assert "\n" not in mine and "\x1b" not in mine
    assert "workflow=deep" in mine and "step=dig attempt=2" in mine
    assert "gave up digging\\nEVIL\\x1b[31m line" in mine


def test_text_bounds_cut_at_character_boundaries() -> None:
    text = "ü" * 10_000  # 20,000 bytes
    cut = tail(text, 1000)
    assert len(cut.encode()) <= 1000 and cut.startswith("[... ") and cut.endswith("ü")
    assert printable("a\u2028b\u202ec\\", 100) == "a\\u2028b\\u202ec\\\\"
    assert printable("x" * 600) == "x" * 500 + " [...]"


async def test_an_error_stores_what_no_database_would_store_as_text(database_url: str) -> None:
    app = make_app(database_url)

    @app.workflow()
    async def nul(ctx: Context, input: Any) -> Any:
        raise RuntimeError("a NUL \x00 and a lone surrogate \ud800")

    async with app.running():
        s = await app.executions.start("nul")
        assert s.execution_id is not None
        failed = await app.executions.wait(s.execution_id, 10)
    assert failed.error is not None
    assert failed.error.message == "a NUL \x00 and a lone surrogate \ud800"
