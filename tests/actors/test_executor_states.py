"""An executor's life: its states move only along `MOVES`, only by its own methods, and each
move that starts its end (DRAINING, DYING) is made at the call, with no await in between.

The table alone first (every pair of states), then `ExecutorProcess` itself: before any process
exists (a stop or a kill while a boot waits for its slot), and with a real executor process
(a stop while READY, a SIGKILL from outside)."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import pytest

from tests.actors import exec_app
from tests.actors.executors import until
from yoke.actors.ctx import CtxHost
from yoke.actors.executor.boot import BootFailed
from yoke.actors.executor.launch import make_launch
from yoke.actors.executor.process import ExecutorProcess
from yoke.actors.executor.settings import ExecutorSettings
from yoke.actors.executor.states import (
    GOING,
    LIVE,
    MOVES,
    Ending,
    ExecutorState,
    IllegalTransition,
    moved,
)
from yoke.actors.runner import ExecutorLost
from yoke.clock import SystemClock

S = ExecutorState
# The order of a life: every move goes forward in it, so a life never goes back.
ORDER = [S.SPARE, S.STARTING, S.READY, S.DRAINING, S.DYING, S.STOPPED, S.FAILED]


def test_the_moves_are_the_table_and_every_other_move_raises() -> None:
    for a, b in itertools.product(ExecutorState, repeat=2):
        if b in MOVES[a]:
            assert moved(a, b, "ex") is b
        else:
            with pytest.raises(IllegalTransition, match=f"{a.value} -> {b.value}"):
                moved(a, b, "ex")


def test_a_life_only_goes_forward_and_every_live_state_can_die() -> None:
    for a, targets in MOVES.items():
        assert all(ORDER.index(b) > ORDER.index(a) for b in targets)
    for a in LIVE - {S.DYING}:
        assert S.DYING in MOVES[a]  # whatever it is doing, it can die
    assert MOVES[S.DYING] == {S.STOPPED, S.FAILED}
    assert not MOVES[S.STOPPED] and not MOVES[S.FAILED]
    assert set(ExecutorState) == LIVE | GOING and {S.DYING} == LIVE & GOING


class Watched:
    """An `ExecutorProcess`'s callbacks and tasks, as the pool would hold them."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()
        self.dying: list[ExecutorState] = []  # its state when `on_dying` was told
        self.exits: list[ExecutorState] = []

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        self.tasks.add(asyncio.get_running_loop().create_task(coro))

    def executor(self, directory: Path, *, spare: bool = False) -> ExecutorProcess:
        settings = ExecutorSettings(
            mode="process", directory=str(directory), allow_weak_isolation=1, boot_timeout=20.0
        )
        return ExecutorProcess(
            tenant="" if spare else "acme",
            launch=make_launch(settings, app=exec_app.SPEC, worker_id="w-states"),
            host=cast(CtxHost, object()),  # no call is made to it here
            clock=SystemClock(),
            spawn=self.spawn,
            on_exit=lambda ex: self.exits.append(ex.state),
            on_done=lambda ex: None,
            on_dying=lambda ex: self.dying.append(ex.state),
            spare=spare,
        )


def phase(ex: ExecutorProcess) -> ExecutorState:
    return ex.state  # read afresh (mypy would keep what an earlier check narrowed it to)


@asynccontextmanager
async def watched() -> AsyncIterator[Watched]:
    w = Watched()
    try:
        yield w
    finally:
        for task in w.tasks:
            task.cancel()
        await asyncio.gather(*w.tasks, return_exceptions=True)


async def test_state_is_not_writable_from_outside(tmp_path: Path) -> None:
    async with watched() as w:
        ex = w.executor(tmp_path)
        with pytest.raises(AttributeError):
            ex.state = S.READY  # type: ignore[misc]
        assert phase(ex) is S.STARTING and ex.ending is None


async def test_a_stop_before_the_boot_is_dying_at_once_then_stopped(tmp_path: Path) -> None:
    async with watched() as w:
        ex = w.executor(tmp_path)
        stopping = ex.stop(grace=5.0, reason="idle")
        assert phase(ex) is S.DYING and ex.live and not ex.sendable  # at the call, no await
        assert w.dying == [S.DYING] and ex.ending is Ending.ASKED
        await stopping
        assert phase(ex) is S.STOPPED and not ex.crashed and ex.stop_reason == "idle"
        assert w.exits == [S.STOPPED]
        with pytest.raises(BootFailed):  # its boot slot came after the stop: it never starts
            await ex.boot(queued=0.0)
        await ex.stop(grace=5.0, reason="again")  # its end was decided: nothing more
        ex.kill("boot_timeout")
        assert phase(ex) is S.STOPPED and ex.stop_reason == "idle" and w.exits == [S.STOPPED]
        assert ex.pid is None  # never spawned


async def test_a_kill_is_dying_at_once_then_failed_and_self_inflicted_by_no_one(
    tmp_path: Path,
) -> None:
    async with watched() as w:
        ex = w.executor(tmp_path)
        ex.kill("boot_timeout")
        assert phase(ex) is S.DYING and ex.ending is Ending.KILLED and ex.crashed
        await until(lambda: phase(ex) is S.FAILED, seconds=5)
        assert not ex.self_inflicted and ex.stop_reason == "boot_timeout"
        assert w.exits == [S.FAILED]
        with pytest.raises(IllegalTransition):  # a life never goes back
            ex.assign("other")


async def test_a_spare_is_bound_not_booted_and_only_once_warm(tmp_path: Path) -> None:
    async with watched() as w:
        spare = w.executor(tmp_path, spare=True)
        assert phase(spare) is S.SPARE and not spare.bindable
        with pytest.raises(IllegalTransition):
            await spare.boot(queued=0.0)
        with pytest.raises(IllegalTransition):
            spare.assign("acme")  # not warm yet
        cold = w.executor(tmp_path)
        with pytest.raises(IllegalTransition):
            await cold.warm(queued=0.0)
        await spare.warm(queued=0.0)
        assert phase(spare) is S.SPARE and spare.bindable
        spare.assign("acme")
        assert phase(spare) is S.STARTING and spare.tenant == "acme"
        await spare.bind(queued=0.0)
        assert phase(spare) is S.READY and spare.sendable
        await spare.stop(grace=5.0, reason="done")
        assert phase(spare) is S.STOPPED and w.exits == [S.STOPPED]


async def test_a_ready_executor_asked_to_stop_is_draining_at_once_then_stopped(
    tmp_path: Path,
) -> None:
    async with watched() as w:
        ex = w.executor(tmp_path)
        await ex.boot(queued=0.0)
        assert phase(ex) is S.READY and ex.sendable and ex.pid is not None
        stopping = ex.stop(grace=5.0, reason="idle")
        assert phase(ex) is S.DRAINING and not ex.sendable and ex.ending is None
        with pytest.raises(ExecutorLost, match="DRAINING"):
            ex.send("noop", cast(Any, None), cast(Any, None), lambda error: None)
        await stopping
        assert phase(ex) is S.STOPPED and ex.ending is Ending.ASKED and not ex.crashed
        assert w.dying == [S.DYING] and w.exits == [S.STOPPED] and ex.stop_reason == "idle"


async def test_a_sigkill_from_outside_fails_it_but_is_not_its_own_doing(tmp_path: Path) -> None:
    async with watched() as w:
        ex = w.executor(tmp_path)
        await ex.boot(queued=0.0)
        assert ex.pid is not None
        os.kill(ex.pid, signal.SIGKILL)
        await until(lambda: phase(ex) is S.FAILED, seconds=10)
        assert ex.ending is Ending.OUTSIDE and ex.crashed and not ex.self_inflicted
        assert w.dying == [S.DYING] and w.exits == [S.FAILED]
        assert "SIGKILL" in (ex.stop_reason or "")
