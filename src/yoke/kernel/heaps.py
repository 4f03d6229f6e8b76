"""The lazy heap machinery under `core.Kernel`: the top heap, parking, key proxies, re-keying and
compaction, as one part the kernel holds.

What it is for. The top heap holds visible classes and one proxy per unsaturated cap key that has
parked classes. A class found blocked is parked in the heap of the key that blocks it and is
reached again through that key's proxy, so a release wakes one proxy, never a crowd. `Heaps`
moves entries between those heaps, re-pushes entries whose key got smaller, and compacts heaps
whose stale entries outnumber their live ones (docs/kernel.md: the heaps, and why acting only on
`stored == current` keys is exact).

What it must never do: act on an entry that is not its node's live one (`node.entry is entry`),
or let a stored key rise above the node's current key (stored keys are lower bounds). A re-key
that lowers a key must push a fresh entry before any proxy reads it. It never starts or stops an
item: counts are the kernel's.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heapify, heappop, heappush

from yoke.kernel.nodes import TOP, Class, KeyState, Lane
from yoke.kernel.types import Key

SLACK = 64  # a heap is compacted once it holds more than 2 * live + SLACK entries


class Heaps:
    __slots__ = ("key", "live", "top")

    def __init__(self, key: Callable[[Lane, int, int], Key]) -> None:
        self.key = key  # the policy's key, bound once
        self.top: list[tuple[Key, int, Class | KeyState]] = []
        self.live = 0  # live entries of `top`

    def __repr__(self) -> str:
        return f"Heaps(top={len(self.top)}, live={self.live})"

    # ------------------------------------------------------------------ proxies

    def wake(self, ks: KeyState) -> None:
        """Push the proxy of a key that has parked classes and room (one entry, not a crowd)."""
        c = ks.cap
        if ks.entry is None and ks.nparked and (c is None or ks.running < c):
            ks.entry = e = (ks.heap[0][0], ks.nid, ks)
            heappush(self.top, e)
            if ks.where is None:
                ks.where = TOP
                self.live += 1

    def proxy_to_top(self, ks: KeyState, key: Key) -> None:
        ks.entry = e = (key, ks.nid, ks)
        heappush(self.top, e)
        if ks.where is None:
            ks.where = TOP
            self.live += 1

    # ------------------------------------------------------------------ moving classes

    def park(self, cls: Class, ks: KeyState, key: Key) -> None:
        """Move a blocked class (its old entry already popped) into the heap of key `ks`."""
        w = cls.where
        if w is TOP:
            self.live -= 1
        elif w is not None:
            w.nparked -= 1
        cls.entry = e = (key, cls.nid, cls)
        heappush(ks.heap, e)
        cls.where = ks
        ks.nparked += 1
        pe = ks.entry
        if pe is not None and key < pe[0]:
            # Keep the proxy a lower bound of its parked classes, whether or not it is saturated.
            self.proxy_to_top(ks, key)

    def relocate(self, cls: Class, nk: Key) -> None:
        """A placed class's key got smaller (M3): push a fresh entry where it lives."""
        cls.entry = e = (nk, cls.nid, cls)
        w = cls.where
        if w is TOP:
            heappush(self.top, e)
            return
        assert w is not None
        heappush(w.heap, e)
        pe = w.entry
        if pe is not None and nk < pe[0]:
            self.proxy_to_top(w, nk)
        if len(w.heap) > 2 * w.nparked + SLACK:
            self.tidy_key(w)

    def rekey_lane(self, ln: Lane) -> None:
        fk = self.key
        for cls in ln.classes.values():
            ce = cls.entry
            if ce is None:
                continue
            h = cls.heap
            while h[0][2]._entry is not h[0]:
                heappop(h)
            nk = fk(ln, h[0][0], h[0][1])
            if nk < ce[0]:
                self.relocate(cls, nk)

    def drop_class(self, cls: Class) -> None:
        w = cls.where
        if w is TOP:
            self.live -= 1
        elif w is not None:
            w.nparked -= 1
            if not w.nparked:
                w.heap.clear()
            elif len(w.heap) > 2 * w.nparked + SLACK:
                self.tidy_key(w)
        cls.entry = None
        cls.where = None

    def drop_proxy(self, ks: KeyState) -> None:
        if ks.where is TOP:
            self.live -= 1
        ks.entry = None
        ks.where = None

    # ------------------------------------------------------------------ compaction

    def tidy_top(self) -> None:
        top = self.top
        if len(top) > 2 * self.live + SLACK:
            top[:] = [e for e in top if e[2].entry is e]
            heapify(top)

    @staticmethod
    def tidy_key(ks: KeyState) -> None:
        ks.heap[:] = [e for e in ks.heap if e[2].entry is e]
        heapify(ks.heap)

    @staticmethod
    def tidy_class(cls: Class) -> None:
        h = cls.heap
        if len(h) > 2 * cls.n + SLACK:
            h[:] = [e for e in h if e[2]._entry is e]
            heapify(h)
