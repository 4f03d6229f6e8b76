"""A caller cancelled while queued never holds a slot, even if it is picked in the same tick.

`task.cancel()` cancels the future a queued caller waits on at once, but the caller removes its
item from the kernel only when it next runs. In between, a raise of the concurrency (or any
freed slot) may pick that item: the pick must see the cancelled future and pass the slot on,
or the slot is held by nobody for good and later tasks wait behind it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from yoke.fair import KernelScheduler, create_fair_scheduler, create_scheduler


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def _schedulers() -> list[Any]:
    made: list[Any] = [pytest.param(lambda: create_scheduler(1), id="scheduler")]
    for policy in ("sfq", "rotation", "least_running", "fifo"):
        made.append(
            pytest.param(
                lambda policy=policy: create_fair_scheduler(1, policy=policy), id=f"fair-{policy}"
            )
        )
    return made


@pytest.mark.parametrize("make", _schedulers())
async def test_a_caller_cancelled_then_picked_in_the_same_tick_takes_no_slot(
    make: Callable[[], KernelScheduler],
) -> None:
    sched = make()
    release = asyncio.Event()
    ran: list[str] = []

    def job(label: str, *, hold: bool = False) -> Callable[[], Coroutine[Any, Any, str]]:
        async def run() -> str:
            ran.append(label)
            if hold:
                await release.wait()
            return label

        return run

    holder = asyncio.create_task(sched.schedule(job("holder", hold=True), tenant="a"))
    await settle()
    doomed = asyncio.create_task(sched.schedule(job("doomed"), tenant="b"))
    await settle()
    assert (sched.running, sched.queued) == (1, 1)

    doomed.cancel()  # its future is cancelled now; its own cleanup has not run yet
    sched.set_concurrency(2)  # same tick: the raise picks the cancelled caller's item
    assert (sched.running, sched.queued) == (1, 0), "a cancelled caller took a slot"
    await settle()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert (sched.running, sched.queued) == (1, 0)

    # The free slot is really free: a later task runs while the holder still holds its own.
    later = asyncio.create_task(sched.schedule(job("later"), tenant="c"))
    assert await asyncio.wait_for(later, 10) == "later"
    release.set()
    assert await holder == "holder"
    assert ran == ["holder", "later"]  # the cancelled caller's fn never ran
    assert (sched.running, sched.queued) == (0, 0)
