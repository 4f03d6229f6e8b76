"""The kernel's nodes by name: lanes and cap keys, made on first use and forgotten when idle.

What it is for. `Registry` is the part of `core.Kernel` that makes a lane, cap key or class the
first time an item needs it and forgets an idle one (the memory contract: an idle lane back at
the default weight with no cap, and a key with no users and no cap, leave no trace), and finds
the key that blocks a class.

What it must never do: move an entry between heaps or pick an item. Forgetting a node only
clears its own bookkeeping; stale entries it leaves in other heaps die lazily (their node's
`entry` no longer points at them).
"""

from __future__ import annotations

from collections.abc import Hashable

from yoke.kernel.heaps import Heaps
from yoke.kernel.nodes import Class, KeyState, Lane
from yoke.kernel.policies import BasePolicy, quantum_of, stride_of


class Registry:
    __slots__ = ("dquantum", "dstride", "dw", "heaps", "keys", "lanes", "nid", "pol")

    def __init__(self, pol: BasePolicy, heaps: Heaps, default_weight: float) -> None:
        self.pol = pol
        self.heaps = heaps
        self.dw = default_weight
        self.dstride = stride_of(default_weight)
        self.dquantum = quantum_of(default_weight)
        self.lanes: dict[Hashable, Lane] = {}
        self.keys: dict[Hashable, KeyState] = {}
        self.nid = 0

    def __repr__(self) -> str:
        return f"Registry(lanes={len(self.lanes)}, keys={len(self.keys)})"

    def new_lane(self, name: Hashable) -> Lane:
        self.nid += 1
        ln = Lane(name, self.nid, self.dw, self.dstride, self.dquantum)
        self.pol.on_new_lane(ln)
        self.lanes[name] = ln
        return ln

    def new_key(self, name: Hashable) -> KeyState:
        self.nid += 1
        ks = KeyState(name, self.nid)
        self.keys[name] = ks
        return ks

    def new_class(self, ln: Lane, sig: tuple[Hashable, ...]) -> Class:
        keys = []
        for k in sig:
            ks = self.keys.get(k)
            keys.append(self.new_key(k) if ks is None else ks)
        self.nid += 1
        cls = Class(ln, sig, tuple(keys), self.nid)
        ln.classes[sig] = cls
        return cls

    def forget_key(self, ks: KeyState) -> None:
        del self.keys[ks.name]
        self.heaps.drop_proxy(ks)
        ks.heap.clear()

    def forget_keys(self, keys: tuple[KeyState, ...]) -> None:
        """Forget the keys of a class that nobody uses any more and that have no cap."""
        for ks in keys:
            if not ks.users and ks.cap is None:
                self.forget_key(ks)

    def maybe_forget_lane(self, ln: Lane) -> None:
        if ln.queued or ln.running or ln.cap is not None or ln.w != self.dw:
            return
        self.forget_lane(ln)

    def forget_lane(self, ln: Lane) -> None:
        del self.lanes[ln.name]
        self.heaps.drop_proxy(ln)
        ln.heap.clear()

    @staticmethod
    def blocker(cls: Class) -> KeyState | None:
        """The first saturated key of a class: its lane, then its cap keys in order."""
        ln = cls.lane
        c = ln.cap
        if c is not None and ln.running >= c:
            return ln
        for ks in cls.keys:
            c = ks.cap
            if c is not None and ks.running >= c:
                return ks
        return None
