"""The app the end-to-end tests serve with `yoke serve --app tests.server.e2e_app:app`.

`hold` sleeps `input` seconds (default 60): a slot that stays taken for as long as a test needs.
`charge` fails its step after two attempts: a failed execution with a traceback and a retried,
FAILED step, as the dashboard shows it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import yoke

app = yoke.App()


@app.workflow()
async def hold(ctx: yoke.Context, input: Any) -> Any:
    seconds = float(input) if isinstance(input, int | float) else 60.0
    await asyncio.sleep(seconds)  # the work a real workflow would do
    return {"slept": seconds}


@app.workflow()
async def echo(ctx: yoke.Context, input: Any) -> Any:
    return input


@app.workflow()
async def steps(ctx: yoke.Context, input: Any) -> Any:
    a = await ctx.step("a", lambda: 1)
    b = await ctx.child(echo, {"x": a})
    return {"a": a, "b": b}


def _declined(card: str) -> None:
    raise ConnectionError(f"the payment service refused card {card}")


@app.workflow(retry=yoke.Retry(max_attempts=2, backoff=0.01))
async def charge(ctx: yoke.Context, input: Any) -> Any:
    await ctx.step("validate", lambda: {"card": input.get("card")})
    return await ctx.step("charge", _declined, input.get("card"))
