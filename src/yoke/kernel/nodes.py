"""Internal nodes of the kernel's heaps: cap keys, lanes (which are their own cap key) and classes.

Nothing here decides anything; `core.Kernel` and `heaps` move these nodes between heaps. They exist
so the hot paths touch `__slots__` attributes only. Every node that can sit in a heap carries:

* `entry`: its one valid heap entry (or None). An entry in a heap is live iff `node.entry is entry`;
  that identity test is the version stamp (docs/kernel.md, heaps), and it cannot be fooled by a
  re-push with an equal key.
* `where`: which heap holds that entry: `TOP`, the `KeyState` it is parked on, or None.
* `nid`: a unique int placed before the node in every entry, so that equal keys of a lane class
  and a key proxy never make `heapq` compare the node objects (P4 of docs/kernel.md).
"""

from __future__ import annotations

from collections.abc import Hashable
from enum import Enum
from typing import Any, Literal

from yoke.kernel.types import Item, Key


class Where(Enum):
    TOP = 0


TOP: Literal[Where.TOP] = Where.TOP

ClassEntry = tuple[Key, int, "Class"]
ProxyEntry = tuple[Key, int, "KeyState"]
ItemEntry = tuple[int, int, Item]


class KeyState:
    """A cap key: its running count, its cap, the classes parked on it, and its top-heap proxy.

    `users` counts queued + running items carrying the key, so the running count survives while
    no cap is set (counting mode, I13) and the state is forgotten once nobody uses it.
    """

    __slots__ = ("cap", "entry", "heap", "name", "nid", "nparked", "running", "users", "where")

    def __init__(self, name: Hashable, nid: int) -> None:
        self.name = name
        self.nid = nid
        self.running = 0
        self.cap: int | None = None
        # Parked classes (their entries keyed by the policy); in the grouped kernel, a shared
        # key's heap holds its groups' `SubKey` entries and a group's its classes and lanes.
        self.heap: list[tuple[Key, int, Any]] = []
        self.entry: ProxyEntry | None = None
        # TOP; in the grouped kernel, the container of a lane's proxy or a group's sub-key.
        self.where: Literal[Where.TOP] | KeyState | None = None
        self.nparked = 0
        self.users = 0

    def __repr__(self) -> str:
        return (
            f"KeyState({self.name!r}, running={self.running}, cap={self.cap},"
            f" parked={self.nparked})"
        )


class Lane(KeyState):
    """A tenant lane. It is also the cap key ("lane", name), so its classes park on it."""

    __slots__ = (
        "S",
        "classes",
        "deficit",
        "quantum",
        "queued",
        "round",
        "started",
        "stride",
        "tb",
        "w",
    )

    def __init__(self, name: Hashable, nid: int, w: float, stride: int, quantum: int) -> None:
        super().__init__(name, nid)
        self.w = w
        self.stride = stride
        self.quantum = quantum
        self.S = 0
        self.tb = 0
        self.round = 0
        self.deficit = 0
        self.queued = 0
        self.started = 0
        self.classes: dict[tuple[Hashable, ...], Class] = {}

    def __repr__(self) -> str:
        return (
            f"Lane({self.name!r}, queued={self.queued}, running={self.running},"
            f" classes={len(self.classes)}, cap={self.cap})"
        )


class Class:
    """The items of one lane that carry the same cap keys; they are blocked and freed together."""

    __slots__ = ("entry", "heap", "keys", "lane", "n", "nid", "nrun", "sig", "where")

    def __init__(self, lane: Lane, sig: tuple[Hashable, ...], keys: tuple[KeyState, ...], nid: int):
        self.lane = lane
        self.sig = sig
        self.keys = keys
        self.nid = nid
        self.heap: list[ItemEntry] = []
        self.n = 0  # queued items (exactly one live entry each in `heap`)
        self.nrun = 0  # running items; the class lives while n + nrun > 0
        self.entry: ClassEntry | None = None
        self.where: Literal[Where.TOP] | KeyState | None = None

    def __repr__(self) -> str:
        return (
            f"Class(lane={self.lane.name!r}, keys={self.sig!r}, queued={self.n},"
            f" running={self.nrun})"
        )
