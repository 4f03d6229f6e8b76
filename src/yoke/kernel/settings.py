"""Runtime configuration of the kernel: weights and caps, set while items queue and run.

What it is for. `Settings` holds the public setters of `core.Kernel` (`set_weight`,
`set_global_cap`, `set_lane_cap`, `set_cap`) and the queries that go with them (`weight`,
`blocked_by`). A setter changes a lane's or key's parameters and then restores the heap
invariants: a lowered key gets a fresh entry (M3), a key that gained room gets its proxy back.

What it must never do: start or stop an item, or preempt one (lowering a cap below the running
count only holds back later dispatches), and never keep a node alive that the memory contract
of `core` says is forgotten (an idle lane back at the default weight and no cap, an unused key
with no cap).
"""

from __future__ import annotations

from collections.abc import Hashable

from yoke.kernel import args
from yoke.kernel.heaps import Heaps
from yoke.kernel.policies import quantum_of, stride_of
from yoke.kernel.types import ItemState


class Settings(Heaps):
    __slots__ = ()

    def set_weight(self, lane: Hashable, weight: float) -> None:
        w = args.weight_arg(weight)
        self._hashable(lane, "lane")
        ln = self._lanes.get(lane)
        if ln is None:
            if w == self._dw:
                return
            ln = self._new_lane(lane)
        ln.w = w
        ln.stride = stride_of(w)
        ln.quantum = quantum_of(w)
        if self._pol.rekey_on_release:
            self._rekey_lane(ln)
        self._maybe_forget_lane(ln)
        self._tidy_top()

    def weight(self, lane: Hashable) -> float:
        ln = self._lanes.get(lane)
        return self._dw if ln is None else ln.w

    def set_global_cap(self, cap: int | None) -> None:
        self._gcap = args.cap_arg(cap, "global_cap")

    def set_lane_cap(self, lane: Hashable, cap: int | None) -> None:
        c = args.cap_arg(cap, "lane cap")
        self._hashable(lane, "lane")
        ln = self._lanes.get(lane)
        if ln is None:
            if c is None:
                return
            ln = self._new_lane(lane)
        ln.cap = c
        self._wake(ln)
        self._maybe_forget_lane(ln)
        self._tidy_top()

    def set_cap(self, key: Hashable, cap: int | None) -> None:
        c = args.cap_arg(cap, "cap")
        self._hashable(key, "cap key")
        if isinstance(key, tuple) and len(key) == 2 and key[0] == "lane":
            self.set_lane_cap(key[1], c)
            return
        ks = self._keys.get(key)
        if ks is None:
            if c is None:
                return
            ks = self._new_key(key)
        ks.cap = c
        self._wake(ks)
        if c is None and not ks.users:
            self._forget_key(ks)
        self._tidy_top()

    def blocked_by(self, item_id: Hashable) -> Hashable | None:
        item = self._items.get(item_id)
        if item is None or item.state is not ItemState.QUEUED:
            return None
        return self._blocked_by(item)
