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
  otherwise it only pushes, and the caller's next `pop_next` decides. `admit` is `offer`'s
  fast path alone: it starts the item when `offer` would, and otherwise changes nothing (no lane,
  no key, no queue entry), so a durable caller can log an item that must wait before it queues.

How (KERNEL 4.3-4.5): one top heap holds the visible classes (items of one lane sharing a cap-key
tuple) and one proxy per unsaturated cap key that has parked classes. A class found blocked at the
top is parked in the heap of the key that blocks it; it is reached again through that key's
proxy, so a release wakes one proxy, never a crowd. Entries are lazy: a node's live entry is the
one it points to (`nodes` module), stored keys are lower bounds, and a key is acted on only when
it equals the recomputed one. Heaps are compacted when stale entries outnumber live ones (I14).

Layout: `base` holds the fields and the node bookkeeping, `heaps` the park/proxy machinery and
compaction, this module the public operations. `push`, `pop_next` and `release` are the hot paths
(KERNEL 7.2 budgets): they inline the helpers they would call (`_new_item`, `_enqueue`, `_start`,
`_stop`, `_blocker`, and lane-scope SFQ's key and dispatch hook). Each inlined block names the
helper it copies; a change to a helper must be made in its inlined copies too, and the
differential tests (`tests/kernel`) are what proves the copies still agree.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from heapq import heappop, heappush, heapreplace

from yoke.errors import BadType, BadValue
from yoke.kernel import args
from yoke.kernel.base import _SLACK
from yoke.kernel.nodes import TOP, Class, KeyState
from yoke.kernel.policies import BasePolicy, Sfq, make_policy, quantum_of, stride_of
from yoke.kernel.settings import Settings
from yoke.kernel.types import Item, ItemState, Policy, PriorityScope

QUEUED = ItemState.QUEUED
RUNNING = ItemState.RUNNING
DONE = ItemState.DONE
CANCELLED = ItemState.CANCELLED


class Kernel(Settings):
    __slots__ = ()

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
        pol = make_policy(self._policy, self._scope, self.credit)
        self._pol = pol
        # Bound once: the hot paths call these through a slot, and skip the no-op hooks.
        self._key = pol.key
        noop = BasePolicy.on_dispatch
        self._dispatch = None if type(pol).on_dispatch is noop else pol.on_dispatch
        noop_act = BasePolicy.on_activate
        self._activate = None if type(pol).on_activate is noop_act else pol.on_activate
        self._rekey = pol.rekey_on_release
        self._sfq = pol if type(pol) is Sfq else None
        self._top = []
        self._top_live = 0
        self._lanes = {}
        self._keys = {}
        self._items = {}
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
        # `_new_item` then `_enqueue(item, fresh=True)`, inlined: push is one of the three hot
        # paths. The checks run in `_new_item`'s order and mutate nothing before they pass.
        p = priority if type(priority) is int else args.int_arg(priority, "priority")
        items = self._items
        try:
            dup = item_id in items
            ln = self._lanes.get(lane)
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
        item = Item(item_id, lane, p, s, sig, payload, uid)
        if ln is None:
            ln = self._new_lane(lane)
        cls = ln.classes.get(sig)
        if cls is None:
            cls = self._new_class(ln, sig)
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
            self._top_live += 1
        elif h[0] is e:
            nk = self._key(ln, negp, s)
            if nk < ce[0]:
                self._relocate(cls, nk)
                self._tidy_top()
        elif len(h) > 2 * n + _SLACK:
            self._tidy_class(cls)
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
            self._tidy_top()
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
            ln = self._new_lane(item.lane)
        cls = ln.classes.get(item.keys)
        if cls is None:
            cls = self._new_class(ln, item.keys)
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
                self._tidy_top()
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
                    self._park(node, blk, cur)
                    self._tidy_top()
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
                self._top_live -= 1
                self._tidy_top()
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
            # Pitfall 3: the lane's keys just got smaller; re-push its parked classes before any
            # proxy is pushed, so every proxy's key is computed from fresh entries.
            self._rekey_lane(ln)
            top_changed = True
        if ln.nparked and ln.entry is None:
            self._wake(ln)
            top_changed = True
        if not cls.n and not cls.nrun:
            del ln.classes[cls.sig]
        if keys:
            # Waking one key and forgetting another touch disjoint state, so one pass does both.
            for ks in keys:
                if ks.nparked and ks.entry is None:
                    self._wake(ks)
                if not ks.users and ks.cap is None:
                    self._forget_key(ks)
            top_changed = True
        if not (ln.queued or ln.running or ln.cap is not None or ln.w != self._dw):
            self._forget_lane(ln)
            top_changed = True
        if top_changed:
            self._tidy_top()

    def cancel(self, item_id: Hashable) -> bool:
        item = self._items.get(item_id)
        if item is None or item.state is not QUEUED:
            return False
        del self._items[item_id]
        item.state = CANCELLED
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
            item.state = CANCELLED
            item._entry = None
            self._dequeue(item)
        self._tidy_top()
        return out


def _order(item: Item) -> tuple[int, int, int]:
    return (-item.priority, item.seq, item._uid)
