"""Public value types of the fairness kernel: policy names, item states, items and stats.

This module only names things. It must never hold scheduling logic: an `Item` is a plain record
that the kernel mutates, and the stats values are frozen snapshots that callers may keep.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from yoke.kernel.nodes import Class


class Policy(StrEnum):
    """How the kernel orders lanes (docs/kernel.md, policies and keys)."""

    SFQ = "sfq"
    ROTATION = "rotation"
    LEAST_RUNNING = "least_running"
    FIFO = "fifo"


class PriorityScope(StrEnum):
    """`lane`: priority orders items only inside their lane; `global`: priority band first."""

    LANE = "lane"
    GLOBAL = "global"


class ItemState(Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"


# Enum member access goes through the metaclass (~100 ns on CPython 3.11); hot code reads these.
_QUEUED = ItemState.QUEUED


class Item:
    """One queued or running unit. Read-only to callers by convention; the kernel owns it.

    `payload` is whatever the caller attached at push (an asyncio Future, a task); the kernel
    never looks at it. The underscore slots are kernel bookkeeping: `_cls` is the item's class
    (lane + cap keys) and `_entry` its one valid heap entry, so lazy deletion is an identity test.
    """

    __slots__ = (
        "_cls",
        "_entry",
        "_uid",
        "id",
        "keys",
        "lane",
        "payload",
        "priority",
        "seq",
        "state",
    )

    def __init__(
        self,
        item_id: Hashable,
        lane: Hashable,
        priority: int,
        seq: int,
        keys: tuple[Hashable, ...],
        payload: object,
        uid: int,
    ) -> None:
        self.id = item_id
        self.lane = lane
        self.priority = priority
        self.seq = seq
        self.keys = keys
        self.payload = payload
        self.state = _QUEUED
        self._uid = uid
        self._cls: Class | None = None
        self._entry: tuple[int, int, Item] | None = None

    def __lt__(self, other: Item) -> bool:
        # Only reached when two entries of one class heap tie on (-priority, seq), i.e. a caller
        # pushed duplicate explicit seqs; push order decides, never object identity.
        return self._uid < other._uid

    def __repr__(self) -> str:
        return (
            f"Item(id={self.id!r}, lane={self.lane!r}, priority={self.priority}, seq={self.seq},"
            f" keys={self.keys!r}, state={self.state.name})"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class LaneStats:
    queued: int
    running: int
    started: int
    weight: float


# One lane with queued items, as `Kernel.lane_heads` lists it: (lane, queued, running, weight,
# head), head being the item `pending(lane)` would list first. A plain tuple, not a record: a
# view of a large queue makes one per lane.
LaneHead = tuple[Hashable, int, int, float, Item]


@dataclass(frozen=True, kw_only=True, slots=True)
class KernelStats:
    queued: int
    running: int
    lanes: Mapping[Hashable, LaneStats]  # live lanes only, in creation order

    def __repr__(self) -> str:
        return f"KernelStats(queued={self.queued}, running={self.running}, lanes={len(self.lanes)})"


Key = tuple[int, ...]
# A full policy key (docs/kernel.md): lane part, then head part. Always ints, so ties never
# fall through to comparing objects.
