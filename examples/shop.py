"""A small shop served by yoke: `yoke serve --app examples.shop:app`.

Three workflows show what the scheduler deals with:
- `checkout`: recorded steps (reserve, charge, ship) and a child workflow (`send_receipt`) that
  runs on its parent's slot; a step that meets a connection error is retried (three attempts,
  half a second apart and doubling), a negative total fails at once (`yoke executions show`
  prints why, with the traceback), and a resume after a failure re-uses the steps already done;
  past a minute it is TIMED_OUT;
- `send_receipt`: the child, also startable on its own;
- `restock`: a slow job (`{"seconds": n}`), handy to fill slots and watch starts queue.

And one actor, README's: `cart` (stream `carts`, one instance per `cart_id`, FIFO per `line`)
counts a cart's items in its state and schedules a reminder 30 s after each addition;
`yoke worker --app examples.shop:app` runs it (so does `yoke serve`, unless `--no-worker`).

Try it (no tokens file: the server binds 127.0.0.1 and every caller is the local admin):

    yoke serve --app examples.shop:app --database-url sqlite:///./.yoke/shop.db &
    yoke start checkout --input '{"order": 1, "items": ["tea"], "total": 12.5}' --wait 5
    yoke limits set --max-running 1 && yoke start restock --input '{"seconds": 30}'
    yoke start restock --input '{"seconds": 1}'      # 202 QUEUED behind the first
    yoke executions list
    curl -s -X POST localhost:8000/v1/streams/carts/events -H 'content-type: application/json' \
        -d '{"cart_id": "c1", "line": "tea"}'
    curl -s localhost:8000/v1/actors/cart/instances/c1      # its state: {"items": 1}
"""

from __future__ import annotations

import asyncio
from typing import Any

import yoke

app = yoke.App()


async def _reserve(items: list[str]) -> dict[str, Any]:
    await asyncio.sleep(0.01)  # stands for a call to the stock service
    return {"reserved": items}


async def _charge(total: float) -> dict[str, Any]:
    await asyncio.sleep(0.01)  # stands for a call to the payment provider
    if total < 0:
        raise ValueError("a negative total cannot be charged")
    return {"charged": total}


@app.workflow()
async def send_receipt(ctx: yoke.Context, input: Any) -> dict[str, Any]:
    order = input.get("order") if isinstance(input, dict) else None
    return {"receipt": f"receipt for order {order}"}


@app.workflow(
    retry=yoke.Retry(max_attempts=3, backoff=0.5, retry_on=(ConnectionError,)), timeout=60
)
async def checkout(ctx: yoke.Context, input: Any) -> dict[str, Any]:
    order = input if isinstance(input, dict) else {}
    reserved = await ctx.step("reserve", _reserve, list(order.get("items", [])))
    charged = await ctx.step("charge", _charge, float(order.get("total", 0)))
    receipt = await ctx.child(send_receipt, {"order": order.get("order")})
    shipped = await ctx.step("ship", lambda: {"shipped": True})
    return {**reserved, **charged, **receipt, **shipped}


@app.actor(
    subscribe=["carts"],
    key="cart_id",
    queue=yoke.Queue(mode="fifo", concurrency=3, group_by="line"),
)
async def cart(ctx: yoke.ActorCtx, event: Any) -> None:
    if event.data.get("kind") == "reminder":
        return  # where the shop would remind the buyer of the cart left behind
    await ctx.state.update(lambda s: {**s, "items": s.get("items", 0) + 1})  # atomic
    await ctx.schedule("carts", {"cart_id": ctx.instance_id, "kind": "reminder"}, delay=30)


@app.workflow()
async def restock(ctx: yoke.Context, input: Any) -> dict[str, Any]:
    seconds = float(input.get("seconds", 1)) if isinstance(input, dict) else 1.0
    await asyncio.sleep(min(max(seconds, 0.0), 3600.0))  # the work this example pretends to do
    return {"restocked": True, "after": seconds}
