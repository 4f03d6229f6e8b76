"""Nodes of the grouped kernel (`grouped.GroupedKernel`): groups, their lanes, and a group's
share of a cap key.

Nothing here decides anything. Every node that sits in a heap has, as in `nodes`, one live
entry (`entry`, identity is the version stamp), the container holding it (`where`) and a unique
`nid` placed before it in every entry. A container is a node with a `heap` of its children's
entries and a count of its live ones (`nparked`):

* the kernel's top heap holds groups and cap-key proxies (full keys);
* a `Group`'s heap holds its visible classes and the proxies of its capped lanes (inner keys);
* a `GroupLane`'s heap holds its classes parked on the lane cap (inner keys);
* a shared cap key's (`KeyState`) heap holds one `SubKey` per group with classes parked on it
  (full keys), and each `SubKey`'s heap holds that group's classes parked on the key (inner
  keys). A group's key changes for all its classes at once, so this middle node lets a release
  re-key one entry per key the group waits on, not one per class.
"""

from __future__ import annotations

from collections.abc import Hashable

from yoke.kernel.nodes import KeyState, Lane


class Group(KeyState):
    """A group of lanes (a tenant): its weight, cap and virtual time, and the heap of its
    visible classes and lane proxies. It is also the cap key ("group", name)."""

    __slots__ = (
        "S",
        "lanes",
        "load",
        "own_cap",
        "own_weight",
        "queued",
        "started",
        "stride",
        "subs",
        "tb",
        "w",
    )

    def __init__(self, name: Hashable, nid: int, w: float, stride: int, cap: int | None) -> None:
        super().__init__(name, nid)
        self.w = w
        self.stride = stride
        self.cap = cap  # in effect: its own, else the kernel's default group cap
        self.own_cap = False
        self.own_weight = False
        self.load = 0  # running * 2**32 // w, kept with `running` and `w`
        self.S = 0  # virtual start tag: max(S, V) is its place among groups tied on load
        self.tb = 0
        self.queued = 0
        self.started = 0
        self.lanes = 0  # live lanes of the group
        self.subs: dict[KeyState, SubKey] = {}

    def __repr__(self) -> str:
        return (
            f"Group({self.name!r}, queued={self.queued}, running={self.running},"
            f" lanes={self.lanes}, weight={self.w}, cap={self.cap})"
        )


class GroupLane(Lane):
    """A lane of one group (a session of a tenant). Its classes park on it when the lane cap
    is full; its proxy then sits in its group's heap."""

    __slots__ = ("group",)

    def __init__(self, name: Hashable, nid: int, group: Group) -> None:
        super().__init__(name, nid, 1.0, 0, 1)
        self.group = group


class SubKey(KeyState):
    """The classes of one group parked on one shared cap key, as one entry in that key's heap."""

    __slots__ = ("group", "key")

    def __init__(self, key: KeyState, group: Group, nid: int) -> None:
        super().__init__((key.name, group.name), nid)
        self.key = key
        self.group = group

    def __repr__(self) -> str:
        return f"SubKey({self.key.name!r}, group={self.group.name!r}, parked={self.nparked})"
