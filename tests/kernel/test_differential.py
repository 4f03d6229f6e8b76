"""I1-I6, I10, I12-I14: the kernel against the brute-force reference, for every policy x scope.

Two drivers of the same `Pair` harness: a Hypothesis state machine (shrinks failures to short
sequences) and a seeded long fuzz (long sequences, fixed seeds so CI is reproducible).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tests.kernel.harness import CONFIGS, KEYS, LANES, Pair

CAPS = st.sampled_from([None, 0, 1, 2])
WEIGHTS = st.sampled_from([0.5, 1.0, 2.0, 3.0])
PRIO = st.integers(0, 2)
KEYSETS = st.lists(st.sampled_from(KEYS), max_size=2, unique=True).map(tuple)
PICK = st.integers(0, 1000)


class KernelMachine(RuleBasedStateMachine):
    policy = "sfq"
    scope = "lane"

    def __init__(self) -> None:
        super().__init__()
        self.p = Pair(self.policy, self.scope)

    @initialize(
        gcap=st.sampled_from([None, 1, 2, 4]),
        credit=st.sampled_from([0, 1]),
        caps=st.fixed_dictionaries(dict.fromkeys(KEYS, CAPS)),
        lane_caps=st.fixed_dictionaries({ln: st.sampled_from([None, None, 1, 2]) for ln in LANES}),
    )
    def init(
        self,
        gcap: int | None,
        credit: int,
        caps: dict[str, int | None],
        lane_caps: dict[str, int | None],
    ) -> None:
        self.p = Pair(self.policy, self.scope, gcap, credit)
        for key, cap in caps.items():
            self.p.set_cap(key, cap)
        for lane, cap in lane_caps.items():
            self.p.set_lane_cap(lane, cap)

    @rule(lane=st.sampled_from(LANES), prio=PRIO, keys=KEYSETS)
    def push(self, lane: str, prio: int, keys: tuple[str, ...]) -> None:
        self.p.push(lane, prio, keys)

    @rule(lane=st.sampled_from(LANES), prio=PRIO, keys=KEYSETS)
    def offer(self, lane: str, prio: int, keys: tuple[str, ...]) -> None:
        self.p.offer(lane, prio, keys)

    @rule()
    def pop(self) -> None:
        self.p.pop()

    @rule()
    def pop_twice(self) -> None:
        self.p.pop()
        self.p.pop()

    @rule(pick=PICK)
    def release(self, pick: int) -> None:
        self.p.release(pick)

    @rule(pick=PICK)
    def requeue(self, pick: int) -> None:
        self.p.requeue(pick)

    @rule(pick=PICK)
    def cancel(self, pick: int) -> None:
        self.p.cancel(pick)

    @rule(pick=PICK, prio=PRIO)
    def reprioritize(self, pick: int, prio: int) -> None:
        self.p.reprioritize(pick, prio)

    @rule(pick=PICK)
    def claim(self, pick: int) -> None:
        self.p.claim(pick)

    @rule(lane=st.sampled_from(LANES))
    def pending(self, lane: str) -> None:
        self.p.pending(lane)

    @rule(lane=st.sampled_from(LANES), w=WEIGHTS)
    def set_weight(self, lane: str, w: float) -> None:
        self.p.set_weight(lane, w)

    @rule(key=st.sampled_from(KEYS), cap=CAPS)
    def set_cap(self, key: str, cap: int | None) -> None:
        self.p.set_cap(key, cap)

    @rule(lane=st.sampled_from(LANES), cap=CAPS)
    def set_lane_cap(self, lane: str, cap: int | None) -> None:
        self.p.set_lane_cap(lane, cap)

    @rule(cap=st.sampled_from([None, 0, 1, 2, 4]))
    def set_global_cap(self, cap: int | None) -> None:
        self.p.set_global_cap(cap)

    @rule(really=st.integers(0, 9))
    def drain(self, really: int) -> None:
        if really == 0:  # rare: a drain wipes the interesting state
            self.p.drain()

    @invariant()
    def audit(self) -> None:
        self.p.check()

    def teardown(self) -> None:
        self.p.replay()


MACHINE_SETTINGS = settings(
    max_examples=150,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _machine(policy: str, scope: str) -> type[KernelMachine]:
    return type(f"Machine_{policy}_{scope}", (KernelMachine,), {"policy": policy, "scope": scope})


@pytest.mark.parametrize(("policy", "scope"), CONFIGS)
def test_state_machine(policy: str, scope: str) -> None:
    machine = _machine(policy, scope)
    machine.TestCase.settings = MACHINE_SETTINGS
    machine.TestCase().runTest()


OPS = [
    ("push", 30),
    ("offer", 6),
    ("pop", 28),
    ("release", 18),
    ("requeue", 3),
    ("cancel", 5),
    ("reprioritize", 4),
    ("claim", 3),
    ("pending", 1),
    ("set_weight", 2),
    ("set_cap", 2),
    ("set_lane_cap", 2),
    ("set_global_cap", 1),
    ("drain", 0.2),
]


def fuzz(seed: int, policy: str, scope: str, n_ops: int) -> None:
    rnd = random.Random(seed)
    p = Pair(policy, scope, rnd.choice([None, 1, 2, 4]), rnd.choice([0, 1]))
    names = [n for n, _ in OPS]
    weights = [w for _, w in OPS]
    for step in range(n_ops):
        op = rnd.choices(names, weights)[0]
        lane = rnd.choice(LANES)
        if op in ("push", "offer"):
            keys = tuple(rnd.sample(KEYS, rnd.choice([0, 0, 1, 2])))
            getattr(p, op)(lane, rnd.randint(0, 2), keys)
        elif op == "pop":
            p.pop()
        elif op in ("release", "requeue", "cancel", "claim"):
            getattr(p, op)(rnd.randrange(1000))
        elif op == "reprioritize":
            p.reprioritize(rnd.randrange(1000), rnd.randint(0, 2))
        elif op == "pending":
            p.pending(lane)
        elif op == "set_weight":
            p.set_weight(lane, rnd.choice([0.5, 1.0, 2.0, 3.0]))
        elif op == "set_cap":
            p.set_cap(rnd.choice(KEYS), rnd.choice([None, 0, 1, 2]))
        elif op == "set_lane_cap":
            p.set_lane_cap(lane, rnd.choice([None, None, 1, 2]))
        elif op == "set_global_cap":
            p.set_global_cap(rnd.choice([None, 1, 2, 4]))
        else:
            p.drain()
        if step % 8 == 7:  # every answer is compared; the full state audit is sampled
            p.check()
    p.check()
    p.replay()


@pytest.mark.parametrize(("policy", "scope"), CONFIGS)
def test_seeded_fuzz(policy: str, scope: str) -> None:
    for seed in range(60):
        fuzz(seed, policy, scope, 400)
