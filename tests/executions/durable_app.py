"""Workflows of the tests of failures across processes, defined on any app (`define`) and served
as `yoke serve --app tests.executions.durable_app:app`, so a worker process, a `yoke serve`
and the test's own app run the same code.

- `flaky` {"path", "succeed_at", "backoff", "max_attempts"}: one step, `call`, that appends a
  line (the pid that ran it) to `path` and fails until the file has `succeed_at` lines; it
  returns the number of lines. Its retries pause `backoff` seconds.
- `parent`: a step, then a child workflow (`child`) that sleeps for a minute.
- `suicide`: a step that kills its own process with SIGKILL (a workflow that kills its server).
- `echo`: returns its input.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import yoke


def call(path: str, succeed_at: int) -> int:
    with open(path, "a") as f:
        f.write(f"{os.getpid()}\n")
    lines = len(Path(path).read_text().splitlines())
    if lines < succeed_at:
        raise ConnectionError(f"attempt {lines} of {succeed_at}: the service is down")
    return lines


def define(app: yoke.App) -> yoke.App:
    @app.workflow()
    async def flaky(ctx: yoke.Context, input: Any) -> Any:
        rule = yoke.Retry(
            max_attempts=int(input.get("max_attempts", 5)),
            backoff=float(input.get("backoff", 0.01)),
            max_backoff=float(input.get("backoff", 0.01)),
            jitter=0,
        )
        return await ctx.step("call", call, input["path"], int(input["succeed_at"]), retry=rule)

    @app.workflow()
    async def child(ctx: yoke.Context, input: Any) -> Any:
        await asyncio.sleep(60)  # the work a real child would do

    @app.workflow()
    async def parent(ctx: yoke.Context, input: Any) -> Any:
        await ctx.step("before", lambda: 1)
        return await ctx.child("child")

    @app.workflow()
    async def suicide(ctx: yoke.Context, input: Any) -> Any:
        await ctx.step("die", os.kill, os.getpid(), signal.SIGKILL)

    @app.workflow()
    async def echo(ctx: yoke.Context, input: Any) -> Any:
        return input

    return app


app = define(yoke.App())
