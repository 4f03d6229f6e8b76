"""The grouped kernel: a two-level fair queue (groups of lanes) for admission.

What it is for. `GroupedKernel` orders the queued starts of a process when each lane (a session)
belongs to a group (a tenant), so that a group cannot get ahead of others by spreading its work
over many lanes. Among the *eligible* queued items (not held back by the global cap, their
group's cap, the lane cap or any of their cap keys) it starts the one with the smallest key

    (-priority, group load, group virtual time, group tie-break, lane running, seq)

* priority first, across every group (a plain caller's priority is bounded by its token);
* then the group furthest below its weighted share of running items: `running * 2**32 // w`;
* among groups tied on load, the one served least recently, by a start-time virtual time as
  the `sfq` policy keeps (a start moves the group's tag past the system's time by
  `2**32 // w`, and a group back from idle starts at the system's time, so none banks
  credit), then the group's tie-break counter (fresh at each of its starts);
* inside the group the seed's rule: the lane with the fewest running, the oldest on a tie.

With one group this is exactly `Kernel(policy="least_running", priority_scope="global")` with
unit lane weights. `tests/kernel/grouped_reference.py` is the rule as an O(N) scan, and every
decision must match it (docs/kernel.md: the grouped kernel).

How. The flat kernel's lazy heaps, one level deeper (`groupnodes` says which node's heap holds
what). A stored key is always a lower bound of its node's current key, acted on only when equal
to it (else re-pushed with the larger one); whatever lowers a key pushes a fresh entry at once
and carries it up to the container's own entry (`_lowered`). Parking works as in the flat
kernel: a class found held back by the lane cap parks on its lane, by a cap key on its group's
`SubKey` of that key; a group found at its cap leaves the top heap and comes back when it has
room. So a blocked item never blocks eligible ones, a release wakes one entry per freed
container, and a group's change of load re-keys one entry per key it waits on.

What it must never do: await, read a clock, draw random numbers, do I/O, depend on hash or set
order, or look at an item's payload. It never preempts.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass
from heapq import heapify, heappop, heappush, heapreplace, nsmallest
from typing import Any

from yoke.errors import BadType, BadValue
from yoke.kernel import args
from yoke.kernel.groupnodes import Group, GroupLane, SubKey
from yoke.kernel.heaps import SLACK
from yoke.kernel.nodes import TOP, Class, KeyState
from yoke.kernel.policies import K, stride_of
from yoke.kernel.settings import hashable
from yoke.kernel.types import Item, ItemState, KernelStats, Key, LaneStats

QUEUED = ItemState.QUEUED
RUNNING = ItemState.RUNNING
DONE = ItemState.DONE
CANCELLED = ItemState.CANCELLED

Entry = tuple[Key, int, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupTurn:
    """What a group's place among groups is computed from (for a view that predicts picks)."""

    running: int
    weight: float
    S: int  # its virtual start tag; its place is max(S, the kernel's virtual time)
    tb: int
    stride: int  # what one start adds to its tag


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupStats:
    queued: int
    running: int
    started: int
    weight: float
    cap: int | None


class GroupedKernel:
    __slots__ = (
        "_V", "_dcap", "_dstride", "_dw", "_gcap", "_groups", "_items", "_keys", "_lane_cap",
        "_lanes", "_live", "_nid", "_running", "_seq", "_tb", "_top",
    )  # fmt: skip

    def __init__(
        self,
        *,
        global_cap: int | None = None,
        lane_cap: int | None = None,
        group_cap: int | None = None,
        group_weight: float = 1.0,
    ) -> None:
        self._gcap = args.cap_arg(global_cap, "global_cap")
        self._lane_cap = args.cap_arg(lane_cap, "lane_cap")
        self._dcap = args.cap_arg(group_cap, "group_cap")  # for groups with no cap of their own
        self._dw = args.weight_arg(group_weight, "group_weight")
        self._dstride = stride_of(self._dw)
        self._top: list[Entry] = []
        self._live = 0  # live entries of the top heap
        self._items: dict[Hashable, Item] = {}
        self._running = 0
        self._seq = 0
        self._nid = 0
        self._tb = 0
        self._V = 0  # the system's virtual time: the largest start tag a start has used
        self._groups: dict[Hashable, Group] = {}
        self._lanes: dict[Hashable, GroupLane] = {}
        self._keys: dict[Hashable, KeyState] = {}

    def __repr__(self) -> str:
        return (
            f"GroupedKernel(queued={self.queued}, running={self._running},"
            f" groups={len(self._groups)}, lanes={len(self._lanes)}, global_cap={self._gcap},"
            f" lane_cap={self._lane_cap}, group_cap={self._dcap})"
        )

    # ------------------------------------------------------------------ keys

    def _full(self, g: Group, ik: Key) -> Key:
        """A group's part of the key around a class's inner key (-priority, lane running, seq)."""
        s = g.S
        v = self._V
        return (ik[0], g.load, s if s > v else v, g.tb, ik[1], ik[2])

    @staticmethod
    def _inner(cls: Class) -> Key:
        h = cls.heap
        head = h[0]
        while head[2]._entry is not head:
            heappop(h)
            head = h[0]
        return (head[0], cls.lane.running, head[1])

    # ------------------------------------------------------------------ settings

    def set_global_cap(self, cap: int | None) -> None:
        self._gcap = args.cap_arg(cap, "global_cap")

    def set_lane_cap(self, cap: int | None) -> None:
        """The cap of every lane (running items per lane)."""
        self._lane_cap = args.cap_arg(cap, "lane cap")
        for ln in self._lanes.values():
            self._wake_lane(ln)
        self._tidy_top()

    def set_cap(self, key: Hashable, cap: int | None) -> None:
        c = args.cap_arg(cap, "cap")
        hashable(key, "cap key")
        ks = self._keys.get(key)
        if ks is None:
            if c is None:
                return
            ks = self._new_key(key)
        ks.cap = c
        self._wake_key(ks)
        if c is None and not ks.users:
            self._forget_key(ks)
        self._tidy_top()

    def set_group_cap(self, group: Hashable, cap: int | None) -> None:
        """A group's own cap; None: none of its own (the default group cap applies)."""
        c = args.cap_arg(cap, "group cap")
        hashable(group, "group")
        g = self._groups.get(group)
        if g is None:
            if c is None:
                return
            g = self._new_group(group)
        g.own_cap = c is not None
        g.cap = self._dcap if c is None else c
        self._regroup(g)
        self._maybe_forget_group(g)
        self._tidy_top()

    def set_default_group_cap(self, cap: int | None) -> None:
        self._dcap = c = args.cap_arg(cap, "group cap")
        for g in list(self._groups.values()):
            if not g.own_cap:
                g.cap = c
                self._regroup(g)
        self._tidy_top()

    def set_group_weight(self, group: Hashable, weight: float | None) -> None:
        """A group's own weight (None: none of its own, the default applies)."""
        w = None if weight is None else args.weight_arg(weight)
        hashable(group, "group")
        g = self._groups.get(group)
        if g is None:
            if w is None:
                return
            g = self._new_group(group)
        g.own_weight = w is not None
        g.w = self._dw if w is None else w
        g.stride = stride_of(g.w)
        g.load = int(g.running * K // g.w)
        self._regroup(g)
        self._maybe_forget_group(g)
        self._tidy_top()

    def set_default_group_weight(self, weight: float) -> None:
        self._dw = w = args.weight_arg(weight, "group_weight")
        self._dstride = stride_of(w)
        for g in list(self._groups.values()):
            if not g.own_weight:
                g.w = w
                g.stride = self._dstride
                g.load = int(g.running * K // w)
                self._regroup(g)
        self._tidy_top()

    # ------------------------------------------------------------------ queue operations

    def push(
        self,
        item_id: Hashable,
        lane: Hashable,
        *,
        group: Hashable,
        priority: int = 0,
        keys: Iterable[Hashable] = (),
        seq: int | None = None,
        payload: object = None,
    ) -> Item:
        item = self._new_item(item_id, lane, group, priority, keys, seq, payload)
        self._enqueue_new(item, group)
        return item

    def offer(
        self,
        item_id: Hashable,
        lane: Hashable,
        *,
        group: Hashable,
        priority: int = 0,
        keys: Iterable[Hashable] = (),
        payload: object = None,
    ) -> Item:
        """`push`, or start at once when nothing is queued and every cap has room."""
        item = self._new_item(item_id, lane, group, priority, keys, None, payload)
        if not self._start_at_once(item, group):
            self._enqueue_new(item, group)
        return item

    def admit(
        self,
        item_id: Hashable,
        lane: Hashable,
        *,
        group: Hashable,
        priority: int = 0,
        keys: Iterable[Hashable] = (),
        payload: object = None,
    ) -> Item | None:
        """`offer` when it would start the item at once; otherwise change nothing (but the
        sequence counter) and return None, so a durable caller can log the item first."""
        item = self._new_item(item_id, lane, group, priority, keys, None, payload)
        return item if self._start_at_once(item, group) else None

    def pop_next(self) -> Item | None:
        gcap = self._gcap
        if gcap is not None and self._running >= gcap:
            return None
        top = self._top
        while top:
            entry = top[0]
            g = entry[2]
            if g.entry is not entry:
                heappop(top)
                continue
            if type(g) is Group:
                item = self._pop_visible(g, entry)
                if item is None:
                    item = self._pop_group(g, entry)
            else:
                item = self._pop_key(g, entry)
            if item is not None:
                self._tidy_top()
                return item
        self._tidy_top()
        return None

    def _pop_visible(self, g: Group, entry: Entry) -> Item | None:
        """`_pop_group` for its common case (a visible class of a group under no cap, whose
        keys are exact), with `_start` and `_after_dispatch` inlined; None, changing nothing,
        when the case is another (`_pop_group` then handles it)."""
        c = g.cap
        gh = g.heap
        if not gh or (c is not None and g.running >= c):
            return None
        ie = gh[0]
        cls = ie[2]
        if type(cls) is not Class or cls.entry is not ie:
            return None
        h = cls.heap
        head = h[0]
        item: Item = head[2]
        while item._entry is not head:
            heappop(h)
            head = h[0]
            item = head[2]
        ln = cls.lane
        negp = head[0]
        seq = head[1]
        lrun = ln.running
        sv = g.S
        v = self._V
        seff = sv if sv > v else v
        if ie[0] != (negp, lrun, seq) or entry[0] != (negp, g.load, seff, g.tb, lrun, seq):
            return None
        lc = self._lane_cap
        keys = cls.keys
        if (lc is not None and lrun >= lc) or (keys and self._blocker(cls, True) is not None):
            return None
        heappop(h)
        item._entry = None
        item.state = RUNNING
        n = cls.n - 1
        cls.n = n
        cls.nrun += 1
        ln.queued -= 1
        ln.running = lrun = lrun + 1
        ln.started += 1
        g.queued -= 1
        g.running = r = g.running + 1
        g.load = load = int(r * K // g.w)
        g.started += 1
        self._running += 1
        for ks in keys:
            ks.running += 1
        if seff > v:
            self._V = seff
        g.S = sv = seff + g.stride
        self._tb = tb = self._tb + 1
        g.tb = tb
        if n:  # the class re-keyed in its group, or dropped
            head = h[0]
            while head[2]._entry is not head:
                heappop(h)
                head = h[0]
            cls.entry = ne = ((head[0], lrun, head[1]), cls.nid, cls)
            heapreplace(gh, ne)
        else:
            heappop(gh)
            cls.entry = None
            cls.where = None
            g.nparked -= 1
            _shrunk(g)
        top = self._top
        if g.nparked and (c is None or r < c):  # the group's key grew
            ik = gh[0][0]
            g.entry = ge = ((ik[0], load, sv, g.tb, ik[1], ik[2]), g.nid, g)
            heapreplace(top, ge)
        else:
            heappop(top)
            g.entry = None
            g.where = None
            self._live -= 1
        return item

    def release(self, item_id: Hashable) -> None:
        items = self._items
        try:
            item = items.pop(item_id, None)
        except TypeError:
            raise BadType(f"item id {item_id!r} is not hashable") from None
        if item is None or item.state is not RUNNING:
            if item is None:
                item = self._lookup(item_id, "release")
            items[item_id] = item  # refused: put it back
            raise BadValue(f"cannot release item {item_id!r}: it is {item.state.name}, not RUNNING")
        item.state = DONE
        self._stop(item, leaving=True)
        top = self._top
        if len(top) > 2 * self._live + SLACK:
            self._tidy_top()

    def requeue(self, item_id: Hashable) -> Item:
        """A running item goes back in line, keeping its place (its `seq`), and its group the
        virtual time its start was charged (it did not run)."""
        item = self._lookup(item_id, "requeue")
        if item.state is not RUNNING:
            raise BadValue(f"cannot requeue item {item_id!r}: it is {item.state.name}, not RUNNING")
        cls = item._cls
        assert cls is not None
        g: Group = cls.lane.group  # type: ignore[attr-defined]
        # The start did not happen: its group gets back the virtual time it was charged.
        g.S = max(0, g.S - g.stride)
        self._stop(item, leaving=False)
        self._enqueue(item, g.name, fresh=False)
        self._tidy_top()
        return item

    def cancel(self, item_id: Hashable) -> bool:
        try:
            item = self._items.get(item_id)
        except TypeError:
            raise BadType(f"item id {item_id!r} is not hashable") from None
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
        item._entry = e = (-p, item.seq, item)
        heappush(h, e)
        ce = cls.entry
        if h[0] is e and ce is not None:
            ik = (-p, cls.lane.running, item.seq)
            if ik < ce[0]:
                self._relocate(cls, ik)
        _tidy_class(cls)
        self._tidy_top()
        return True

    def drain(self) -> list[Item]:
        """Every queued item, cancelled, in answer order (for a shutdown's refusals)."""
        out = [i for i in self._items.values() if i.state is QUEUED]
        out.sort(key=_order)
        for item in out:
            del self._items[item.id]
            item.state = CANCELLED
            item._entry = None
            self._dequeue(item)
        self._tidy_top()
        return out

    # ------------------------------------------------------------------ introspection

    @property
    def running(self) -> int:
        return self._running

    @property
    def queued(self) -> int:
        return len(self._items) - self._running

    @property
    def global_cap(self) -> int | None:
        return self._gcap

    @property
    def lane_cap(self) -> int | None:
        return self._lane_cap

    @property
    def default_group_cap(self) -> int | None:
        return self._dcap

    @property
    def default_group_weight(self) -> float:
        return self._dw

    def get(self, item_id: Hashable) -> Item | None:
        return self._items.get(item_id)

    def group_of(self, item_id: Hashable) -> Hashable | None:
        item = self._items.get(item_id)
        if item is None or item._cls is None:
            return None
        return item._cls.lane.group.name  # type: ignore[attr-defined,no-any-return]

    def lane_group(self, lane: Hashable) -> Hashable | None:
        ln = self._lanes.get(lane)
        return None if ln is None else ln.group.name

    def blocked_by(self, item_id: Hashable) -> Hashable | None:
        """What holds a queued item back now: "global", ("group", g), ("lane", l), a cap key,
        or None (it is eligible: it waits for its turn)."""
        item = self._items.get(item_id)
        if item is None or item.state is not QUEUED:
            return None
        if self._gcap is not None and self._running >= self._gcap:
            return "global"
        cls = item._cls
        assert cls is not None
        ln = cls.lane
        g: Group = ln.group  # type: ignore[attr-defined]
        if g.cap is not None and g.running >= g.cap:
            return ("group", g.name)
        c = self._lane_cap
        if c is not None and ln.running >= c:
            return ("lane", ln.name)
        for ks in cls.keys:
            c = ks.cap
            if c is not None and ks.running >= c:
                return ks.name
        return None

    @property
    def virtual_time(self) -> int:
        return self._V

    @property
    def tie_breaks(self) -> int:
        """The last tie-break given; the next start's is larger."""
        return self._tb

    def group_turn(self, group: Hashable) -> GroupTurn:
        g = self._groups.get(group)
        if g is None:  # a new group: made now, it would get the next tie-break
            return GroupTurn(running=0, weight=self._dw, S=0, tb=self._tb + 1, stride=self._dstride)
        return GroupTurn(running=g.running, weight=g.w, S=g.S, tb=g.tb, stride=g.stride)

    def group_queued(self, group: Hashable) -> int:
        g = self._groups.get(group)
        return 0 if g is None else g.queued

    def group_stats(self, group: Hashable) -> GroupStats:
        g = self._groups.get(group)
        if g is None:
            return GroupStats(queued=0, running=0, started=0, weight=self._dw, cap=self._dcap)
        return _stats(g)

    def groups(self) -> dict[Hashable, GroupStats]:
        """Every live group, in creation order."""
        return {n: _stats(g) for n, g in self._groups.items()}

    def group_counts(self) -> Iterator[tuple[Hashable, int, int, float]]:
        """Every live group as (group, queued, running, weight), in creation order: O(groups),
        no record made per group (a scrape or a view ranks its top K of it)."""
        for name, g in self._groups.items():
            yield (name, g.queued, g.running, g.w)

    def lane_stats(self, lane: Hashable) -> LaneStats:
        ln = self._lanes.get(lane)
        if ln is None:
            return LaneStats(queued=0, running=0, started=0, weight=1.0)
        return LaneStats(queued=ln.queued, running=ln.running, started=ln.started, weight=1.0)

    def stats(self) -> KernelStats:
        """Every live lane, in creation order (`groups()` has the groups)."""
        lanes = {
            n: LaneStats(queued=ln.queued, running=ln.running, started=ln.started, weight=1.0)
            for n, ln in self._lanes.items()
        }
        return KernelStats(queued=self.queued, running=self._running, lanes=lanes)

    def lane_heads(self) -> Iterator[tuple[Hashable, int, int, float, Item]]:
        """Every lane with queued items as (lane, queued, running, weight, head), head being
        the item `pending(lane)` would list first, in lane creation order; O(lanes), no sort."""
        for name, ln in self._lanes.items():
            if not ln.queued:
                continue
            head: Item | None = None
            for c in ln.classes.values():
                first = _first_live(c.heap)
                if first is not None and (head is None or _order(first) < _order(head)):
                    head = first
            if head is not None:
                yield (name, ln.queued, ln.running, ln.w, head)

    def lane_keys(self) -> Iterator[tuple[Key, Hashable, Hashable]]:
        """Every lane with queued items as (the full key of its head, lane, group), in lane
        creation order: O(lanes), no sort, nothing changed (a view ranks its top K of it)."""
        v = self._V
        for name, ln in self._lanes.items():
            if not ln.queued:
                continue
            head: Item | None = None
            for c in ln.classes.values():
                first = _first_live(c.heap)
                if first is not None and (head is None or _order(first) < _order(head)):
                    head = first
            if head is not None:
                g = ln.group
                s = g.S
                key = (-head.priority, g.load, s if s > v else v, g.tb, ln.running, head.seq)
                yield (key, name, g.name)

    def pending(self, lane: Hashable) -> list[Item]:
        ln = self._lanes.get(lane)
        if ln is None:
            return []
        out = [e[2] for c in ln.classes.values() for e in c.heap if e[2]._entry is e]
        out.sort(key=_order)
        return out

    def first_pending(self, lane: Hashable, n: int) -> list[Item]:
        ln = self._lanes.get(lane)
        if ln is None or n <= 0:
            return []
        live = (e[2] for c in ln.classes.values() for e in c.heap if e[2]._entry is e)
        return nsmallest(n, live, key=_order)

    def _heaps(self) -> Iterator[tuple[str, int, int]]:
        """(name, entries, live entries) of every heap, for the bounded-garbage check in tests."""
        yield "top", len(self._top), self._live
        for g in self._groups.values():
            yield f"group {g.name!r}", len(g.heap), g.nparked
            for sub in g.subs.values():
                yield f"sub {sub.name!r}", len(sub.heap), sub.nparked
        for ln in self._lanes.values():
            yield f"lane {ln.name!r}", len(ln.heap), ln.nparked
            for c in ln.classes.values():
                yield f"class {ln.name!r} {c.sig!r}", len(c.heap), c.n
        for ks in self._keys.values():
            yield f"key {ks.name!r}", len(ks.heap), ks.nparked

    # ------------------------------------------------------------------ nodes

    def _new_group(self, name: Hashable) -> Group:
        self._nid += 1
        g = Group(name, self._nid, self._dw, self._dstride, self._dcap)
        self._tb += 1
        g.tb = self._tb
        self._groups[name] = g
        return g

    def _new_lane(self, name: Hashable, g: Group) -> GroupLane:
        self._nid += 1
        ln = GroupLane(name, self._nid, g)
        self._lanes[name] = ln
        g.lanes += 1
        return ln

    def _new_key(self, name: Hashable) -> KeyState:
        self._nid += 1
        ks = KeyState(name, self._nid)
        self._keys[name] = ks
        return ks

    def _new_class(self, ln: GroupLane, sig: tuple[Hashable, ...]) -> Class:
        keys = []
        for k in sig:
            ks = self._keys.get(k)
            keys.append(self._new_key(k) if ks is None else ks)
        self._nid += 1
        cls = Class(ln, sig, tuple(keys), self._nid)
        ln.classes[sig] = cls
        return cls

    def _sub(self, g: Group, ks: KeyState) -> SubKey:
        sub = g.subs.get(ks)
        if sub is None:
            self._nid += 1
            sub = g.subs[ks] = SubKey(ks, g, self._nid)
        return sub

    def _forget_key(self, ks: KeyState) -> None:
        del self._keys[ks.name]
        self._unplace(ks)
        ks.heap.clear()

    def _maybe_forget_lane(self, ln: GroupLane) -> None:
        if ln.queued or ln.running:
            return
        del self._lanes[ln.name]
        self._unplace(ln)
        ln.heap.clear()
        g: Group = ln.group
        g.lanes -= 1
        self._maybe_forget_group(g)

    def _maybe_forget_group(self, g: Group) -> None:
        if g.queued or g.running or g.lanes or g.own_cap or g.own_weight:
            return
        del self._groups[g.name]
        self._unplace(g)
        g.heap.clear()

    # ------------------------------------------------------------------ placing entries

    def _unplace(self, node: Any) -> None:
        """Forget a node's entry wherever it is (the entry itself dies lazily)."""
        w = node.where
        if w is None:
            return
        if w is TOP:
            self._live -= 1
        else:
            w.nparked -= 1
            _shrunk(w)
        node.entry = None
        node.where = None

    def _place(self, cls: Class, where: Any, ik: Key) -> None:
        """Put a class with no entry into a container (a group, a lane or a sub-key)."""
        cls.entry = e = (ik, cls.nid, cls)
        heappush(where.heap, e)
        cls.where = where
        where.nparked += 1
        self._lowered(where, ik)
        if len(where.heap) > 2 * where.nparked + SLACK:
            _tidy(where.heap)

    def _relocate(self, cls: Class, ik: Key) -> None:
        """A placed class's key got smaller: a fresh entry where it lives."""
        cls.entry = e = (ik, cls.nid, cls)
        where = cls.where
        assert where is not None and where is not TOP
        heappush(where.heap, e)
        self._lowered(where, ik)
        if len(where.heap) > 2 * where.nparked + SLACK:
            _tidy(where.heap)

    def _lowered(self, where: Any, ik: Key) -> None:
        """A container just got an entry with inner key `ik`: carry it up, so that each stored
        key above stays a lower bound of its node's key. An entry that is still there (even
        of a container with no room now, which is dropped lazily) is kept a lower bound; a new
        one is pushed only for a container with room."""
        t = type(where)
        if t is Group:
            g: Group = where
            fk = self._full(g, ik)
            ge = g.entry
            if ge is not None:
                if fk < ge[0]:
                    self._to_top(g, fk)
            elif g.cap is None or g.running < g.cap:
                self._to_top(g, fk)
        elif t is GroupLane:
            ln: GroupLane = where
            pe = ln.entry
            if pe is not None:
                if ik < pe[0]:
                    self._to_group(ln, ik)
            elif self._lane_cap is None or ln.running < self._lane_cap:
                self._to_group(ln, ik)
        else:
            sub: SubKey = where
            g = sub.group
            fk = self._full(g, ik)
            se = sub.entry
            if se is not None:
                if fk < se[0]:
                    self._to_key(sub, fk)
            elif g.cap is None or g.running < g.cap:
                self._to_key(sub, fk)

    def _to_top(self, node: Any, fk: Key) -> None:
        node.entry = e = (fk, node.nid, node)
        heappush(self._top, e)
        if node.where is None:
            node.where = TOP
            self._live += 1

    def _to_group(self, ln: GroupLane, ik: Key) -> None:
        """Push a lane's proxy into its group's heap."""
        g = ln.group
        ln.entry = e = (ik, ln.nid, ln)
        heappush(g.heap, e)
        if ln.where is None:
            ln.where = g
            g.nparked += 1
        self._lowered(g, ik)
        if len(g.heap) > 2 * g.nparked + SLACK:
            _tidy(g.heap)

    def _to_key(self, sub: SubKey, fk: Key) -> None:
        """Push a group's sub-key into its key's heap, and the key's proxy if it is lower."""
        ks = sub.key
        sub.entry = e = (fk, sub.nid, sub)
        heappush(ks.heap, e)
        if sub.where is None:
            sub.where = ks
            ks.nparked += 1
        if len(ks.heap) > 2 * ks.nparked + SLACK:
            _tidy(ks.heap)
        pe = ks.entry
        if pe is not None:
            if fk < pe[0]:
                self._to_top(ks, fk)
        elif ks.cap is None or ks.running < ks.cap:
            self._to_top(ks, fk)

    def _wake_lane(self, ln: GroupLane) -> None:
        """A lane with room: its proxy must stand for its parked classes."""
        c = self._lane_cap
        if ln.nparked and (c is None or ln.running < c):
            pe = ln.entry
            ik = ln.heap[0][0]
            if pe is None or ik < pe[0]:
                self._to_group(ln, ik)

    def _wake_key(self, ks: KeyState) -> None:
        c = ks.cap
        if ks.nparked and (c is None or ks.running < c):
            pe = ks.entry
            fk = ks.heap[0][0]
            if pe is None or fk < pe[0]:
                self._to_top(ks, fk)

    def _regroup(self, g: Group) -> None:
        """The group's key may have become smaller (fewer running, a larger weight), or it may
        have room again: fresh entries for the group and for each of its sub-keys."""
        c = g.cap
        if c is not None and g.running >= c:
            return
        if g.nparked:
            fk = self._full(g, g.heap[0][0])
            ge = g.entry
            if ge is None or fk < ge[0]:
                self._to_top(g, fk)
        for sub in g.subs.values():
            if sub.nparked:
                fk = self._full(g, sub.heap[0][0])
                se = sub.entry
                if se is None or fk < se[0]:
                    self._to_key(sub, fk)

    def _rekey_lane(self, ln: GroupLane) -> None:
        """The lane's running count fell: its classes' keys are smaller."""
        for cls in ln.classes.values():
            ce = cls.entry
            if ce is None:
                continue
            ik = self._inner(cls)
            if ik < ce[0]:
                self._relocate(cls, ik)

    # ------------------------------------------------------------------ picking

    def _exact(self, where: Any) -> Entry | None:
        """The top entry of a container of inner keys (a group, a lane, a sub-key) once its
        stored key equals its node's key: stale entries popped, lower ones re-pushed, proxies
        of lanes that have no room or nothing parked dropped. None: nothing live in it."""
        h: list[Entry] = where.heap
        lane_cap = self._lane_cap
        while h:
            e: Entry = h[0]
            n = e[2]
            if n.entry is not e:
                heappop(h)
                continue
            if type(n) is Class:
                cur = self._inner(n)
            else:  # a lane's proxy in its group's heap
                if not n.nparked or (lane_cap is not None and n.running >= lane_cap):
                    heappop(h)
                    n.entry = None
                    n.where = None
                    where.nparked -= 1
                    _shrunk(where)
                    continue
                le = self._exact(n)
                assert le is not None
                cur = le[0]
            if cur != e[0]:
                n.entry = ne = (cur, n.nid, n)
                heapreplace(h, ne)
                continue
            return h[0]
        return None

    def _blocker(self, cls: Class, in_lane: bool) -> KeyState | None:
        """The lane cap (unless the class was reached through its lane's proxy, which exists
        only while the lane has room), then its cap keys; the group cap is checked above."""
        if not in_lane:
            c = self._lane_cap
            ln = cls.lane
            if c is not None and ln.running >= c:
                return ln
        for ks in cls.keys:
            c = ks.cap
            if c is not None and ks.running >= c:
                return ks
        return None

    def _park(self, cls: Class, where: Any, blk: KeyState) -> None:
        """Move the class at the top of `where` to the container of what blocks it."""
        heappop(where.heap)
        where.nparked -= 1
        _shrunk(where)
        cls.entry = None
        cls.where = None
        ln = cls.lane
        dest = blk if blk is ln else self._sub(ln.group, blk)  # type: ignore[attr-defined]
        self._place(cls, dest, self._inner(cls))

    def _pop_group(self, g: Group, entry: Entry) -> Item | None:
        top = self._top
        c = g.cap
        if c is not None and g.running >= c:  # at its cap: out until a release gives room
            heappop(top)
            g.entry = None
            g.where = None
            self._live -= 1
            return None
        ie = self._exact(g)
        if ie is None:
            heappop(top)
            g.entry = None
            g.where = None
            self._live -= 1
            return None
        cur = self._full(g, ie[0])
        if cur != entry[0]:
            g.entry = ne = (cur, g.nid, g)
            heapreplace(top, ne)
            return None
        node = ie[2]
        if type(node) is Class:
            cls: Class = node
            where: Any = g
            in_lane = False
        else:
            ln: GroupLane = node
            cls = ln.heap[0][2]
            where = ln
            in_lane = True
        blk = self._blocker(cls, in_lane)
        if blk is not None:
            self._park(cls, where, blk)
            return None
        item = self._dispatch(cls)
        self._after_dispatch(cls, where)
        if in_lane:
            self._after_proxy(where, g)
        # The group's key grew (one more running, a later tag).
        if g.nparked and (g.cap is None or g.running < g.cap):
            g.entry = ne = (self._full(g, g.heap[0][0]), g.nid, g)
            heapreplace(top, ne)
        else:
            heappop(top)
            g.entry = None
            g.where = None
            self._live -= 1
        return item

    def _pop_key(self, ks: KeyState, entry: Entry) -> Item | None:
        top = self._top
        c = ks.cap
        if (c is not None and ks.running >= c) or not ks.nparked:
            heappop(top)
            ks.entry = None
            ks.where = None
            self._live -= 1
            return None
        kh = ks.heap
        while kh:
            se = kh[0]
            sub: SubKey = se[2]
            if sub.entry is not se:
                heappop(kh)
                continue
            g = sub.group
            gc = g.cap
            if not sub.nparked or (gc is not None and g.running >= gc):
                # Empty, or its group is at its cap: it comes back with the group's room.
                heappop(kh)
                sub.entry = None
                sub.where = None
                ks.nparked -= 1
                _shrunk(ks)
                if not sub.nparked:
                    del g.subs[ks]
                continue
            ie = self._exact(sub)
            assert ie is not None
            cur = self._full(g, ie[0])
            if cur != se[0]:
                sub.entry = ne = (cur, sub.nid, sub)
                heapreplace(kh, ne)
                continue
            break
        else:
            heappop(top)
            ks.entry = None
            ks.where = None
            self._live -= 1
            return None
        if cur != entry[0]:
            ks.entry = pe = (cur, ks.nid, ks)
            heapreplace(top, pe)
            return None
        cls: Class = ie[2]
        blk = self._blocker(cls, False)
        if blk is not None:
            self._park(cls, sub, blk)
            if not sub.nparked:
                self._drop_sub(sub)
            return None
        item = self._dispatch(cls)
        self._after_dispatch(cls, sub)
        if sub.nparked and (gc is None or g.running < gc):
            sub.entry = ne = (self._full(g, sub.heap[0][0]), sub.nid, sub)
            heapreplace(kh, ne)
        else:
            heappop(kh)
            sub.entry = None
            sub.where = None
            ks.nparked -= 1
            _shrunk(ks)
            if not sub.nparked:
                del g.subs[ks]
        c = ks.cap
        if ks.nparked and (c is None or ks.running < c):
            ks.entry = pe = (kh[0][0], ks.nid, ks)
            heapreplace(top, pe)
        else:
            heappop(top)
            ks.entry = None
            ks.where = None
            self._live -= 1
        return item

    def _drop_sub(self, sub: SubKey) -> None:
        self._unplace(sub)
        del sub.group.subs[sub.key]

    def _dispatch(self, cls: Class) -> Item:
        """Start the head of a class; its entry in its container is the caller's."""
        h = cls.heap
        head = heappop(h)
        while head[2]._entry is not head:
            head = heappop(h)
        item: Item = head[2]
        self._start(cls, item)
        return item

    def _start(self, cls: Class, item: Item) -> None:
        """QUEUED -> RUNNING: the counts, and the group's virtual time."""
        item._entry = None
        item.state = RUNNING
        cls.n -= 1
        cls.nrun += 1
        ln = cls.lane
        g: Group = ln.group  # type: ignore[attr-defined]
        ln.queued -= 1
        ln.running += 1
        ln.started += 1
        g.queued -= 1
        g.running = r = g.running + 1
        g.load = int(r * K // g.w)
        g.started += 1
        self._running += 1
        for ks in cls.keys:
            ks.running += 1
        # Start at max(S, V), then move past it by the group's stride.
        s = g.S
        v = self._V
        if v > s:
            s = v
        elif s > v:
            self._V = s
        g.S = s + g.stride
        self._tb += 1
        g.tb = self._tb

    def _after_dispatch(self, cls: Class, where: Any) -> None:
        """The class at the top of `where` started its head: re-key it there, or drop it."""
        if cls.n:
            cls.entry = ne = (self._inner(cls), cls.nid, cls)
            heapreplace(where.heap, ne)
        else:
            heappop(where.heap)
            cls.entry = None
            cls.where = None
            where.nparked -= 1
            _shrunk(where)

    def _after_proxy(self, ln: GroupLane, g: Group) -> None:
        """A class reached through its lane's proxy started: re-key the proxy in the group's
        heap (where it is the top entry), or drop it."""
        c = self._lane_cap
        if ln.nparked and (c is None or ln.running < c):
            ln.entry = ne = (ln.heap[0][0], ln.nid, ln)
            heapreplace(g.heap, ne)
        else:
            heappop(g.heap)
            ln.entry = None
            ln.where = None
            g.nparked -= 1
            _shrunk(g)

    # ------------------------------------------------------------------ item moves

    def _new_item(
        self,
        item_id: Hashable,
        lane: Hashable,
        group: Hashable,
        priority: object,
        keys: Iterable[Hashable],
        seq: object,
        payload: object,
    ) -> Item:
        """Check the arguments (mutating nothing but the sequence counter) and make the item."""
        p = priority if type(priority) is int else args.int_arg(priority, "priority")
        try:
            dup = item_id in self._items
            ln = self._lanes.get(lane)
            hash(group)
        except TypeError:
            hashable(item_id, "item id")
            hashable(lane, "lane")
            hashable(group, "group")
            raise
        if dup:
            raise BadValue(f"item id {item_id!r} is already queued or running")
        if ln is not None and ln.group.name != group:
            raise BadValue(f"lane {lane!r} belongs to group {ln.group.name!r}, not {group!r}")
        sig = () if keys == () else args.keys_arg(lane, keys)
        uid = self._seq
        if seq is None:
            s = uid
            self._seq = uid + 1
        else:
            s = args.int_arg(seq, "seq")
            self._seq = max(uid + 1, s + 1)
        return Item(item_id, lane, p, s, sig, payload, uid)

    def _nodes(self, item: Item, group: Hashable) -> Class:
        """The item's class, making its group, lane, keys and class on first use."""
        g = self._groups.get(group)
        if g is None:
            g = self._new_group(group)
        ln = self._lanes.get(item.lane)
        if ln is None:
            ln = self._new_lane(item.lane, g)
        cls = ln.classes.get(item.keys)
        if cls is None:
            cls = self._new_class(ln, item.keys)
        return cls

    def _fits_now(self, item: Item, group: Hashable) -> bool:
        if len(self._items) != self._running:  # something is queued: it goes first
            return False
        if self._gcap is not None and self._running >= self._gcap:
            return False
        g = self._groups.get(group)
        cap = self._dcap if g is None else g.cap
        if cap is not None and (0 if g is None else g.running) >= cap:
            return False
        c = self._lane_cap
        ln = self._lanes.get(item.lane)
        if c is not None and (0 if ln is None else ln.running) >= c:
            return False
        for k in item.keys:
            ks = self._keys.get(k)
            if ks is not None and ks.cap is not None and ks.running >= ks.cap:
                return False
        return True

    def _start_at_once(self, item: Item, group: Hashable) -> bool:
        """Start `item` if nothing is queued and its caps have room: what push + pop_next
        would do on an empty queue, minus the heaps. Refused, it changes nothing."""
        if not self._fits_now(item, group):
            return False
        cls = self._nodes(item, group)
        for ks in cls.keys:
            ks.users += 1
        item._cls = cls
        ln = cls.lane
        g: Group = ln.group  # type: ignore[attr-defined]
        cls.n += 1
        ln.queued += 1
        g.queued += 1
        self._start(cls, item)
        self._items[item.id] = item
        return True

    def _enqueue(self, item: Item, group: Hashable, *, fresh: bool) -> None:
        """Put an item (new, or a running one going back in line) into its class heap."""
        cls = self._nodes(item, group) if fresh else item._cls
        assert cls is not None
        if fresh:
            for ks in cls.keys:
                ks.users += 1
        item._cls = cls
        ln = cls.lane
        g: Group = ln.group  # type: ignore[attr-defined]
        ln.queued += 1
        g.queued += 1
        cls.n += 1
        item.state = QUEUED
        item._entry = e = (-item.priority, item.seq, item)
        h = cls.heap
        while h and h[0][2]._entry is not h[0]:
            heappop(h)
        heappush(h, e)
        ce = cls.entry
        if ce is None:
            self._place(cls, g, (e[0], ln.running, e[1]))
        elif h[0] is e:
            ik = (e[0], ln.running, e[1])
            if ik < ce[0]:
                self._relocate(cls, ik)
        else:
            _tidy_class(cls)

    def _enqueue_new(self, item: Item, group: Hashable) -> None:
        """`_enqueue(item, group, fresh=True)` for a new item, with its class's first placing
        (`_place` and `_lowered` into its group) inlined: push and offer are hot paths."""
        g = self._groups.get(group)
        if g is None:
            g = self._new_group(group)
        ln = self._lanes.get(item.lane)
        if ln is None:
            ln = self._new_lane(item.lane, g)
        sig = item.keys
        cls = ln.classes.get(sig)
        if cls is None:
            cls = self._new_class(ln, sig)
        for ks in cls.keys:
            ks.users += 1
        item._cls = cls
        ln.queued += 1
        g.queued += 1
        cls.n += 1
        negp = -item.priority
        seq = item.seq
        item._entry = e = (negp, seq, item)
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
            ik = (negp, ln.running, seq)
            cls.entry = ne = (ik, cls.nid, cls)
            gh = g.heap
            heappush(gh, ne)
            cls.where = g
            g.nparked = nparked = g.nparked + 1
            ge = g.entry
            c = g.cap
            if ge is not None or c is None or g.running < c:
                sv = g.S
                v = self._V
                fk = (negp, g.load, sv if sv > v else v, g.tb, ik[1], seq)
                if ge is None or fk < ge[0]:
                    self._to_top(g, fk)
                    if len(self._top) > 2 * self._live + SLACK:
                        self._tidy_top()
            if len(gh) > 2 * nparked + SLACK:
                _tidy(gh)
        elif h[0] is e:
            ik = (negp, ln.running, seq)
            if ik < ce[0]:
                self._relocate(cls, ik)
                self._tidy_top()
        elif len(h) > 2 * cls.n + SLACK:
            _tidy_class(cls)
        self._items[item.id] = item

    def _stop(self, item: Item, *, leaving: bool) -> None:
        """RUNNING -> DONE (`leaving`) or back to QUEUED: free the counts, re-key what they
        lowered, wake what they freed, forget what is left idle. Written out for the common
        case (a lane whose classes are all visible or empty, a group with no sub-keys); the
        helpers it would call are named where they apply."""
        cls = item._cls
        assert cls is not None
        ln: GroupLane = cls.lane  # type: ignore[assignment]
        g = ln.group
        self._running -= 1
        ln.running = lrun = ln.running - 1
        g.running = r = g.running - 1
        g.load = load = int(r * K // g.w)
        cls.nrun -= 1
        keys = cls.keys
        for ks in keys:
            ks.running -= 1
            if leaving:
                ks.users -= 1
        # `_rekey_lane`: the lane's classes' keys fell by one running.
        for c in ln.classes.values():
            ce = c.entry
            if ce is not None:
                ik = self._inner(c)
                if ik < ce[0]:
                    self._relocate(c, ik)
        if ln.nparked:
            self._wake_lane(ln)
        # `_regroup`: the group's key fell, and it may have room again.
        gc = g.cap
        if gc is None or r < gc:
            if g.nparked:
                ik = g.heap[0][0]
                sv = g.S
                v = self._V
                fk = (ik[0], load, sv if sv > v else v, g.tb, ik[1], ik[2])
                ge = g.entry
                if ge is None or fk < ge[0]:
                    self._to_top(g, fk)
            if g.subs:
                self._regroup(g)
        for ks in keys:
            if ks.nparked:
                self._wake_key(ks)
        if leaving:
            if not cls.n and not cls.nrun:
                del ln.classes[cls.sig]
            for ks in keys:
                if not ks.users and ks.cap is None:
                    self._forget_key(ks)
            if not ln.queued and not lrun:
                self._maybe_forget_lane(ln)

    def _dequeue(self, item: Item) -> None:
        """A QUEUED item leaves without running (cancel, drain); its entry is already dead."""
        cls = item._cls
        assert cls is not None
        ln: GroupLane = cls.lane  # type: ignore[assignment]
        g = ln.group
        cls.n -= 1
        ln.queued -= 1
        g.queued -= 1
        for ks in cls.keys:
            ks.users -= 1
        if not cls.n:
            where = cls.where
            self._unplace(cls)
            cls.heap.clear()
            if type(where) is SubKey and not where.nparked:
                self._drop_sub(where)
            if not cls.nrun:
                del ln.classes[cls.sig]
        else:
            _tidy_class(cls)
        for ks in cls.keys:
            if not ks.users and ks.cap is None:
                self._forget_key(ks)
        self._maybe_forget_lane(ln)

    def _lookup(self, item_id: Hashable, op: str) -> Item:
        try:
            item = self._items.get(item_id)
        except TypeError:
            raise BadType(f"item id {item_id!r} is not hashable") from None
        if item is None:
            raise BadValue(f"cannot {op} item {item_id!r}: no such queued or running item")
        return item

    def _tidy_top(self) -> None:
        top = self._top
        if len(top) > 2 * self._live + SLACK:
            top[:] = [e for e in top if e[2].entry is e]
            heapify(top)


def _stats(g: Group) -> GroupStats:
    return GroupStats(queued=g.queued, running=g.running, started=g.started, weight=g.w, cap=g.cap)


def _shrunk(where: Any) -> None:
    """A container lost a live entry: compact its heap once stale entries outnumber live ones."""
    if len(where.heap) > 2 * where.nparked + SLACK:
        _tidy(where.heap)


def _tidy(heap: list[Entry]) -> None:
    heap[:] = [e for e in heap if e[2].entry is e]
    heapify(heap)


def _tidy_class(cls: Class) -> None:
    h = cls.heap
    if len(h) > 2 * cls.n + SLACK:
        h[:] = [e for e in h if e[2]._entry is e]
        heapify(h)


def _first_live(heap: list[tuple[int, int, Item]]) -> Item | None:
    if heap and heap[0][2]._entry is heap[0]:
        return heap[0][2]
    live = [e for e in heap if e[2]._entry is e]
    return min(live)[2] if live else None


def _order(item: Item) -> tuple[int, int, int]:
    return (-item.priority, item.seq, item._uid)
