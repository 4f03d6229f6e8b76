"""Runtime configuration of the kernel's lanes and keys: weights and caps, set while items queue
and run, as one part `core.Kernel` holds.

What it is for. `Settings` changes a lane's weight, a lane's cap or a key's cap, then restores
the heap invariants: a lowered key gets a fresh entry, a key that gained room gets its proxy
back. The global cap is the kernel's own (every pick reads it).

What it must never do: start or stop an item, or preempt one (lowering a cap below the running
count only holds back later dispatches), and never keep a node alive that the memory contract
says is forgotten (an idle lane back at the default weight and no cap, an unused key with no
cap).
"""

from __future__ import annotations

from collections.abc import Hashable

from yoke.errors import BadType
from yoke.kernel import args
from yoke.kernel.heaps import Heaps
from yoke.kernel.policies import quantum_of, stride_of
from yoke.kernel.registry import Registry


class Settings:
    __slots__ = ("_heaps", "_reg", "_rekey")

    def __init__(self, registry: Registry, heaps: Heaps, *, rekey_on_release: bool) -> None:
        self._reg = registry
        self._heaps = heaps
        self._rekey = rekey_on_release

    def __repr__(self) -> str:
        return f"Settings({self._reg!r})"

    def set_weight(self, lane: Hashable, weight: float) -> None:
        w = args.weight_arg(weight)
        hashable(lane, "lane")
        reg = self._reg
        ln = reg.lanes.get(lane)
        if ln is None:
            if w == reg.dw:
                return
            ln = reg.new_lane(lane)
        ln.w = w
        ln.stride = stride_of(w)
        ln.quantum = quantum_of(w)
        if self._rekey:
            self._heaps.rekey_lane(ln)
        reg.maybe_forget_lane(ln)
        self._heaps.tidy_top()

    def weight(self, lane: Hashable) -> float:
        ln = self._reg.lanes.get(lane)
        return self._reg.dw if ln is None else ln.w

    def set_lane_cap(self, lane: Hashable, cap: int | None) -> None:
        c = args.cap_arg(cap, "lane cap")
        hashable(lane, "lane")
        reg = self._reg
        ln = reg.lanes.get(lane)
        if ln is None:
            if c is None:
                return
            ln = reg.new_lane(lane)
        ln.cap = c
        self._heaps.wake(ln)
        reg.maybe_forget_lane(ln)
        self._heaps.tidy_top()

    def set_cap(self, key: Hashable, cap: int | None) -> None:
        c = args.cap_arg(cap, "cap")
        hashable(key, "cap key")
        if isinstance(key, tuple) and len(key) == 2 and key[0] == "lane":
            self.set_lane_cap(key[1], c)
            return
        reg = self._reg
        ks = reg.keys.get(key)
        if ks is None:
            if c is None:
                return
            ks = reg.new_key(key)
        ks.cap = c
        self._heaps.wake(ks)
        if c is None and not ks.users:
            reg.forget_key(ks)
        self._heaps.tidy_top()


def hashable(value: object, what: str) -> None:
    try:
        hash(value)
    except TypeError:
        raise BadType(f"{what} {value!r} is not hashable") from None
