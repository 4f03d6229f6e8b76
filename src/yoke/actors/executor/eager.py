"""Starting a coroutine eagerly: its first step runs at once, and a task is made only if it
waits for something. What Python 3.12's `asyncio.eager_task_factory` does, for 3.11 as well.

The executor runs each `process()` call as its own task so that calls run concurrently; most
short calls never wait, and on 3.11 the task alone (made, scheduled, stepped once) was a large
part of an executor's CPU per call. Here the first step runs in a copy of the current context,
as a task's would, and a call that waits goes on as a task in that same context, driven by a
small trampoline that passes on to it whatever the task sends or throws. This module must stay
light (the executor imports it before the app) and never import the rest of yoke.
"""

from __future__ import annotations

import asyncio
import contextvars
import types
from collections.abc import Coroutine, Generator
from typing import Any

# Python 3.12+: the loop's own eager task (looked up once: `start` is the executor's hot path).
_NATIVE: Any = getattr(asyncio, "eager_task_factory", None)


def start(coro: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
    """Run `coro` up to its first wait, now. None if it ended there (what it raised, other
    than returning, propagates); else the task that runs the rest of it."""
    if _NATIVE is not None:
        task: asyncio.Task[None] = _NATIVE(asyncio.get_running_loop(), coro)
        if not task.done():
            return task
        task.result()  # what it raised propagates, as on 3.11 below
        return None
    context = contextvars.copy_context()
    try:
        waiting = context.run(coro.send, None)
    except StopIteration:
        return None
    # A pending future's first await marks it (`_asyncio_future_blocking`) until a task takes
    # it, and refuses any other await meanwhile ("await wasn't used with future"); the task
    # takes it only at its first step, later. So it is unmarked now, and marked again as it is
    # handed to the task, and another coroutine may wait for the same future in between.
    blocking = bool(getattr(waiting, "_asyncio_future_blocking", False))
    if blocking:
        waiting._asyncio_future_blocking = False
    rest = _rest(coro, waiting, blocking)
    return asyncio.get_running_loop().create_task(rest, context=context)


@types.coroutine
def _rest(
    coro: Coroutine[Any, Any, None], waiting: Any, blocking: bool
) -> Generator[Any, Any, None]:
    """The rest of a started coroutine, as `yield from` would drive it: what it waits for goes
    to the task, and what the task sends or throws back goes to it."""
    if blocking:
        waiting._asyncio_future_blocking = True
    while True:
        try:
            sent = yield waiting
        except BaseException as exc:  # a cancellation: the coroutine's own to handle
            try:
                waiting = coro.throw(exc)
            except StopIteration:
                return
        else:
            try:
                waiting = coro.send(sent)
            except StopIteration:
                return
