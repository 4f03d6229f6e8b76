"""yoke.kernel: the pure, synchronous fairness kernel shared by every queue in yoke.

It decides which queued item starts next under weights, priorities and caps, and nothing else:
no asyncio, no I/O, no clock, no randomness (see `core` for the contract and KERNEL.md for the
design). Only the standard library and `yoke.errors` may be imported here.
"""

from yoke.kernel.core import Kernel
from yoke.kernel.grouped import GroupedKernel, GroupStats, GroupTurn
from yoke.kernel.types import (
    Item,
    ItemState,
    KernelStats,
    LaneHead,
    LaneStats,
    Policy,
    PriorityScope,
)

__all__ = [
    "GroupStats",
    "GroupTurn",
    "GroupedKernel",
    "Item",
    "ItemState",
    "Kernel",
    "KernelStats",
    "LaneHead",
    "LaneStats",
    "Policy",
    "PriorityScope",
]
