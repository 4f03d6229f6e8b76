"""The store goes away and comes back: loops retry with backoff, appends fail clearly, nothing
is lost. The outage is simulated on the in-memory store (a real one is down the same way: every
verb raises `StoreUnavailable`)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from tests.actors.conftest import MakeRuntime, wait_for
from tests.actors.memstore import MemoryActorStore
from yoke.actors import ActorCtx, ActorRuntime, Event
from yoke.errors import StoreUnavailable


class FlakyStore(MemoryActorStore):
    """Every verb fails with StoreUnavailable while `down` is set."""

    down = False

    def __getattribute__(self, name: str) -> Any:
        attr = super().__getattribute__(name)
        if name.startswith("_") or not callable(attr) or not asyncio.iscoroutinefunction(attr):
            return attr
        if not super().__getattribute__("down"):
            return attr

        async def unavailable(*args: Any, **kwargs: Any) -> Any:
            raise StoreUnavailable("database unreachable (simulated)")

        return unavailable


class _Retried(logging.Handler):
    """Sets an event when a loop logs that a store call failed and will be retried."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "retrying" in record.getMessage():
            self.seen.set()


async def test_outage_blocks_then_loses_nothing(make_runtime: MakeRuntime) -> None:
    store = FlakyStore()
    rt = make_runtime(poll_interval=0.05)
    seen: list[int] = []
    done = asyncio.Event()
    first = asyncio.Event()
    gate = asyncio.Event()
    retried = _Retried()
    logging.getLogger("yoke.actors").addHandler(retried)

    @rt.actor(subscribe=["s"], key="k")
    async def a(ctx: ActorCtx, event: Event) -> None:
        seen.append(event.data["n"])
        first.set()
        await gate.wait()
        if len(seen) == 20:
            done.set()

    try:
        await _run(rt, store, gate, first, done, retried)
    finally:
        logging.getLogger("yoke.actors").removeHandler(retried)
    assert sorted(seen) == list(range(20))


async def _run(
    rt: ActorRuntime,
    store: FlakyStore,
    gate: asyncio.Event,
    first: asyncio.Event,
    done: asyncio.Event,
    retried: _Retried,
) -> None:
    async with rt.running(store):
        await rt.append_many("s", [{"k": 1, "n": i} for i in range(10)])
        await wait_for(first)
        store.down = True
        with pytest.raises(StoreUnavailable):
            await rt.append("s", {"k": 1, "n": 99})
        gate.set()  # completions now fail: they are kept and retried
        await wait_for(retried.seen)  # a loop said so, and backs off
        store.down = False
        await rt.append_many("s", [{"k": 1, "n": i} for i in range(10, 20)])
        await wait_for(done)
        await rt.drain.flush()  # type: ignore[union-attr]
        assert not store.rows  # every completion was written in the end
