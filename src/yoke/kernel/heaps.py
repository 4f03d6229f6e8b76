"""The lazy heap machinery under `core.Kernel`: parking, key proxies, re-keying and compaction.

What it is for (KERNEL 4.3-4.5). The top heap holds visible classes and one proxy per unsaturated
cap key that has parked classes. A class found blocked is parked in the heap of the key that
blocks it and is reached again through that key's proxy, so a release wakes one proxy, never a
crowd. This module moves entries between those heaps, serves a proxy when it reaches the top
(`_pop_proxy`), re-pushes entries whose key got smaller (M3), and compacts heaps whose stale
entries outnumber their live ones (I14). It also holds the general, slower forms of enqueue and
stop that `core` uses off its inlined fast paths.

What it must never do: act on an entry that is not its node's live one (`node.entry is entry`),
or let a stored key rise above the node's current key (stored keys are lower bounds; that is what
makes acting only on `stored == current` exact). A re-key that lowers a key must push a fresh
entry before any proxy reads it (pitfall 3 of KERNEL 4.10).
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush, heapreplace

from yoke.kernel.base import _SLACK, KernelBase
from yoke.kernel.nodes import TOP, Class, KeyState, Lane
from yoke.kernel.types import Item, ItemState, Key

QUEUED = ItemState.QUEUED
RUNNING = ItemState.RUNNING


class Heaps(KernelBase):
    __slots__ = ()

    # ------------------------------------------------------------------ item moves (general form)

    def _enqueue(self, item: Item, *, fresh: bool) -> None:
        """Put an item (new, or a running one being requeued) into its class heap."""
        ln = self._lanes.get(item.lane)
        if ln is None:
            ln = self._new_lane(item.lane)
        cls = ln.classes.get(item.keys)
        if cls is None:
            cls = self._new_class(ln, item.keys)
        if fresh:
            for ks in cls.keys:
                ks.users += 1
        if not ln.queued and self._activate is not None:
            self._activate(ln)
        ln.queued += 1
        cls.n += 1
        item._cls = cls
        item.state = QUEUED
        negp = -item.priority
        e = (negp, item.seq, item)
        item._entry = e
        h = cls.heap
        while h and h[0][2]._entry is not h[0]:
            heappop(h)
        heappush(h, e)
        ce = cls.entry
        if ce is None:
            cls.entry = ne = (self._key(ln, negp, item.seq), cls.nid, cls)
            heappush(self._top, ne)
            cls.where = TOP
            self._top_live += 1
        elif h[0] is e:
            nk = self._key(ln, negp, item.seq)
            if nk < ce[0]:
                self._relocate(cls, nk)
        elif len(h) > 2 * cls.n + _SLACK:
            self._tidy_class(cls)

    def _start(self, cls: Class, item: Item) -> None:
        """QUEUED -> RUNNING: counters and the policy's dispatch hook; heaps are the caller's."""
        item._entry = None
        item.state = RUNNING
        cls.n -= 1
        cls.nrun += 1
        ln = cls.lane
        ln.queued -= 1
        ln.running += 1
        ln.started += 1
        self._running += 1
        for ks in cls.keys:
            ks.running += 1
        if self._dispatch is not None:
            self._dispatch(ln, -item.priority)

    def _stop(self, item: Item, *, leaving: bool) -> None:
        """RUNNING -> (DONE | QUEUED): free counters, then wake the keys it held."""
        cls = item._cls
        assert cls is not None
        ln = cls.lane
        self._running -= 1
        ln.running -= 1
        cls.nrun -= 1
        for ks in cls.keys:
            ks.running -= 1
            if leaving:
                ks.users -= 1
        self._freed(ln, cls.keys)
        if leaving:
            if not cls.n and not cls.nrun:
                del ln.classes[cls.sig]
            self._forget_keys(cls.keys)
            self._maybe_forget_lane(ln)

    def _freed(self, ln: Lane, keys: tuple[KeyState, ...]) -> None:
        """A running item of `ln` carrying `keys` stopped: re-key (M3), then wake the keys."""
        if self._rekey:
            # Pitfall 3: the lane's keys just got smaller; re-push its parked classes before any
            # proxy is pushed, so every proxy's key is computed from fresh entries.
            self._rekey_lane(ln)
        if ln.nparked and ln.entry is None:
            self._wake(ln)
        for ks in keys:
            if ks.nparked and ks.entry is None:
                self._wake(ks)

    def _dequeue(self, item: Item) -> None:
        """A QUEUED item leaves without running (cancel, drain); its heap entry is already dead."""
        cls = item._cls
        assert cls is not None
        ln = cls.lane
        cls.n -= 1
        ln.queued -= 1
        for ks in cls.keys:
            ks.users -= 1
        if not cls.n:
            self._drop_class(cls)
            cls.heap.clear()
            if not cls.nrun:
                del ln.classes[cls.sig]
        else:
            self._tidy_class(cls)
        self._forget_keys(cls.keys)
        self._maybe_forget_lane(ln)

    # ------------------------------------------------------------------ proxies

    def _pop_proxy(self, ks: KeyState, key: Key) -> Item | None:
        """One step of pop_next at a key proxy (KERNEL 4.5). None means: look at the top again."""
        top = self._top
        cap = ks.cap
        if (cap is not None and ks.running >= cap) or not ks.nparked:
            heappop(top)
            self._drop_proxy(ks)
            return None
        kh = ks.heap
        ke = kh[0]
        cls = ke[2]
        while cls.entry is not ke:
            heappop(kh)
            ke = kh[0]
            cls = ke[2]
        ln = cls.lane
        h = cls.heap
        head = h[0]
        item = head[2]
        while item._entry is not head:
            heappop(h)
            head = h[0]
            item = head[2]
        fk = self._key
        cur = fk(ln, head[0], head[1])
        if cur != ke[0]:
            cls.entry = ne = (cur, cls.nid, cls)
            heapreplace(kh, ne)
            return None
        if cur != key:
            ks.entry = pe = (cur, ks.nid, ks)
            heapreplace(top, pe)
            return None
        blk = self._blocker(cls)
        if blk is not None:
            heappop(kh)
            self._park(cls, blk, cur)
            return None
        heappop(h)
        # QUEUED -> RUNNING, as `_start` (inlined: this is the hot-key path).
        item._entry = None
        item.state = RUNNING
        n = cls.n - 1
        cls.n = n
        cls.nrun += 1
        ln.queued -= 1
        ln.running += 1
        ln.started += 1
        self._running += 1
        for k in cls.keys:
            k.running += 1
        if self._dispatch is not None:
            self._dispatch(ln, head[0])
        if n:
            head = h[0]
            while head[2]._entry is not head:
                heappop(h)
                head = h[0]
            cls.entry = ne = (fk(ln, head[0], head[1]), cls.nid, cls)
            heapreplace(kh, ne)
        else:
            heappop(kh)
            cls.entry = None
            cls.where = None
            ks.nparked -= 1
        cap = ks.cap
        if (cap is not None and ks.running >= cap) or not ks.nparked:
            heappop(top)
            self._drop_proxy(ks)
        else:
            ks.entry = pe = (kh[0][0], ks.nid, ks)
            heapreplace(top, pe)
        return item

    def _wake(self, ks: KeyState) -> None:
        """Push the proxy of a key that has parked classes and room (one entry, not a crowd)."""
        c = ks.cap
        if ks.entry is None and ks.nparked and (c is None or ks.running < c):
            ks.entry = e = (ks.heap[0][0], ks.nid, ks)
            heappush(self._top, e)
            if ks.where is None:
                ks.where = TOP
                self._top_live += 1

    def _proxy_to_top(self, ks: KeyState, key: Key) -> None:
        ks.entry = e = (key, ks.nid, ks)
        heappush(self._top, e)
        if ks.where is None:
            ks.where = TOP
            self._top_live += 1

    # ------------------------------------------------------------------ moving classes

    def _park(self, cls: Class, ks: KeyState, key: Key) -> None:
        """Move a blocked class (its old entry already popped) into the heap of key `ks`."""
        w = cls.where
        if w is TOP:
            self._top_live -= 1
        elif w is not None:
            w.nparked -= 1
        cls.entry = e = (key, cls.nid, cls)
        heappush(ks.heap, e)
        cls.where = ks
        ks.nparked += 1
        pe = ks.entry
        if pe is not None and key < pe[0]:
            # Keep the proxy a lower bound of its parked classes, whether or not it is saturated.
            self._proxy_to_top(ks, key)

    def _relocate(self, cls: Class, nk: Key) -> None:
        """A placed class's key got smaller (M3): push a fresh entry where it lives."""
        cls.entry = e = (nk, cls.nid, cls)
        w = cls.where
        if w is TOP:
            heappush(self._top, e)
            return
        assert w is not None
        heappush(w.heap, e)
        pe = w.entry
        if pe is not None and nk < pe[0]:
            self._proxy_to_top(w, nk)
        if len(w.heap) > 2 * w.nparked + _SLACK:
            self._tidy_key(w)

    def _rekey_lane(self, ln: Lane) -> None:
        fk = self._key
        for cls in ln.classes.values():
            ce = cls.entry
            if ce is None:
                continue
            h = cls.heap
            while h[0][2]._entry is not h[0]:
                heappop(h)
            nk = fk(ln, h[0][0], h[0][1])
            if nk < ce[0]:
                self._relocate(cls, nk)

    def _drop_class(self, cls: Class) -> None:
        w = cls.where
        if w is TOP:
            self._top_live -= 1
        elif w is not None:
            w.nparked -= 1
            if not w.nparked:
                w.heap.clear()
            elif len(w.heap) > 2 * w.nparked + _SLACK:
                self._tidy_key(w)
        cls.entry = None
        cls.where = None

    # ------------------------------------------------------------------ compaction (I14)

    def _tidy_top(self) -> None:
        top = self._top
        if len(top) > 2 * self._top_live + _SLACK:
            top[:] = [e for e in top if e[2].entry is e]
            heapify(top)

    @staticmethod
    def _tidy_key(ks: KeyState) -> None:
        ks.heap[:] = [e for e in ks.heap if e[2].entry is e]
        heapify(ks.heap)

    @staticmethod
    def _tidy_class(cls: Class) -> None:
        h = cls.heap
        if len(h) > 2 * cls.n + _SLACK:
            h[:] = [e for e in h if e[2]._entry is e]
            heapify(h)
