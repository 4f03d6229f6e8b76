"""`eager.start`: a coroutine's first step runs at once (no task if it ends there), and one that
waits goes on as a task exactly as if it had been one from the start: what it waits for, what
it is sent, a cancellation, and its own context (a context variable it sets stays its own).
The executor holds a task only for a call that waits, and forgets it when it ends."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any, cast

import pytest

from yoke.actors import ActorCtx, ActorRegistry, Event
from yoke.actors.executor import eager
from yoke.actors.executor.child import ChildExecutor
from yoke.actors.executor.protocol import Outbox

seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="caller")


async def test_a_coroutine_that_never_waits_ends_at_once_without_a_task() -> None:
    ran: list[str] = []

    async def quick() -> None:
        seen.set("quick")
        ran.append(seen.get())

    assert eager.start(quick()) is None
    assert ran == ["quick"] and seen.get() == "caller"  # its context was its own


async def test_a_coroutine_that_waits_goes_on_as_a_task_in_its_own_context() -> None:
    gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    got: list[object] = []

    async def slow() -> None:
        seen.set("slow")
        got.append(await gate)
        await asyncio.sleep(0)  # a bare yield to the loop
        got.append(seen.get())

    task = eager.start(slow())
    assert task is not None and not task.done() and seen.get() == "caller"
    gate.set_result(7)
    await task
    assert got == [7, "slow"]


async def test_what_it_awaits_may_raise_into_it() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    caught: list[str] = []

    async def waits() -> None:
        try:
            await gate
        except KeyError as exc:
            caught.append(str(exc))

    task = eager.start(waits())
    assert task is not None
    gate.set_exception(KeyError("boom"))
    await task
    assert caught == ["'boom'"]


async def test_a_cancelled_task_cancels_the_coroutine_where_it_waits() -> None:
    cleaned: list[bool] = []

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append(True)

    task = eager.start(forever())
    assert task is not None
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == [True]


class _Outbox:
    """What the executor sends, kept (no socket)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, Any]] = []

    def add(self, kind: str, item: Any) -> None:
        self.items.append((kind, item))

    def flush(self) -> None:
        pass


async def test_the_executor_holds_only_the_calls_that_wait_and_each_until_it_ends() -> None:
    registry = ActorRegistry()
    gate = asyncio.Event()

    @registry.actor(subscribe=["s"], key="k")
    async def quick(ctx: ActorCtx, event: Event) -> None:
        pass

    @registry.actor(subscribe=["s"], key="k")
    async def slow(ctx: ActorCtx, event: Event) -> None:
        await gate.wait()

    out = _Outbox()
    child = ChildExecutor("acme", registry, cast(Outbox, out))
    for call_id, actor in ((1, "quick"), (2, "slow"), (3, "quick"), (4, "slow")):
        child._start(call_id, actor, "i", [call_id, call_id, "s", {}, "", 1, 0.0], 0, {})
    assert out.items == [("done", [1, None]), ("done", [3, None])]  # ended at once
    assert sorted(child._tasks) == [2, 4]  # only the calls that wait are held
    gate.set()
    await asyncio.wait(list(child._tasks.values()))
    assert out.items[2:] == [("done", [2, None]), ("done", [4, None])]
    assert child._tasks == {}  # each forgotten as it ended


async def test_two_coroutines_may_wait_for_the_same_future() -> None:
    """The first await of a pending future marks it as waited for until a task takes it; a
    second coroutine started before that task's first step must be able to wait for it too
    (two `process()` calls of one frame awaiting one shared task, say)."""
    gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    got: list[int] = []

    async def wait(n: int) -> None:
        got.append(await gate + n)

    first, second = eager.start(wait(1)), eager.start(wait(2))
    assert first is not None and second is not None
    gate.set_result(10)
    await asyncio.gather(first, second)
    assert sorted(got) == [11, 12]
