"""The drain's hot path to executor processes (`Runner.send`): a call that can start at once is
handed to its executor from the drain's pump, with no runner task and no future, and the
results of one frame end their calls in the reader's pass over that frame. A frame is checked
whole before any of its calls is told how it ended. Both stores, real processes."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from typing import Any

from tests.actors.executors import running, state, until
from yoke.actors.executor.pool import ExecutorPool
from yoke.actors.executor.process import ExecutorProcess


async def test_calls_go_over_send_and_a_frames_results_end_in_one_pass(
    app_url: str, monkeypatch: Any
) -> None:
    loop = asyncio.get_running_loop()
    turns = itertools.count()
    turn = 0

    def tick() -> None:  # counts the turns of the loop while the drain runs
        nonlocal turn
        turn = next(turns)
        if not stopped:
            loop.call_soon(tick)

    stopped = False
    paths: Counter[str] = Counter()
    ended: Counter[int] = Counter()  # calls told they ended, per loop turn
    frames: Counter[int] = Counter()  # `done` items read, per loop turn
    send = getattr(ExecutorPool, "send", None)  # (None before the hot path existed)
    run, on_frame = ExecutorPool.run, ExecutorProcess._on_frame

    def spy_send(self: ExecutorPool, actor: Any, cell: Any, event: Any, done: Any) -> bool:
        def told(error: BaseException | None) -> None:
            ended[turn] += 1
            done(error)

        assert send is not None
        sent: bool = send(self, actor, cell, event, told)
        paths["send" if sent else "declined"] += 1
        return sent

    def spy_run(self: ExecutorPool, *args: Any) -> Any:
        paths["run"] += 1
        return run(self, *args)

    def spy_frame(self: ExecutorProcess, msg: dict[str, Any]) -> None:
        frames[turn] += len(msg.get("done") or ())
        on_frame(self, msg)

    monkeypatch.setattr(ExecutorPool, "send", spy_send, raising=False)
    monkeypatch.setattr(ExecutorPool, "run", spy_run)
    monkeypatch.setattr(ExecutorProcess, "_on_frame", spy_frame)
    async with running(app_url) as (rt, store):
        await rt.append("probes", {"k": "warm"}, tenant="acme")  # boots it; its state loads
        await until(lambda: rt.drain is not None and rt.drain.stats().processed == 1)
        for seen in (paths, ended, frames):  # the warm-up's call is not counted
            seen.clear()
        loop.call_soon(tick)
        events = [{"k": "0", "g": n % 8, "n": n} for n in range(200)]
        await rt.append_many("jobs", events, tenant="acme")

        async def all_done() -> bool:
            return len((await state(store, "acme", "job", "0")).get("done", [])) == 200

        await until(all_done, seconds=60)
        stopped = True
    assert paths == {"send": 200}, paths  # no call through a runner task and its future
    assert sum(ended.values()) == 200
    # Each call ended in the turn that read its result's frame, with the rest of that frame.
    assert ended == frames, (ended, frames)


def _frame(body: bytes) -> str:
    return (len(body).to_bytes(4, "big") + body).hex()


async def test_a_frame_that_ends_a_call_twice_leaves_that_call_unfinished(app_url: str) -> None:
    """The executor's frame names its one call twice: a protocol error, checked before any call
    is told; the call is lost with its executor, never counted done (3 such crashes: dead)."""
    twice = _frame(b'{"t":"io","done":[[1,null],[1,null]]}')  # call 1: each life's first
    async with running(app_url) as (rt, _):
        await rt.append("evil", {"k": "0", "bytes": twice}, tenant="evil")

        async def dead() -> bool:
            return (await rt.instance("evil", "0", tenant="evil")).dead == 1

        await until(dead, seconds=60)
        view = await rt.instance("evil", "0", tenant="evil")
        drain = rt.drain
        assert drain is not None
        processed = drain.stats().processed
    (letter,) = view.dead_letters
    assert letter.crash_attempts == 3 and "protocol_error" in (letter.error or "")
    assert processed == 0
