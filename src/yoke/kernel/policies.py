"""The four lane orders (docs/kernel.md, policies and keys) as key functions plus dispatch hooks.

A policy turns (lane state, head of a class) into a full key; the kernel dispatches the smallest
key among eligible classes. A policy must never touch heaps and must keep the key rules that make
lazy heaps exact:

* M1: the head part `(-priority, seq)` appears in the same lexicographic order as the in-lane
  order, so removing or blocking a head can only make a class's key larger;
* M2: everything that moves on its own (V, a lane's S, round or tb at its dispatch) only grows;
* M3: the one thing that lowers keys, a release or weight change under `least_running`, is
  announced by `rekey_on_release`, and the kernel then pushes fresh entries.

Integer virtual time: stride = round(K / w) with K = 2**32, so ties are exact and deterministic.
"""

from __future__ import annotations

from yoke.kernel.nodes import Lane
from yoke.kernel.types import Key, Policy, PriorityScope

K = 1 << 32


def stride_of(w: float) -> int:
    return round(K / w)


def quantum_of(w: float) -> int:
    # rotation serves a lane `weight` times per turn; a fractional weight is rounded, min 1.
    return max(1, round(w))


def load_of(running: int, w: float) -> int:
    # least_running compares running/w as an exact integer (running * 2**32 // w).
    return int(running * K // w)


class BasePolicy:
    """Shared tie-break counter: a lane's `tb` is its place among equal keys (round robin)."""

    __slots__ = ("_tb",)
    rekey_on_release = False

    def __init__(self) -> None:
        self._tb = 0

    def next_tb(self) -> int:
        self._tb += 1
        return self._tb

    def on_new_lane(self, lane: Lane) -> None:
        lane.tb = self.next_tb()

    def on_activate(self, lane: Lane) -> None:
        """The lane had no queued item and now has one."""

    def on_dispatch(self, lane: Lane, negp: int) -> None:
        """An item of `lane` with priority -negp was dispatched; lane.queued is already reduced."""

    def key(self, lane: Lane, negp: int, seq: int) -> Key:
        raise NotImplementedError


class Sfq(BasePolicy):
    """Start-time fair queueing tagged when a lane starts an item, lane scope: one band, one V.

    Seff = max(S, V - credit); a dispatch sets V = max(V, Seff), S = Seff + stride, a fresh tb.
    """

    __slots__ = ("credit", "v0")

    def __init__(self, credit: int) -> None:
        super().__init__()
        self.credit = credit * K
        self.v0 = 0

    def key(self, lane: Lane, negp: int, seq: int) -> Key:
        s = lane.S
        v = self.v0 - self.credit
        return (s if s > v else v, lane.tb, negp, seq)

    def on_dispatch(self, lane: Lane, negp: int) -> None:
        s = lane.S
        v = self.v0
        vc = v - self.credit
        if vc > s:
            s = vc
        if s > v:
            self.v0 = s
        lane.S = s + lane.stride
        self._tb += 1
        lane.tb = self._tb


class SfqGlobal(BasePolicy):
    """SFQ with priority bands first (global scope): one V per band, keyed by -priority."""

    __slots__ = ("credit", "v")

    def __init__(self, credit: int) -> None:
        super().__init__()
        self.credit = credit * K
        self.v: dict[int, int] = {}

    def key(self, lane: Lane, negp: int, seq: int) -> Key:
        s = lane.S
        v = self.v.get(negp, 0) - self.credit
        return (negp, s if s > v else v, lane.tb, seq)

    def on_dispatch(self, lane: Lane, negp: int) -> None:
        s = lane.S
        vb = self.v.get(negp, 0)
        vc = vb - self.credit
        if vc > s:
            s = vc
        if s > vb:
            self.v[negp] = s
        lane.S = s + lane.stride
        self._tb += 1
        lane.tb = self._tb


class Rotation(BasePolicy):
    """DRR with quantum = weight, as a key: (round, tb). Verified against a ring model (I11).

    A lane that becomes non-empty joins the tail (round = last dispatched round + 1, fresh tb);
    it keeps its place for `quantum` dispatches, then moves to the tail; emptied, it leaves and
    its deficit is dropped. A lane that is only blocked by a cap keeps its place.
    """

    __slots__ = ("rnow",)

    def __init__(self) -> None:
        super().__init__()
        self.rnow = 0

    def key(self, lane: Lane, negp: int, seq: int) -> Key:
        return (lane.round, lane.tb, negp, seq)

    def on_activate(self, lane: Lane) -> None:
        lane.round = self.rnow + 1
        self._tb += 1
        lane.tb = self._tb
        lane.deficit = lane.quantum

    def on_dispatch(self, lane: Lane, negp: int) -> None:
        if lane.round > self.rnow:
            self.rnow = lane.round
        if lane.queued:
            lane.deficit -= 1
            if lane.deficit <= 0:
                lane.round += 1
                self._tb += 1
                lane.tb = self._tb
                lane.deficit = lane.quantum


class RotationGlobal(Rotation):
    """Rotation with priority bands first (global scope)."""

    __slots__ = ()

    def key(self, lane: Lane, negp: int, seq: int) -> Key:
        return (negp, lane.round, lane.tb, seq)


class LeastRunning(BasePolicy):
    """Fewest running per weight, then the head in lane order (lane scope)."""

    __slots__ = ()
    rekey_on_release = True

    def key(self, lane: Lane, negp: int, seq: int) -> Key:
        return (int(lane.running * K // lane.w), negp, seq)


class LeastRunningGlobal(LeastRunning):
    """The admission order: priority band first, then fewest running per weight, then the
    oldest head."""

    __slots__ = ()

    def key(self, lane: Lane, negp: int, seq: int) -> Key:
        return (negp, int(lane.running * K // lane.w), seq)


class Fifo(BasePolicy):
    """Actor queues and the base scheduler: priority then arrival, lanes only matter for caps."""

    __slots__ = ()

    def key(self, lane: Lane, negp: int, seq: int) -> Key:
        return (negp, seq)


def make_policy(policy: Policy, scope: PriorityScope, credit: int) -> BasePolicy:
    """One class per policy and scope, so no key function branches on the scope per call."""
    glob = scope is PriorityScope.GLOBAL
    if policy is Policy.SFQ:
        return SfqGlobal(credit) if glob else Sfq(credit)
    if policy is Policy.ROTATION:
        return RotationGlobal() if glob else Rotation()
    if policy is Policy.LEAST_RUNNING:
        return LeastRunningGlobal() if glob else LeastRunning()
    return Fifo()
