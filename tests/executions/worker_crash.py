"""A worker process for test_crash: runs one execution past its first step, queues another,
says so, and waits to be killed with SIGKILL."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from yoke.app import App
from yoke.executions import Context, Limits
from yoke.executions.model import encode_json

from .helpers import fast_settings


async def main(url: str) -> None:
    app = App(
        settings=fast_settings(url, heartbeat_interval=0.1, instance_stale_after=1.0),
        limits=Limits(max_running=1),
    )

    @app.workflow("crashy")
    async def crashy(ctx: Context, input: Any) -> Any:
        await ctx.step("one", lambda: {"pid": os.getpid()})
        print("RUNNING", ctx.execution_id, flush=True)
        await asyncio.Event().wait()

    async with app.running():
        await app.executions.start("crashy", {"x": 1})
        queued = await app.executions.start("crashy", {"x": 2})
        print("QUEUED", queued.start_id, encode_json(queued.status.name, "s"), flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
