"""The fairness kernel: which queued item runs next, under caps, for every queue in yoke.

What it is for. `Kernel` holds queued and running items, grouped in lanes (tenants, sessions,
groups), and answers "which item now?" each time a slot frees (`pop_next`). It is the exact,
fast form of a brute-force rule: among all *eligible* queued items (not blocked by the global
cap, their lane cap or any of their cap keys) dispatch the one with the smallest policy key
(KERNEL 4.2); `tests/kernel/reference.py` is that rule written as an O(N) scan, and every
decision must match it.

What it must never do: await, read a clock, draw random numbers, do I/O, or depend on hash or
set order. It never preempts: it only decides starts. It never looks at an item's payload.

Semantics (the contract other modules code against):

* Caps: `global_cap`, the lane cap (key ("lane", L)) and any other cap key. `None` = unlimited,
  `0` holds everything. Lowering a cap below the running count preempts nothing; dispatch through
  that key waits until running < cap. Running counts are kept for every key even with no cap set,
  so a cap enabled later sees exact counts (counting mode, I13).
* Work conserving: `pop_next` returns None only if no queued item is eligible; a blocked item
  never holds back an eligible one of another class (no head-of-line blocking across keys).
* Lanes: a lane with no queued and no running item, the default weight and no lane cap is
  forgotten at once; its SFQ tag (at most one stride of debt) and its `started` count go with it.
  The same holds for cap keys with no users and no cap. Memory is O(live items + live lanes).
* Weights: floats >= 0.001. `sfq` stride = round(2**32 / w); `set_weight` is the simple form:
  the new stride applies from the lane's next dispatch (no EEVDF lag rescale). `rotation` uses
  quantum = max(1, round(w)) (fractional weights are rounded, not refused). `least_running`
  compares int(running * 2**32 // w), and a weight change re-keys the lane at once.
* Items: `seq` is a global arrival counter; `requeue` keeps the item's seq, so it keeps its
  place. Explicit `seq` values passed to `push` should be unique; duplicates are ordered by push
  order within a class and are otherwise tied arbitrarily (but deterministically).
* `offer` is the counting-mode fast path (KERNEL 4.7): with nothing queued anywhere and room
  under every cap it starts the item without touching a heap, exactly as push + pop_next would;
  otherwise it only pushes, and the caller's next `pop_next` decides.

How (KERNEL 4.3-4.5): one top heap holds the visible classes (items of one lane sharing a cap-key
tuple) and one proxy per unsaturated cap key that has parked classes. A class found blocked at the
top is parked in the heap of the key that blocks it; it is reached again through that key's
proxy, so a release wakes one proxy, never a crowd. Entries are lazy: a node's live entry is the
one it points to (`nodes` module), stored keys are lower bounds, and a key is acted on only when
it equals the recomputed one. Heaps are compacted when stale entries outnumber live ones (I14).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from heapq import heapify, heappop, heappush, heapreplace

from yoke.errors import BadType, BadValue
from yoke.kernel import args
from yoke.kernel.nodes import TOP, Class, KeyState, Lane
from yoke.kernel.policies import make_policy, quantum_of, stride_of
from yoke.kernel.types import Item, ItemState, KernelStats, Key, LaneStats, Policy, PriorityScope

QUEUED = ItemState.QUEUED
RUNNING = ItemState.RUNNING
_SLACK = 64  # I14: a heap is compacted once it holds more than 2 * live + _SLACK entries


class Kernel:
    __slots__ = (
        "_dquantum", "_dstride", "_dw", "_gcap", "_items", "_key", "_keys", "_lanes", "_nid",
        "_pol", "_policy", "_queued", "_running", "_scope", "_seq", "_top", "_top_live", "credit",
    )  # fmt: skip

    def __init__(
        self,
        *,
        policy: Policy | str = "sfq",
        priority_scope: PriorityScope | str = "lane",
        global_cap: int | None = None,
        credit: int = 0,
        default_weight: float = 1.0,
    ) -> None:
        self._policy = args.enum_arg(Policy, policy, "policy")
        self._scope = args.enum_arg(PriorityScope, priority_scope, "priority_scope")
        self._gcap = args.cap_arg(global_cap, "global_cap")
        self.credit = args.credit_arg(credit)
        self._dw = args.weight_arg(default_weight, "default_weight")
        self._dstride = stride_of(self._dw)
        self._dquantum = quantum_of(self._dw)
        self._pol = make_policy(self._policy, self._scope, self.credit)
        self._key = self._pol.key
        self._top: list[tuple[Key, int, Class | KeyState]] = []
        self._top_live = 0
        self._lanes: dict[Hashable, Lane] = {}
        self._keys: dict[Hashable, KeyState] = {}
        self._items: dict[Hashable, Item] = {}
        self._queued = 0
        self._running = 0
        self._seq = 0
        self._nid = 0

    # ------------------------------------------------------------------ queue operations

    def push(
        self,
        item_id: Hashable,
        lane: Hashable,
        *,
        priority: int = 0,
        keys: Iterable[Hashable] = (),
        seq: int | None = None,
        payload: object = None,
    ) -> Item:
        item = self._new_item(item_id, lane, priority, keys, seq, payload)
        self._enqueue(item, fresh=True)
        self._items[item_id] = item
        if len(self._top) > 2 * self._top_live + _SLACK:
            self._tidy_top()
        return item

    def offer(
        self,
        item_id: Hashable,
        lane: Hashable,
        *,
        priority: int = 0,
        keys: Iterable[Hashable] = (),
        payload: object = None,
    ) -> Item:
        item = self._new_item(item_id, lane, priority, keys, None, payload)
        if not self._queued and (self._gcap is None or self._running < self._gcap):
            ln = self._lanes.get(lane)
            if ln is None:
                ln = self._new_lane(lane)
            cls = ln.classes.get(item.keys)
            if cls is None:
                cls = self._new_class(ln, item.keys)
            if self._blocker(cls) is None:
                # Exactly what push + pop_next would do with an empty queue, minus the heaps.
                for ks in cls.keys:
                    ks.users += 1
                item._cls = cls
                self._pol.on_activate(ln)
                cls.n += 1
                ln.queued += 1
                self._queued += 1
                self._start(cls, item)
                self._items[item_id] = item
                return item
        self._enqueue(item, fresh=True)
        self._items[item_id] = item
        self._tidy_top()
        return item

    def pop_next(self) -> Item | None:
        if self._gcap is not None and self._running >= self._gcap:
            return None
        top = self._top
        fk = self._key
        while top:
            entry = top[0]
            node = entry[2]
            if node.entry is not entry:
                heappop(top)
                continue
            if type(node) is Class:
                cls = node
                h = cls.heap
                head = h[0]
                while head[2]._entry is not head:
                    heappop(h)
                    head = h[0]
                ln = cls.lane
                cur = fk(ln, head[0], head[1])
                if cur != entry[0]:
                    ne = (cur, cls.nid, cls)
                    heapreplace(top, ne)
                    cls.entry = ne
                    continue
                if ln.cap is not None or cls.keys:
                    blk = self._blocker(cls)
                    if blk is not None:
                        heappop(top)
                        self._park(cls, blk, cur)
                        continue
                heappop(h)
                item = head[2]
                self._start(cls, item)
                if cls.n:
                    head = h[0]
                    while head[2]._entry is not head:
                        heappop(h)
                        head = h[0]
                    ne = (fk(ln, head[0], head[1]), cls.nid, cls)
                    heapreplace(top, ne)
                    cls.entry = ne
                else:
                    heappop(top)
                    cls.entry = None
                    cls.where = None
                    self._top_live -= 1
                return item
            assert isinstance(node, KeyState)
            got = self._pop_proxy(node, entry[0])
            if got is not None:
                return got
        return None

    def release(self, item_id: Hashable) -> None:
        item = self._lookup(item_id, "release")
        if item.state is not RUNNING:
            raise BadValue(f"cannot release item {item_id!r}: it is {item.state.name}, not RUNNING")
        del self._items[item_id]
        item.state = ItemState.DONE
        self._stop(item, leaving=True)
        if len(self._top) > 2 * self._top_live + _SLACK:
            self._tidy_top()

    def cancel(self, item_id: Hashable) -> bool:
        item = self._items.get(item_id)
        if item is None or item.state is not QUEUED:
            return False
        del self._items[item_id]
        item.state = ItemState.CANCELLED
        item._entry = None
        self._dequeue(item)
        self._tidy_top()
        return True

    def reprioritize(self, item_id: Hashable, priority: int) -> bool:
        p = args.int_arg(priority, "priority")
        item = self._items.get(item_id)
        if item is None or item.state is not QUEUED:
            return False
        if p == item.priority:
            return True
        cls = item._cls
        assert cls is not None
        h = cls.heap
        while h[0][2]._entry is not h[0]:
            heappop(h)
        item.priority = p
        e = (-p, item.seq, item)
        item._entry = e
        heappush(h, e)
        ce = cls.entry
        if h[0] is e and ce is not None:
            nk = self._key(cls.lane, -p, item.seq)
            if nk < ce[0]:
                self._relocate(cls, nk)
        self._tidy_class(cls)
        self._tidy_top()
        return True

    def requeue(self, item_id: Hashable) -> Item:
        item = self._lookup(item_id, "requeue")
        if item.state is not RUNNING:
            raise BadValue(f"cannot requeue item {item_id!r}: it is {item.state.name}, not RUNNING")
        self._stop(item, leaving=False)
        self._enqueue(item, fresh=False)
        self._tidy_top()
        return item

    def pending(self, lane: Hashable) -> list[Item]:
        ln = self._lanes.get(lane)
        if ln is None:
            return []
        out = [e[2] for c in ln.classes.values() for e in c.heap if e[2]._entry is e]
        out.sort(key=_order)
        return out

    def claim(self, item_id: Hashable) -> Item | None:
        item = self._lookup(item_id, "claim")
        if item.state is not QUEUED or self._blocked_by(item) is not None:
            return None
        cls = item._cls
        assert cls is not None
        self._start(cls, item)
        if not cls.n:
            self._drop_class(cls)
        else:
            self._tidy_class(cls)
        self._tidy_top()
        return item

    def drain(self) -> list[Item]:
        out = [i for i in self._items.values() if i.state is QUEUED]
        out.sort(key=_order)
        for item in out:
            del self._items[item.id]
            item.state = ItemState.CANCELLED
            item._entry = None
            self._dequeue(item)
        self._tidy_top()
        return out

    # ------------------------------------------------------------------ configuration

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
        if item is None or item.state is not QUEUED:
            return None
        return self._blocked_by(item)

    # ------------------------------------------------------------------ introspection

    @property
    def running(self) -> int:
        return self._running

    @property
    def queued(self) -> int:
        return self._queued

    @property
    def policy(self) -> Policy:
        return self._policy

    @property
    def priority_scope(self) -> PriorityScope:
        return self._scope

    @property
    def global_cap(self) -> int | None:
        return self._gcap

    def get(self, item_id: Hashable) -> Item | None:
        return self._items.get(item_id)

    def lane_stats(self, lane: Hashable) -> LaneStats:
        ln = self._lanes.get(lane)
        if ln is None:
            return LaneStats(queued=0, running=0, started=0, weight=self._dw)
        return LaneStats(queued=ln.queued, running=ln.running, started=ln.started, weight=ln.w)

    def stats(self) -> KernelStats:
        lanes = {
            n: LaneStats(queued=ln.queued, running=ln.running, started=ln.started, weight=ln.w)
            for n, ln in self._lanes.items()
        }
        return KernelStats(queued=self._queued, running=self._running, lanes=lanes)

    def __repr__(self) -> str:
        return (
            f"Kernel(policy={self._policy.value}, scope={self._scope.value}, queued={self._queued},"
            f" running={self._running}, lanes={len(self._lanes)}, global_cap={self._gcap})"
        )

    def _heaps(self) -> Iterator[tuple[str, int, int]]:
        """(name, entries, live entries) of every heap, for the I14 check in tests."""
        yield "top", len(self._top), self._top_live
        for ln in self._lanes.values():
            yield f"lane {ln.name!r}", len(ln.heap), ln.nparked
            for c in ln.classes.values():
                yield f"class {ln.name!r} {c.sig!r}", len(c.heap), c.n
        for ks in self._keys.values():
            yield f"key {ks.name!r}", len(ks.heap), ks.nparked

    # ------------------------------------------------------------------ internals

    def _new_item(
        self,
        item_id: Hashable,
        lane: Hashable,
        priority: object,
        keys: Iterable[Hashable],
        seq: object,
        payload: object,
    ) -> Item:
        p = priority if type(priority) is int else args.int_arg(priority, "priority")
        try:
            dup = item_id in self._items
            hash(lane)
        except TypeError:
            self._hashable(item_id, "item id")
            self._hashable(lane, "lane")
            raise
        if dup:
            raise BadValue(f"item id {item_id!r} is already queued or running")
        sig = () if keys == () else args.keys_arg(lane, keys)
        uid = self._seq
        if seq is None:
            s = uid
            self._seq = uid + 1
        else:
            s = args.int_arg(seq, "seq")
            self._seq = max(uid + 1, s + 1)
        return Item(item_id, lane, p, s, sig, payload, uid)

    @staticmethod
    def _hashable(value: object, what: str) -> None:
        try:
            hash(value)
        except TypeError:
            raise BadType(f"{what} {value!r} is not hashable") from None

    def _lookup(self, item_id: Hashable, op: str) -> Item:
        try:
            item = self._items.get(item_id)
        except TypeError:
            raise BadType(f"item id {item_id!r} is not hashable") from None
        if item is None:
            raise BadValue(f"cannot {op} item {item_id!r}: no such queued or running item")
        return item

    def _new_lane(self, name: Hashable) -> Lane:
        self._nid += 1
        ln = Lane(name, self._nid, self._dw, self._dstride, self._dquantum)
        self._pol.on_new_lane(ln)
        self._lanes[name] = ln
        return ln

    def _new_key(self, name: Hashable) -> KeyState:
        self._nid += 1
        ks = KeyState(name, self._nid)
        self._keys[name] = ks
        return ks

    def _new_class(self, ln: Lane, sig: tuple[Hashable, ...]) -> Class:
        keys = []
        for k in sig:
            ks = self._keys.get(k)
            keys.append(self._new_key(k) if ks is None else ks)
        self._nid += 1
        cls = Class(ln, sig, tuple(keys), self._nid)
        ln.classes[sig] = cls
        return cls

    def _enqueue(self, item: Item, *, fresh: bool) -> None:
        ln = self._lanes.get(item.lane)
        if ln is None:
            ln = self._new_lane(item.lane)
        cls = ln.classes.get(item.keys)
        if cls is None:
            cls = self._new_class(ln, item.keys)
        if fresh:
            for ks in cls.keys:
                ks.users += 1
        if not ln.queued:
            self._pol.on_activate(ln)
        ln.queued += 1
        self._queued += 1
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
        self._queued -= 1
        self._running += 1
        for ks in cls.keys:
            ks.running += 1
        self._pol.on_dispatch(ln, -item.priority)

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
        if self._pol.rekey_on_release:
            # Pitfall 3: the lane's keys just got smaller; re-push its parked classes before any
            # proxy is pushed, so every proxy's key is computed from fresh entries.
            self._rekey_lane(ln)
        self._wake(ln)
        for ks in cls.keys:
            self._wake(ks)
        if leaving:
            if not cls.n and not cls.nrun:
                del ln.classes[cls.sig]
            for ks in cls.keys:
                if not ks.users and ks.cap is None:
                    self._forget_key(ks)
            self._maybe_forget_lane(ln)

    def _dequeue(self, item: Item) -> None:
        """A QUEUED item leaves without running (cancel, drain); its heap entry is already dead."""
        cls = item._cls
        assert cls is not None
        ln = cls.lane
        cls.n -= 1
        ln.queued -= 1
        self._queued -= 1
        for ks in cls.keys:
            ks.users -= 1
        if not cls.n:
            self._drop_class(cls)
            cls.heap.clear()
            if not cls.nrun:
                del ln.classes[cls.sig]
        else:
            self._tidy_class(cls)
        for ks in cls.keys:
            if not ks.users and ks.cap is None:
                self._forget_key(ks)
        self._maybe_forget_lane(ln)

    def _pop_proxy(self, ks: KeyState, key: Key) -> Item | None:
        """One step of pop_next at a key proxy (KERNEL 4.5). None means: look at the top again."""
        top = self._top
        if (ks.cap is not None and ks.running >= ks.cap) or not ks.nparked:
            heappop(top)
            self._drop_proxy(ks)
            return None
        kh = ks.heap
        ke = kh[0]
        while ke[2].entry is not ke:
            heappop(kh)
            ke = kh[0]
        cls = ke[2]
        ln = cls.lane
        h = cls.heap
        head = h[0]
        while head[2]._entry is not head:
            heappop(h)
            head = h[0]
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
        item = head[2]
        self._start(cls, item)
        if cls.n:
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
        if (ks.cap is not None and ks.running >= ks.cap) or not ks.nparked:
            heappop(top)
            self._drop_proxy(ks)
        else:
            ks.entry = pe = (kh[0][0], ks.nid, ks)
            heapreplace(top, pe)
        return item

    def _blocker(self, cls: Class) -> KeyState | None:
        ln = cls.lane
        c = ln.cap
        if c is not None and ln.running >= c:
            return ln
        for ks in cls.keys:
            c = ks.cap
            if c is not None and ks.running >= c:
                return ks
        return None

    def _blocked_by(self, item: Item) -> Hashable | None:
        if self._gcap is not None and self._running >= self._gcap:
            return "global"
        assert item._cls is not None
        blk = self._blocker(item._cls)
        if blk is None:
            return None
        return ("lane", blk.name) if type(blk) is Lane else blk.name

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

    def _wake(self, ks: KeyState) -> None:
        """Push the proxy of a key that has parked classes and room (one entry, not a crowd)."""
        if ks.entry is None and ks.nparked and (ks.cap is None or ks.running < ks.cap):
            self._proxy_to_top(ks, ks.heap[0][0])

    def _proxy_to_top(self, ks: KeyState, key: Key) -> None:
        ks.entry = e = (key, ks.nid, ks)
        heappush(self._top, e)
        if ks.where is None:
            ks.where = TOP
            self._top_live += 1

    def _drop_proxy(self, ks: KeyState) -> None:
        if ks.where is TOP:
            self._top_live -= 1
        ks.entry = None
        ks.where = None

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

    def _forget_key(self, ks: KeyState) -> None:
        del self._keys[ks.name]
        self._drop_proxy(ks)
        ks.heap.clear()

    def _maybe_forget_lane(self, ln: Lane) -> None:
        if ln.queued or ln.running or ln.cap is not None or ln.w != self._dw:
            return
        del self._lanes[ln.name]
        self._drop_proxy(ln)
        ln.heap.clear()

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


def _order(item: Item) -> tuple[int, int, int]:
    return (-item.priority, item.seq, item._uid)
