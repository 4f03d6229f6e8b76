"""`yoke.leases.Elector`: a body runs only while its term holds. A holder whose renewals fail
stops its body before its lease could be taken (its local deadline comes first); a standby
then takes a new term (a new epoch). On the way out the lease is released."""

from __future__ import annotations

import asyncio

import pytest

from yoke.clock import SystemClock
from yoke.errors import BadValue, StoreUnavailable
from yoke.leases import Elector
from yoke.store.leaseverbs import Lease
from yoke.testing.memstore import MemoryActorStore


class FlakyStore(MemoryActorStore):
    """Holder "a" cannot reach the database while `down` is set; others can."""

    down = False

    def _check(self, holder: str | None) -> None:
        if self.down and holder == "a":
            raise StoreUnavailable("cut off")

    async def acquire_lease(
        self, name: str, *, holder: str, ttl: float, force: bool = False
    ) -> Lease | None:
        self._check(holder)
        return await super().acquire_lease(name, holder=holder, ttl=ttl, force=force)

    async def renew_lease(self, lease: Lease, *, ttl: float) -> Lease | None:
        self._check(lease.holder)
        return await super().renew_lease(lease, ttl=ttl)

    async def release_lease(self, lease: Lease) -> bool:
        self._check(lease.holder)
        return await super().release_lease(lease)


async def test_a_holder_cut_off_stops_before_its_term_can_be_taken() -> None:
    store = FlakyStore()
    clock = SystemClock()
    timeline: list[tuple[str, str, float]] = []
    loop = asyncio.get_running_loop()

    def body(name: str) -> object:
        async def run(lease: Lease) -> None:
            timeline.append((name, f"start {lease.epoch}", loop.time()))
            try:
                await asyncio.Event().wait()
            finally:
                timeline.append((name, "stop", loop.time()))

        return run

    a = Elector(store, name="p", holder="a", ttl=0.5, clock=clock, renew_every=0.1)
    b = Elector(store, name="p", holder="b", ttl=0.5, clock=clock, renew_every=0.1)
    task_a = asyncio.create_task(a.run(body("a")))  # type: ignore[arg-type]
    await asyncio.sleep(0.2)
    task_b = asyncio.create_task(b.run(body("b")))  # type: ignore[arg-type]
    await asyncio.sleep(0.3)
    assert [e for _, e, _ in timeline] == ["start 1"]  # b waits: a renews its term
    store.down = True  # a cannot renew any more
    for _ in range(100):
        if any(n == "b" for n, _, _ in timeline):
            break
        await asyncio.sleep(0.02)
    a_stop = next(t for n, e, t in timeline if n == "a" and e == "stop")
    b_start = next(t for n, e, t in timeline if n == "b")
    assert a_stop < b_start  # never both at once
    assert ("b", "start 2", b_start) in timeline  # a new term, a new epoch
    task_b.cancel()
    task_a.cancel()
    await asyncio.gather(task_a, task_b, return_exceptions=True)
    lease = await store.get_lease("p")
    assert lease is not None and lease.holder is None  # b released it on the way out


class SilentStore(MemoryActorStore):
    """Renewals never answer (a network cut that neither fails nor answers)."""

    async def renew_lease(self, lease: Lease, *, ttl: float) -> Lease | None:
        await asyncio.Event().wait()
        return None


async def test_a_renewal_that_never_answers_ends_the_term_at_its_deadline() -> None:
    store = SilentStore()
    clock = SystemClock()
    elector = Elector(store, name="p", holder="a", ttl=0.5, clock=clock, renew_every=0.1)
    stopped = asyncio.Event()
    started: list[float] = []

    async def body(lease: Lease) -> None:
        started.append(clock.monotonic())
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()

    task = asyncio.create_task(elector.run(body))
    await asyncio.wait_for(stopped.wait(), timeout=5)  # never, if the renewal is awaited
    assert clock.monotonic() - started[0] < 0.5  # before the lease could lapse
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_body_that_returns_ends_the_term() -> None:
    store = MemoryActorStore()
    elector = Elector(store, name="once", holder="a", ttl=5.0, clock=SystemClock())
    ran: list[int] = []

    async def body(lease: Lease) -> None:
        ran.append(lease.epoch)

    await asyncio.wait_for(elector.run(body), 5)
    assert ran == [1] and elector.terms == 1
    lease = await store.get_lease("once")
    assert lease is not None and lease.holder is None


def test_an_elector_checks_its_periods() -> None:
    store = MemoryActorStore()
    with pytest.raises(BadValue):
        Elector(store, name="p", holder="a", ttl=0, clock=SystemClock())
    with pytest.raises(BadValue):
        Elector(store, name="p", holder="a", ttl=1.0, clock=SystemClock(), renew_every=2.0)
