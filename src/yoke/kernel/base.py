"""The kernel's state and the bookkeeping of its nodes: creating, finding and forgetting them.

What it is for. `KernelBase` declares every field of `core.Kernel` (one `__slots__` tuple, so the
hot paths touch slots only) and the small operations on them that decide nothing: making a lane,
cap key or class on first use, forgetting an idle one (the memory contract in `core`), finding
the key that blocks a class, and the read-only views (stats, `_heaps` for the I14 test).

What it must never do: move an entry between heaps or pick an item. Forgetting a node only clears
its own bookkeeping; stale entries it leaves in other heaps die lazily (their node's `entry` no
longer points at them).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator

from yoke.errors import BadType, BadValue
from yoke.kernel import args
from yoke.kernel.nodes import TOP, Class, KeyState, Lane
from yoke.kernel.policies import BasePolicy, Sfq
from yoke.kernel.types import Item, KernelStats, Key, LaneStats, Policy, PriorityScope

_SLACK = 64  # I14: a heap is compacted once it holds more than 2 * live + _SLACK entries


class KernelBase:
    __slots__ = (
        "_activate", "_dispatch", "_dquantum", "_dstride", "_dw", "_gcap", "_items", "_key",
        "_keys", "_lanes", "_nid", "_pol", "_policy", "_rekey", "_running", "_scope", "_seq",
        "_sfq", "_top", "_top_live", "credit",
    )  # fmt: skip

    # Set by `core.Kernel.__init__`; declared here so every layer sees the same typed fields.
    _policy: Policy
    _scope: PriorityScope
    _gcap: int | None
    credit: int
    _dw: float
    _dstride: int
    _dquantum: int
    _pol: BasePolicy
    _key: Callable[[Lane, int, int], Key]  # the policy's key, bound once
    _dispatch: Callable[[Lane, int], None] | None  # on_dispatch, or None where it is a no-op
    _activate: Callable[[Lane], None] | None  # on_activate, or None where it is a no-op
    _rekey: bool  # the policy's rekey_on_release (M3)
    _sfq: Sfq | None  # the policy when it is lane-scope SFQ, which pop_next inlines
    _top: list[tuple[Key, int, Class | KeyState]]
    _top_live: int
    _lanes: dict[Hashable, Lane]
    _keys: dict[Hashable, KeyState]
    _items: dict[Hashable, Item]
    _running: int  # running items; the queued ones are len(_items) - _running (no counter)
    _seq: int
    _nid: int

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
            return LaneStats(queued=0, running=0, started=0, weight=self._dw)
        return LaneStats(queued=ln.queued, running=ln.running, started=ln.started, weight=ln.w)

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
        yield "top", len(self._top), self._top_live
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

    @staticmethod
    def _blocker(cls: Class) -> KeyState | None:
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

    def _blocked_by(self, item: Item) -> Hashable | None:
        if self._gcap is not None and self._running >= self._gcap:
            return "global"
        assert item._cls is not None
        blk = self._blocker(item._cls)
        if blk is None:
            return None
        return ("lane", blk.name) if type(blk) is Lane else blk.name

    # ------------------------------------------------------------------ node lifecycle

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

    def _drop_proxy(self, ks: KeyState) -> None:
        if ks.where is TOP:
            self._top_live -= 1
        ks.entry = None
        ks.where = None

    def _forget_key(self, ks: KeyState) -> None:
        del self._keys[ks.name]
        self._drop_proxy(ks)
        ks.heap.clear()

    def _forget_keys(self, keys: tuple[KeyState, ...]) -> None:
        """Forget the keys of a class that nobody uses any more and that have no cap."""
        for ks in keys:
            if not ks.users and ks.cap is None:
                self._forget_key(ks)

    def _maybe_forget_lane(self, ln: Lane) -> None:
        if ln.queued or ln.running or ln.cap is not None or ln.w != self._dw:
            return
        self._forget_lane(ln)

    def _forget_lane(self, ln: Lane) -> None:
        del self._lanes[ln.name]
        self._drop_proxy(ln)
        ln.heap.clear()
