"""A worker process for the recovery tests: `python -m tests.executions.worker_durable URL
RECOVERY_MAX [WORKFLOW INPUT_JSON]` runs an app with `durable_app`'s workflows (heartbeat every
0.1 s, taken for dead after 1 s of silence); it prints `READY <instance id>`, then, given a
workflow, starts it and prints `STARTED <execution id>`; then it runs until killed, recovering
the executions of dead processes like any server."""

from __future__ import annotations

import asyncio
import json
import sys

from yoke.app import App

from .durable_app import define
from .helpers import fast_settings


async def main(url: str, recovery_max: int, workflow: str | None, payload: str | None) -> None:
    settings = fast_settings(
        url, heartbeat_interval=0.1, instance_stale_after=1.0, recovery_max=recovery_max
    )
    app = define(App(settings=settings))
    async with app.running():
        print("READY", app.instance_id, flush=True)
        if workflow is not None:
            start = await app.executions.start(workflow, json.loads(payload or "null"))
            print("STARTED", start.execution_id, flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    url, most, *rest = sys.argv[1:]
    workflow, payload = (rest[0], rest[1]) if rest else (None, None)
    asyncio.run(main(url, int(most), workflow, payload))
