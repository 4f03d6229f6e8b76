"""Where an actor instance lives: the placement rule and the balancing decision, both pure.

`YOKE_PLACEMENT` names the rule a new (or orphaned) instance follows:

* `balanced` (default): rendezvous (highest random weight) hashing of (tenant, actor,
  instance) over the live workers. Every process that knows the same live workers computes
  the same owner without asking anyone, a worker that leaves spreads its instances evenly
  over the others, and a worker that joins wins about 1/n of every other's (docs/decisions.md).
* `tenant`: rendezvous on the tenant alone, so all of a tenant's instances share one worker
  (one executor process per tenant).
* `creator`: the actors specification's rule, the creating worker (none for a process that
  runs no worker: the first worker to look takes the instance).

`plan_moves` is the balancer's decision for one step: which instances change owner so that
every live worker owns its share within a tolerance, at most `budget` of them. It reads only
what it is given (counts, candidates) and returns moves; the store and the hand-over are
`yoke.actors.fleet`'s. No I/O, no clock here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from yoke.errors import BadValue
from yoke.store.actor_records import InstanceRef


class PlacementMode(Enum):
    BALANCED = "balanced"
    TENANT = "tenant"
    CREATOR = "creator"

    @classmethod
    def parse(cls, text: str) -> PlacementMode:
        try:
            return cls(text.strip().lower())
        except ValueError:
            names = ", ".join(m.value for m in cls)
            raise BadValue(f"placement must be one of {names}, got {text!r}") from None


Place = Callable[[InstanceRef], str | None]


def _score(worker: str, key: str) -> int:
    digest = hashlib.blake2b(f"{worker}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def rendezvous(key: str, workers: Sequence[str]) -> str | None:
    """The worker of highest score for `key` (None when there is none); ties by name."""
    if not workers:
        return None
    return max(workers, key=lambda w: (_score(w, key), w))


def placement_key(mode: PlacementMode, ref: InstanceRef) -> str:
    if mode is PlacementMode.TENANT:
        return ref.tenant
    return f"{ref.tenant}\x1f{ref.actor}\x1f{ref.instance_id}"


def place_rule(mode: PlacementMode, live: Sequence[str], *, creator: str | None) -> Place:
    """The owner of a new or orphaned instance, given the live workers (sorted or not)."""
    if mode is PlacementMode.CREATOR:
        return lambda ref: creator
    workers = tuple(sorted(set(live)))
    return lambda ref: rendezvous(placement_key(mode, ref), workers)


@dataclass(frozen=True, kw_only=True, slots=True)
class Move:
    ref: InstanceRef
    giver: str
    taker: str


def within(counts: Mapping[str, int], tolerance: float) -> bool:
    """Whether every worker's count is within `tolerance` (a fraction of the fair share, at
    least one instance) of the fair share."""
    if not counts:
        return True
    fair = sum(counts.values()) / len(counts)
    slack = max(1.0, tolerance * fair)
    return all(abs(n - fair) <= slack for n in counts.values())


PENDING_FLOOR = 100  # pending events a worker may hold above its share before swaps help


def plan_moves(
    *,
    mode: PlacementMode,
    live: Sequence[str],
    owned: Mapping[str, int],
    candidates: Sequence[tuple[InstanceRef, str]],
    tolerance: float,
    budget: int,
    pending: Mapping[str, int] | None = None,
    loads: Mapping[InstanceRef, int] | None = None,
) -> list[Move]:
    """One balancing step.

    `owned`: instances per worker, counting a move in progress at its taker; `candidates`:
    (instance, owner) pairs the balancer may move (not moving already). `balanced`: from the
    most loaded to the least loaded worker until every count is within `tolerance` of the fair
    share, each time a candidate of the giver that the rendezvous hash puts on the taker if
    there is one (so moves agree with where placement puts new instances), else the one it
    ranks highest for the taker over the giver. Then, when the counts are balanced but the
    pending events are not (`pending` per worker, `loads`: pending events of candidates), swaps:
    the busiest worker's most loaded instance for the idlest worker's least loaded one, which
    keeps the counts and moves backlog, while a swap narrows the gap and the most loaded worker
    holds more than max(`tolerance` of the fair share, PENDING_FLOOR) above it. `tenant`:
    every candidate not on its tenant's worker goes there. `creator`: nothing moves.
    """
    workers = sorted(set(live))
    if budget <= 0 or not workers or mode is PlacementMode.CREATOR:
        return []
    if mode is PlacementMode.TENANT:
        rule = place_rule(mode, workers, creator=None)
        moves = []
        for ref, owner in candidates:
            taker = rule(ref)
            if taker is not None and taker != owner and owner in workers:
                moves.append(Move(ref=ref, giver=owner, taker=taker))
                if len(moves) == budget:
                    break
        return moves
    counts = {w: owned.get(w, 0) for w in workers}
    pools: dict[str, list[InstanceRef]] = {}
    home: dict[InstanceRef, str | None] = {}  # where the hash would put each candidate now
    for ref, owner in candidates:
        if owner in counts:
            pools.setdefault(owner, []).append(ref)
            home[ref] = rendezvous(placement_key(mode, ref), workers)

    def fit(ref: InstanceRef, giver: str, taker: str) -> tuple[bool, int]:
        key = placement_key(mode, ref)
        return home[ref] == taker, _score(taker, key) - _score(giver, key)

    moves = []
    while len(moves) < budget and not within(counts, tolerance):
        taker = min(workers, key=lambda w: (counts[w], w))
        givers = [w for w in workers if pools.get(w)]
        if not givers:
            break
        giver = max(givers, key=lambda w: (counts[w], w))
        if counts[giver] - counts[taker] <= 1:
            break  # one move would only swap who is over
        pool = pools[giver]
        best = max(range(len(pool)), key=lambda i: fit(pool[i], giver, taker))
        ref = pool.pop(best)
        counts[giver] -= 1
        counts[taker] += 1
        moves.append(Move(ref=ref, giver=giver, taker=taker))
    if pending is not None and loads is not None and within(counts, tolerance):
        moves += _swaps(workers, pools, pending, loads, tolerance, budget - len(moves))
    return moves


def _swaps(
    workers: list[str],
    pools: dict[str, list[InstanceRef]],
    pending: Mapping[str, int],
    loads: Mapping[InstanceRef, int],
    tolerance: float,
    budget: int,
) -> list[Move]:
    load = {w: pending.get(w, 0) for w in workers}
    fair = sum(load.values()) / len(workers)
    slack = max(tolerance * fair, PENDING_FLOOR)
    moves: list[Move] = []
    while budget - len(moves) >= 2:
        giver = max(workers, key=lambda w: (load[w], w))
        taker = min(workers, key=lambda w: (load[w], w))
        if load[giver] - fair <= slack:
            break
        heavy_pool, light_pool = pools.get(giver, []), pools.get(taker, [])
        if not heavy_pool or not light_pool:
            break
        heavy = max(
            heavy_pool, key=lambda r: (loads.get(r, 0), placement_key(PlacementMode.BALANCED, r))
        )
        light = min(
            light_pool, key=lambda r: (loads.get(r, 0), placement_key(PlacementMode.BALANCED, r))
        )
        gain = loads.get(heavy, 0) - loads.get(light, 0)
        if gain <= 0 or gain >= load[giver] - load[taker]:
            break  # no swap narrows the gap
        heavy_pool.remove(heavy)
        light_pool.remove(light)
        load[giver] -= gain
        load[taker] += gain
        moves += [
            Move(ref=heavy, giver=giver, taker=taker),
            Move(ref=light, giver=taker, taker=giver),
        ]
    return moves
