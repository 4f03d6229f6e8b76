"""`Picks`: when the drain runs custom mode's picks, one at a time per instance.

It owns the schedule of picks, not the pick itself (`custom_pick.py`): a custom-mode instance
that may start more gets one pick in a runner (the pick reads the store), or a note to look
again when its running pick ends (`repick`); a pick that failed for want of the store looks
again after the pause it returns. What a pick claims is held by the drain's core
(`DrainCore.hold`) and started by the drain (`drain.py`, through `start`). This module never
touches the worker kernel.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any

from yoke.actors.custom_pick import CustomPicker, pickable
from yoke.actors.drain_core import DrainCore
from yoke.actors.drain_parts import DrainConfig, HeldInstance, Job, next_attempt
from yoke.actors.protocol import ActorStore
from yoke.clock import Clock


class Picks:
    def __init__(
        self,
        *,
        store: ActorStore,
        worker_id: str,
        clock: Clock,
        config: DrainConfig,
        core: DrainCore,
        stopping: Callable[[], bool],
        may_run: Callable[[str], bool],
        chore: Callable[[Callable[[], Coroutine[Any, Any, None]]], None],
        start: Callable[[Job], None],
        pump: Callable[[], None],
        ended: asyncio.Event,
    ) -> None:
        self._core = core
        self._stopping = stopping
        self._may_run = may_run  # the tenant is runnable (`Dispatch.may_run`)
        self._chore = chore  # run in a runner, inside the drain's TaskGroup
        self._pump = pump
        self._ended = ended  # set when a pick of an instance being handed over ends
        self._picker: CustomPicker[HeldInstance, Job] = CustomPicker(
            store=store,
            worker_id=worker_id,
            clock=clock,
            window=config.select_window,
            retry=config.retry,
            stopping=stopping,
            hold=core.hold,
            start=start,
            decode=next_attempt,
        )

    def __repr__(self) -> str:
        return f"Picks(picker={self._picker!r})"

    def want(self, inst: HeldInstance) -> None:
        """A custom-mode instance may start more: pick in a runner, as the pick reads the store."""
        if inst.picking:
            inst.repick = True
        elif (
            not (self._stopping() or inst.lost)
            and self._may_run(inst.ref.tenant)
            and pickable(inst)
        ):
            inst.picking = True
            self._chore(functools.partial(self._pick, inst))

    async def _pick(self, inst: HeldInstance) -> None:
        """One pick, in a runner; a failed pick returns its pause and the timer is set here."""
        try:
            pause = await self._picker.pick(inst)
        finally:
            inst.picking = False
            if inst.ref in self._core.paused:
                self._ended.set()
        if pause is not None:  # the store is down: look again after a pause
            asyncio.get_running_loop().call_later(pause, self._look_again, inst)

    def _look_again(self, inst: HeldInstance) -> None:
        if not inst.lost:
            self._core.look_again(inst)
            self._pump()
