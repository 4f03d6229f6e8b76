"""The batchers' contract: how many batches are in the store at once, and the order in which
their answers are handed back, whatever order the store answers them in.

The store here is a gate per batch (`Store`), so each test decides which batch answers when;
the grant path over real stores is pinned in test_overlapping_grants.py."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

import pytest

from yoke.errors import StoreUnavailable
from yoke.executions.batching import Batcher, GroupCommit


class Store:
    """Each `send` waits until the test opens its batch's gate (or fails it)."""

    def __init__(self) -> None:
        self.sent: list[list[int]] = []
        self.gates: list[asyncio.Future[None]] = []
        self.in_store = 0
        self.most_in_store = 0
        self.applied: list[tuple[list[int], list[int] | None, str | None]] = []
        self.another = asyncio.Event()

    async def send(self, batch: Sequence[int]) -> list[int]:
        self.sent.append(list(batch))
        self.another.set()
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.gates.append(gate)
        self.in_store += 1
        self.most_in_store = max(self.most_in_store, self.in_store)
        try:
            await gate
        finally:
            self.in_store -= 1
        return [x * 10 for x in batch]

    def apply(
        self, batch: Sequence[int], result: list[int] | None, error: BaseException | None
    ) -> None:
        self.applied.append((list(batch), result, None if error is None else type(error).__name__))

    async def sent_count(self, n: int) -> None:
        while len(self.sent) < n:
            self.another.clear()
            await self.another.wait()


async def turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_with_overlap_one_the_next_batch_waits_for_the_answer() -> None:
    store = Store()
    b: Batcher[int, list[int]] = Batcher(store.send, store.apply, overlap=1)
    b.put(1)
    await store.sent_count(1)
    b.put(2)
    b.put(3)
    await turns()
    assert store.sent == [[1]]  # 2 and 3 wait for 1's answer
    store.gates[0].set_result(None)
    await store.sent_count(2)
    assert store.sent == [[1], [2, 3]]
    store.gates[1].set_result(None)
    await b.idle()
    assert store.applied == [([1], [10], None), ([2, 3], [20, 30], None)]


async def test_a_second_batch_goes_while_the_first_is_in_the_store() -> None:
    store = Store()
    b: Batcher[int, list[int]] = Batcher(store.send, store.apply, overlap=2)
    b.put(1)
    await store.sent_count(1)
    b.put(2)
    b.put(3)
    await store.sent_count(2)
    assert store.sent == [[1], [2, 3]]
    b.put(4)  # two are in the store: this one waits
    await turns()
    assert len(store.sent) == 2 and b.waiting == 1
    store.gates[0].set_result(None)
    await store.sent_count(3)
    assert store.sent[2] == [4]
    for gate in store.gates[1:]:
        gate.set_result(None)
    await b.idle()
    assert store.most_in_store == 2


async def test_answers_are_handed_back_in_the_order_the_batches_formed() -> None:
    store = Store()
    b: Batcher[int, list[int]] = Batcher(store.send, store.apply, overlap=2)
    b.put(1)
    await store.sent_count(1)
    b.put(2)
    await store.sent_count(2)
    store.gates[1].set_result(None)  # the younger batch answers first
    await turns()
    assert store.applied == []  # it waits for the older one
    store.gates[0].set_result(None)
    await b.idle()
    assert [batch for batch, _, _ in store.applied] == [[1], [2]]


async def test_a_failed_batch_is_handed_back_with_its_error_in_its_turn() -> None:
    store = Store()
    b: Batcher[int, list[int]] = Batcher(store.send, store.apply, overlap=2)
    b.put(1)
    await store.sent_count(1)
    b.put(2)
    await store.sent_count(2)
    store.gates[1].set_result(None)
    store.gates[0].set_exception(StoreUnavailable("down"))
    await b.idle()
    assert store.applied == [([1], None, "StoreUnavailable"), ([2], [20], None)]
    b.put(3)  # the batcher goes on
    await store.sent_count(3)
    store.gates[2].set_result(None)
    await b.idle()
    assert store.applied[-1] == ([3], [30], None)


async def test_an_apply_that_raises_does_not_stop_the_next_batch() -> None:
    applied: list[list[int]] = []

    async def send(batch: Sequence[int]) -> None:
        await asyncio.sleep(0)

    def apply(batch: Sequence[int], result: None, error: BaseException | None) -> None:
        applied.append(list(batch))
        if batch[0] == 1:
            raise RuntimeError("a bug")

    b: Batcher[int, None] = Batcher(send, apply, overlap=2)
    b.put(1)
    await b.idle()
    b.put(2)
    await b.idle()
    assert applied == [[1], [2]]


@pytest.mark.parametrize("overlap", [1, 2, 3])
async def test_many_puts_over_time_keep_order_and_the_bound(overlap: int) -> None:
    """Random store delays: never more than `overlap` batches in the store, every request
    in exactly one batch, batches handed back in the order they formed."""
    rng = random.Random(overlap)
    in_store = most = 0
    sent: list[list[int]] = []
    applied: list[list[int]] = []

    async def send(batch: Sequence[int]) -> int:
        nonlocal in_store, most
        sent.append(list(batch))
        in_store += 1
        most = max(most, in_store)
        await asyncio.sleep(rng.random() * 0.003)
        in_store -= 1
        return len(batch)

    def apply(batch: Sequence[int], result: int | None, error: BaseException | None) -> None:
        assert error is None and result == len(batch)
        applied.append(list(batch))

    b: Batcher[int, int] = Batcher(send, apply, max_batch=7, overlap=overlap)
    for i in range(400):
        b.put(i)
        if rng.random() < 0.3:
            await asyncio.sleep(rng.random() * 0.001)
    await b.idle()
    assert applied == sent
    assert [x for batch in applied for x in batch] == list(range(400))
    assert most <= overlap
    if overlap > 1:
        assert most > 1  # the test did put batches side by side
    assert all(len(batch) <= 7 for batch in applied)


async def test_group_commit_answers_each_request_and_fails_a_failed_batch() -> None:
    calls = 0

    async def flush(batch: Sequence[int]) -> list[int]:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0)
        if 13 in batch:
            raise StoreUnavailable("down")
        return [x + 1 for x in batch]

    g: GroupCommit[int, int] = GroupCommit(flush, overlap=2)
    ok = [g.submit(x) for x in (1, 2)]
    assert await asyncio.gather(*ok) == [2, 3]
    bad = g.submit(13)
    with pytest.raises(StoreUnavailable):
        await bad
    assert await g.submit(4) == 5
    await g.idle()
    assert calls == 3


async def test_a_cancelled_batch_cancels_its_requests_and_the_next_still_goes() -> None:
    started = asyncio.Event()

    async def flush(batch: Sequence[int]) -> list[int]:
        if batch == [1]:
            started.set()
            await asyncio.Event().wait()  # cancelled below
        return list(batch)

    g: GroupCommit[int, int] = GroupCommit(flush, overlap=1)
    first = g.submit(1)
    await started.wait()
    second = g.submit(2)
    for task in list(g._batches._tasks):
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await second == 2
    await g.idle()


async def test_overlap_must_be_at_least_one() -> None:
    store = Store()
    with pytest.raises(ValueError, match="overlap"):
        Batcher(store.send, store.apply, overlap=0)
