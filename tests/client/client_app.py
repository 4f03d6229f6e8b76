"""The app the client tests serve (`yoke serve --app tests.client.client_app:app`): workflows
that return, fail, record steps or hold a slot, an actor that counts the events of its
instances, and a reviewer that vetoes one limits change (`max_queued` 13)."""

from __future__ import annotations

import asyncio
from typing import Any

import yoke
from yoke.actors import ActorCtx, Event
from yoke.executions import Change

app = yoke.App()


@app.workflow()
async def echo(ctx: yoke.Context, input: Any) -> Any:
    return input


@app.workflow()
async def fail(ctx: yoke.Context, input: Any) -> Any:
    raise RuntimeError(f"asked to fail: {input}")


@app.workflow()
async def hold(ctx: yoke.Context, input: Any) -> Any:
    seconds = float(input) if isinstance(input, int | float) else 60.0
    await asyncio.sleep(seconds)  # the work a real workflow would do
    return {"slept": seconds}


@app.workflow()
async def steps(ctx: yoke.Context, input: Any) -> Any:
    a = await ctx.step("a", lambda: 1)
    b = await ctx.child(echo, {"x": a})
    return {"a": a, "b": b}


@app.actor(subscribe=["ticks"], key="id")
async def counter(ctx: ActorCtx, event: Event) -> None:
    await ctx.state.update(lambda s: {**s, "n": s.get("n", 0) + 1})


def unlucky(change: Change) -> str | None:
    if change.kind == "limits" and change.after.get("max_queued") == 13:
        return "13 is unlucky"
    return None


app.add_reviewer(unlucky)


@app.workflow()
async def approval(ctx: yoke.Context, input: Any) -> Any:
    return await ctx.wait_for("approve", timeout=30)  # holds no slot while it waits
