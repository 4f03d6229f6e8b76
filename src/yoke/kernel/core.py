"""The fairness kernel: which queued item runs next, under caps, for every queue in yoke.

What it is for. `Kernel` holds queued and running items, grouped in lanes (tenants, sessions,
groups), and answers "which item now?" each time a slot frees (`pop_next`). It is the exact,
fast form of a brute-force rule: among all *eligible* queued items (not held back by the global
cap, their lane cap or any of their cap keys) start the one with the smallest policy key;
`tests/kernel/reference.py` is that rule written as an O(N) scan, and every decision must match
it. The contract other modules code against (caps, work conservation, the memory contract,
weights, `seq`, `offer` and `admit`) is docs/kernel.md; rules (M1-M3), invariants (I1-I14) and
pitfalls (P1-P7) named in comments are defined there.

What it must never do: await, read a clock, draw random numbers, do I/O, or depend on hash or
set order. It never preempts: it only decides starts. It never looks at an item's payload.

Layout: the kernel holds three parts by reference: `heaps.Heaps` (the top heap, parking, key
proxies, re-keying, compaction), `registry.Registry` (lanes and keys by name: made on first use,
forgotten when idle) and `settings.Settings` (weights and caps). This module keeps the items,
the running count and the operations. `push`, `pop_next` and `release` are the hot paths: they
inline the helpers they would call (`_new_item`, `_enqueue`, `_start`, `_stop`, the blocker, and
lane-scope SFQ's key and dispatch hook), and reach the top heap and the node dicts through
aliases of the parts' own containers. Each inlined block names the helper it copies; a change to
a helper must be made in its inlined copies too, and the differential tests (`tests/kernel`) are
what proves the copies still agree.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from heapq import heappop, heappush, heapreplace, nsmallest

from yoke.errors import BadType, BadValue
from yoke.kernel import args
from yoke.kernel.heaps import SLACK, Heaps
from yoke.kernel.nodes import TOP, Class, KeyState, Lane
from yoke.kernel.policies import BasePolicy, Sfq, make_policy
from yoke.kernel.registry import Registry
from yoke.kernel.settings import Settings, hashable
from yoke.kernel.types import (
    Item,
    ItemState,
    KernelStats,
    Key,
    LaneHead,
    LaneStats,
    Policy,
    PriorityScope,
)

QUEUED = ItemState.QUEUED
RUNNING = ItemState.RUNNING
DONE = ItemState.DONE
CANCELLED = ItemState.CANCELLED


class Kernel:
    __slots__ = (
        "_activate", "_dispatch", "_gcap", "_h", "_items", "_key", "_keys", "_lanes", "_pol",
        "_policy", "_r", "_rekey", "_running", "_scope", "_seq", "_settings", "_sfq", "_top",
        "credit",
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
        dw = args.weight_arg(default_weight, "default_weight")
        pol = make_policy(self._policy, self._scope, self.credit)
        self._pol = pol
        # Bound once: the hot paths call these through a slot, and skip the no-op hooks.
        self._key = pol.key
        noop = BasePolicy.on_dispatch
        self._dispatch = None if type(pol).on_dispatch is noop else pol.on_dispatch
        noop_act = BasePolicy.on_activate
        self._activate = None if type(pol).on_activate is noop_act else pol.on_activate
        self._rekey = pol.rekey_on_release
        self._sfq: Sfq | None = pol if type(pol) is Sfq else None
        # The parts: the heaps, the nodes by name, the setters of weights and caps. The hot
        # paths reach the top heap and the node dicts through these aliases (the same objects).
        self._h = h = Heaps(pol.key)
        self._r = r = Registry(pol, h, dw)
        self._settings = Settings(r, h, rekey_on_release=pol.rekey_on_release)
        self._top = h.top
        self._lanes = r.lanes
        self._keys = r.keys
        self._items: dict[Hashable, Item] = {}
        self._running = 0  # running items; the queued ones are len(_items) - _running
        self._seq = 0

    # ------------------------------------------------------------------ settings (a part)

    def set_weight(self, lane: Hashable, weight: float) -> None:
        self._settings.set_weight(lane, weight)

    def weight(self, lane: Hashable) -> float:
        return self._settings.weight(lane)

    def set_global_cap(self, cap: int | None) -> None:
        self._gcap = args.cap_arg(cap, "global_cap")

    def set_lane_cap(self, lane: Hashable, cap: int | None) -> None:
        self._settings.set_lane_cap(lane, cap)

    def set_cap(self, key: Hashable, cap: int | None) -> None:
        self._settings.set_cap(key, cap)

    def blocked_by(self, item_id: Hashable) -> Hashable | None:
        item = self._items.get(item_id)
        if item is None or item.state is not ItemState.QUEUED:
            return None
        return self._blocked_by(item)

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
        # `_new_item` then `_enqueue(item, fresh=True)`, inlined: push is one of the three hot
        # paths. The checks run in `_new_item`'s order and mutate nothing before they pass.
        p = priority if type(priority) is int else args.int_arg(priority, "priority")
        items = self._items
        try:
            dup = item_id in items
            ln = self._lanes.get(lane)
        except TypeError:
            hashable(item_id, "item id")
            hashable(lane, "lane")
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
        item = Item(item_id, lane, p, s, sig, payload, uid)
        if ln is None:
            ln = self._r.new_lane(lane)
        cls = ln.classes.get(sig)
        if cls is None:
            cls = self._r.new_class(ln, sig)
        if sig:
            for ks in cls.keys:
                ks.users += 1
        if not ln.queued and self._activate is not None:
            self._activate(ln)
        ln.queued += 1
        n = cls.n + 1
        cls.n = n
        item._cls = cls
        negp = -p
        item._entry = e = (negp, s, item)
        h = cls.heap
        if h:  # drop a dead head, so that `h[0] is e` below tells whether e is the live head
            x = h[0]
            while x[2]._entry is not x:
                heappop(h)
                if not h:
                    break
                x = h[0]
        heappush(h, e)
        ce = cls.entry
        if ce is None:
            cls.entry = ne = (self._key(ln, negp, s), cls.nid, cls)
            heappush(self._top, ne)
            cls.where = TOP
            self._h.live += 1
        elif h[0] is e:
            nk = self._key(ln, negp, s)
            if nk < ce[0]:
                self._h.relocate(cls, nk)
                self._h.tidy_top()
        elif len(h) > 2 * n + SLACK:
            self._h.tidy_class(cls)
        items[item_id] = item
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
        if not self._start_at_once(item):
            self._enqueue(item, fresh=True)
            self._items[item_id] = item
            self._h.tidy_top()
        return item

    def admit(
        self,
        item_id: Hashable,
        lane: Hashable,
        *,
        priority: int = 0,
        keys: Iterable[Hashable] = (),
        payload: object = None,
    ) -> Item | None:
        """`offer` when it would start the item at once (nothing queued, every cap has room);
        otherwise change nothing (but the sequence counter) and return None, so the caller can
        make the item durable first and `offer` it then. The check reads the caps without
        creating a lane or key, so a refused admit leaves no trace in the policy's state."""
        item = self._new_item(item_id, lane, priority, keys, None, payload)
        return item if self._start_at_once(item) else None

    def _fits_now(self, lane: Hashable, sig: tuple[Hashable, ...]) -> bool:
        # The caps `_blocker` reads for the item's class, looked up without making the class.
        if len(self._items) != self._running:  # something is queued: it goes first
            return False
        if self._gcap is not None and self._running >= self._gcap:
            return False
        ln = self._lanes.get(lane)
        if ln is not None and ln.cap is not None and ln.running >= ln.cap:
            return False
        for k in sig:
            ks = self._keys.get(k)
            if ks is not None and ks.cap is not None and ks.running >= ks.cap:
                return False
        return True

    def _start_at_once(self, item: Item) -> bool:
        """Start `item` if the queue is empty and its caps have room: exactly what push +
        pop_next would do with an empty queue, minus the heaps. Refused, it changes nothing."""
        if not self._fits_now(item.lane, item.keys):
            return False
        ln = self._lanes.get(item.lane)
        if ln is None:
            ln = self._r.new_lane(item.lane)
        cls = ln.classes.get(item.keys)
        if cls is None:
            cls = self._r.new_class(ln, item.keys)
        for ks in cls.keys:
            ks.users += 1
        item._cls = cls
        if self._activate is not None:
            self._activate(ln)
        cls.n += 1
        ln.queued += 1
        self._start(cls, item)
        self._items[item.id] = item
        return True

    def pop_next(self) -> Item | None:
        gcap = self._gcap
        if gcap is not None and self._running >= gcap:
            return None
        top = self._top
        fk = self._key
        sfq = self._sfq
        while top:
            entry = top[0]
            node = entry[2]
            if node.entry is not entry:
                heappop(top)
                continue
            if type(node) is not Class:
                assert isinstance(node, KeyState)
                got = self._pop_proxy(node, entry[0])
                self._h.tidy_top()
                if got is None:
                    continue
                return got
            h = node.heap
            head = h[0]
            item = head[2]
            while item._entry is not head:
                heappop(h)
                head = h[0]
                item = head[2]
            ln = node.lane
            negp = head[0]
            if sfq is None:
                cur = fk(ln, negp, head[1])
            else:  # `Sfq.key`, inlined
                s = ln.S
                v = sfq.v0 - sfq.credit
                cur = (s if s > v else v, ln.tb, negp, head[1])
            if cur != entry[0]:
                node.entry = ne = (cur, node.nid, node)
                heapreplace(top, ne)
                continue
            keys = node.keys
            c = ln.cap
            if keys or c is not None:
                # `_blocker(node)`, inlined: the first saturated key, lane first.
                blk: KeyState | None = ln if c is not None and ln.running >= c else None
                if blk is None:
                    for ks in keys:
                        c = ks.cap
                        if c is not None and ks.running >= c:
                            blk = ks
                            break
                if blk is not None:
                    heappop(top)
                    self._h.park(node, blk, cur)
                    self._h.tidy_top()
                    continue
            heappop(h)
            # QUEUED -> RUNNING, as `_start` (inlined: pop_next is one of the three hot paths).
            item._entry = None
            item.state = RUNNING
            n = node.n - 1
            node.n = n
            node.nrun += 1
            ln.queued -= 1
            ln.running += 1
            ln.started += 1
            self._running += 1
            if keys:
                for ks in keys:
                    ks.running += 1
            if sfq is not None:
                # `Sfq.on_dispatch`, inlined: Seff = max(S, V - credit) is cur[0]. After it,
                # S = Seff + stride >= V - credit, so the lane's next key starts with S.
                s = cur[0]
                if s > sfq.v0:
                    sfq.v0 = s
                ln.S = s = s + ln.stride
                sfq._tb = tb = sfq._tb + 1
                ln.tb = tb
            elif self._dispatch is not None:
                self._dispatch(ln, negp)
            if n:
                head = h[0]
                while head[2]._entry is not head:
                    heappop(h)
                    head = h[0]
                nk = fk(ln, head[0], head[1]) if sfq is None else (s, tb, head[0], head[1])
                node.entry = ne = (nk, node.nid, node)
                heapreplace(top, ne)
            else:
                heappop(top)
                node.entry = None
                node.where = None
                self._h.live -= 1
                self._h.tidy_top()
            return item
        return None

    def release(self, item_id: Hashable) -> None:
        items = self._items
        try:
            item = items.pop(item_id, None)
        except TypeError:
            raise BadType(f"item id {item_id!r} is not hashable") from None
        if item is None or item.state is not RUNNING:
            if item is None:  # raises: unhashable (`pop` on an empty dict never hashes) or unknown
                item = self._lookup(item_id, "release")
            items[item_id] = item  # refused: put it back (the dict's order is never observed)
            raise BadValue(f"cannot release item {item_id!r}: it is {item.state.name}, not RUNNING")
        item.state = DONE
        # `_stop(item, leaving=True)`, inlined: release is one of the three hot paths.
        cls = item._cls
        assert cls is not None
        ln = cls.lane
        self._running -= 1
        ln.running -= 1
        cls.nrun -= 1
        keys = cls.keys
        if keys:
            for ks in keys:
                ks.running -= 1
                ks.users -= 1
        top_changed = False  # I14: only a release that touches the top heap may compact it
        if self._rekey:
            # P3: the lane's keys just got smaller; re-push its parked classes before any
            # proxy is pushed, so every proxy's key is computed from fresh entries.
            self._h.rekey_lane(ln)
            top_changed = True
        if ln.nparked and ln.entry is None:
            self._h.wake(ln)
            top_changed = True
        if not cls.n and not cls.nrun:
            del ln.classes[cls.sig]
        if keys:
            # Waking one key and forgetting another touch disjoint state, so one pass does both.
            for ks in keys:
                if ks.nparked and ks.entry is None:
                    self._h.wake(ks)
                if not ks.users and ks.cap is None:
                    self._r.forget_key(ks)
            top_changed = True
        if not (ln.queued or ln.running or ln.cap is not None or ln.w != self._r.dw):
            self._r.forget_lane(ln)
            top_changed = True
        if top_changed:
            self._h.tidy_top()

    def cancel(self, item_id: Hashable) -> bool:
        item = self._items.get(item_id)
        if item is None or item.state is not QUEUED:
            return False
        del self._items[item_id]
        item.state = CANCELLED
        item._entry = None
        self._dequeue(item)
        self._h.tidy_top()
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
                self._h.relocate(cls, nk)
        self._h.tidy_class(cls)
        self._h.tidy_top()
        return True

    def requeue(self, item_id: Hashable) -> Item:
        item = self._lookup(item_id, "requeue")
        if item.state is not RUNNING:
            raise BadValue(f"cannot requeue item {item_id!r}: it is {item.state.name}, not RUNNING")
        self._stop(item, leaving=False)
        self._enqueue(item, fresh=False)
        self._h.tidy_top()
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
            self._h.drop_class(cls)
        else:
            self._h.tidy_class(cls)
        self._h.tidy_top()
        return item

    def drain(self) -> list[Item]:
        out = [i for i in self._items.values() if i.state is QUEUED]
        out.sort(key=_order)
        for item in out:
            del self._items[item.id]
            item.state = CANCELLED
            item._entry = None
            self._dequeue(item)
        self._h.tidy_top()
        return out

    # ------------------------------------------------------------------ introspection

    @property
    def running(self) -> int:
        return self._running

    @property
    def queued(self) -> int:
        return len(self._items) - self._running

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
            return LaneStats(queued=0, running=0, started=0, weight=self._r.dw)
        return LaneStats(queued=ln.queued, running=ln.running, started=ln.started, weight=ln.w)

    def lane_heads(self) -> Iterator[LaneHead]:
        """Every lane with queued items as (lane, queued, running, weight, head), head being
        the item `pending(lane)` would list first, in lane creation order. O(lanes) with no
        sort and no heap changed: what a view of a large queue (top K by some key) can afford
        where `stats()` and `pending()` of every lane cannot."""
        for name, ln in self._lanes.items():
            if not ln.queued:
                continue
            head: Item | None = None
            for c in ln.classes.values():
                h = c.heap
                # The root is live unless a cancel or a re-prioritise left it stale.
                first = h[0][2] if h and h[0][2]._entry is h[0] else _first_live(h)
                if first is not None and (head is None or _order(first) < _order(head)):
                    head = first
            if head is not None:
                yield (name, ln.queued, ln.running, ln.w, head)

    def first_pending(self, lane: Hashable, n: int) -> list[Item]:
        """`pending(lane)[:n]` without sorting the whole lane: O(m log n) for m queued."""
        ln = self._lanes.get(lane)
        if ln is None or n <= 0:
            return []
        live = (e[2] for c in ln.classes.values() for e in c.heap if e[2]._entry is e)
        return nsmallest(n, live, key=_order)

    def stats(self) -> KernelStats:
        lanes = {
            n: LaneStats(queued=ln.queued, running=ln.running, started=ln.started, weight=ln.w)
            for n, ln in self._lanes.items()
        }
        queued = len(self._items) - self._running
        return KernelStats(queued=queued, running=self._running, lanes=lanes)

    def __repr__(self) -> str:
        return (
            f"Kernel(policy={self._policy.value}, scope={self._scope.value}, queued={self.queued},"
            f" running={self._running}, lanes={len(self._lanes)}, global_cap={self._gcap})"
        )

    def _heaps(self) -> Iterator[tuple[str, int, int]]:
        """(name, entries, live entries) of every heap, for the I14 check in tests."""
        yield "top", len(self._top), self._h.live
        for ln in self._lanes.values():
            yield f"lane {ln.name!r}", len(ln.heap), ln.nparked
            for c in ln.classes.values():
                yield f"class {ln.name!r} {c.sig!r}", len(c.heap), c.n
        for ks in self._keys.values():
            yield f"key {ks.name!r}", len(ks.heap), ks.nparked

    # ------------------------------------------------------------------ lookups and checks

    def _new_item(
        self,
        item_id: Hashable,
        lane: Hashable,
        priority: object,
        keys: Iterable[Hashable],
        seq: object,
        payload: object,
    ) -> Item:
        """Check the arguments of push/offer (in this order) and make the item; mutates only seq."""
        p = priority if type(priority) is int else args.int_arg(priority, "priority")
        try:
            dup = item_id in self._items
            hash(lane)
        except TypeError:
            hashable(item_id, "item id")
            hashable(lane, "lane")
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

    def _lookup(self, item_id: Hashable, op: str) -> Item:
        try:
            item = self._items.get(item_id)
        except TypeError:
            raise BadType(f"item id {item_id!r} is not hashable") from None
        if item is None:
            raise BadValue(f"cannot {op} item {item_id!r}: no such queued or running item")
        return item

    def _blocked_by(self, item: Item) -> Hashable | None:
        if self._gcap is not None and self._running >= self._gcap:
            return "global"
        assert item._cls is not None
        blk = self._r.blocker(item._cls)
        if blk is None:
            return None
        return ("lane", blk.name) if type(blk) is Lane else blk.name

    # ------------------------------------------------------------------ item moves (general form)

    def _enqueue(self, item: Item, *, fresh: bool) -> None:
        """Put an item (new, or a running one being requeued) into its class heap."""
        ln = self._lanes.get(item.lane)
        if ln is None:
            ln = self._r.new_lane(item.lane)
        cls = ln.classes.get(item.keys)
        if cls is None:
            cls = self._r.new_class(ln, item.keys)
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
            self._h.live += 1
        elif h[0] is e:
            nk = self._key(ln, negp, item.seq)
            if nk < ce[0]:
                self._h.relocate(cls, nk)
        elif len(h) > 2 * cls.n + SLACK:
            self._h.tidy_class(cls)

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
            self._r.forget_keys(cls.keys)
            self._r.maybe_forget_lane(ln)

    def _freed(self, ln: Lane, keys: tuple[KeyState, ...]) -> None:
        """A running item of `ln` carrying `keys` stopped: re-key (M3), then wake the keys."""
        if self._rekey:
            # P3: the lane's keys just got smaller; re-push its parked classes before any
            # proxy is pushed, so every proxy's key is computed from fresh entries.
            self._h.rekey_lane(ln)
        if ln.nparked and ln.entry is None:
            self._h.wake(ln)
        for ks in keys:
            if ks.nparked and ks.entry is None:
                self._h.wake(ks)

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
            self._h.drop_class(cls)
            cls.heap.clear()
            if not cls.nrun:
                del ln.classes[cls.sig]
        else:
            self._h.tidy_class(cls)
        self._r.forget_keys(cls.keys)
        self._r.maybe_forget_lane(ln)

    # ------------------------------------------------------------------ proxies

    def _pop_proxy(self, ks: KeyState, key: Key) -> Item | None:
        """One step of pop_next at a key proxy (docs/kernel.md, heaps). None: look at the top
        again."""
        top = self._top
        cap = ks.cap
        if (cap is not None and ks.running >= cap) or not ks.nparked:
            heappop(top)
            self._h.drop_proxy(ks)
            return None
        kh = ks.heap
        ke = kh[0]
        cls: Class = ke[2]
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
        blk = self._r.blocker(cls)
        if blk is not None:
            heappop(kh)
            self._h.park(cls, blk, cur)
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
            self._h.drop_proxy(ks)
        else:
            ks.entry = pe = (kh[0][0], ks.nid, ks)
            heapreplace(top, pe)
        return item


def _first_live(heap: list[tuple[int, int, Item]]) -> Item | None:
    """The smallest live entry of a class heap, by a scan."""
    live = [e for e in heap if e[2]._entry is e]
    return min(live)[2] if live else None


def _order(item: Item) -> tuple[int, int, int]:
    return (-item.priority, item.seq, item._uid)
