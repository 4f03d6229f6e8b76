"""`decide()`: which executors start, stop or are killed, table by table, and a state machine
driving tenants through appends, calls, crashes, boots and the clock: `decide` never stops an
executor whose tenant has pending or running work, never starts a second one, never starts
one in its backoff, and starts every tenant with pending work once its backoff is over."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from yoke.actors.lifecycle.decide import (
    Action,
    Kind,
    Observation,
    Phase,
    Policy,
    TenantObservation,
    decide,
)

POLICY = Policy(idle_secs=60.0, boot_timeout=10.0, prewarm=12.0)
NOW = 1000.0


def t(phase: Phase = Phase.NONE, **kw: object) -> TenantObservation:
    values: dict[str, object] = {
        "tenant": "acme",
        "phase": phase,
        "pending": False,
        "active": 0,
        "busy_at": NOW,
        "since": NOW,
        "backoff_until": 0.0,
        "timer_due": None,
    }
    values.update(kw)
    return TenantObservation(**values)  # type: ignore[arg-type]


CASES: list[tuple[str, TenantObservation, bool, list[tuple[Kind, str]]]] = [
    ("cold with pending starts", t(pending=True), True, [(Kind.START, "pending")]),
    ("cold in backoff waits", t(pending=True, backoff_until=NOW + 1), True, []),
    (
        "cold, backoff just over",
        t(pending=True, backoff_until=NOW),
        True,
        [(Kind.START, "pending")],
    ),
    ("cold with nothing stays cold", t(), True, []),
    ("cold, timer due soon: pre-warm", t(timer_due=NOW + 12), True, [(Kind.START, "timer")]),
    ("cold, timer due later", t(timer_due=NOW + 12.5), True, []),
    ("cold, stale observation still starts", t(pending=True), False, [(Kind.START, "pending")]),
    ("booting", t(Phase.STARTING, since=NOW - 10), True, []),
    (
        "boot past its deadline",
        t(Phase.STARTING, since=NOW - 10.5),
        True,
        [(Kind.KILL, "boot_timeout")],
    ),
    ("ready with pending keeps running", t(Phase.READY, pending=True, busy_at=0.0), True, []),
    ("ready with a call running keeps running", t(Phase.READY, active=1, busy_at=0.0), True, []),
    ("ready, idle a while", t(Phase.READY, busy_at=NOW - 59.9), True, []),
    (
        "ready, idle long enough stops",
        t(Phase.READY, busy_at=NOW - 60),
        True,
        [(Kind.STOP, "idle")],
    ),
    ("ready, idle, stale observation", t(Phase.READY, busy_at=0.0), False, []),
    ("ready, idle, timer soon", t(Phase.READY, busy_at=0.0, timer_due=NOW + 5), True, []),
    ("draining with pending waits for its end", t(Phase.DRAINING, pending=True), True, []),
]


@pytest.mark.parametrize(("case", "tenant", "fresh", "expected"), CASES, ids=[c[0] for c in CASES])
def test_decide(
    case: str, tenant: TenantObservation, fresh: bool, expected: list[tuple[Kind, str]]
) -> None:
    got = decide(Observation(tenants=(tenant,), fresh=fresh), NOW, POLICY)
    assert [(a.kind, a.reason) for a in got] == expected
    assert all(a.tenant == "acme" for a in got)


def test_each_tenant_is_decided_on_its_own() -> None:
    obs = Observation(
        tenants=(
            t(tenant="a", pending=True),
            t(Phase.READY, tenant="b", busy_at=0.0),
            t(Phase.READY, tenant="c", active=3, busy_at=0.0),
        )
    )
    assert decide(obs, NOW, POLICY) == [
        Action(kind=Kind.START, tenant="a", reason="pending"),
        Action(kind=Kind.STOP, tenant="b", reason="idle"),
    ]


@dataclass
class _Tenant:
    phase: Phase = Phase.NONE
    pending: int = 0
    active: int = 0
    busy_at: float = 0.0
    since: float = 0.0
    backoff_until: float = 0.0
    timer_due: float | None = None


TENANTS = st.sampled_from(["a", "b", "c"])


class Lifecycle(RuleBasedStateMachine):
    """A worker's tenants, as the service sees them, and decide()'s actions applied."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.tenants = {name: _Tenant() for name in ("a", "b", "c")}
        self.last: list[Action] = []
        self.last_obs: dict[str, TenantObservation] = {}
        self.decided_at = 0.0
        self.policy = Policy(idle_secs=5.0, boot_timeout=3.0, prewarm=2.0)

    def _obs(self, fresh: bool) -> Observation:
        out = []
        for name, x in sorted(self.tenants.items()):
            busy = x.pending > 0 or x.active > 0
            if busy:
                x.busy_at = self.now
            out.append(
                TenantObservation(
                    tenant=name,
                    phase=x.phase,
                    pending=x.pending > 0,
                    active=x.active,
                    busy_at=x.busy_at,
                    since=x.since,
                    backoff_until=x.backoff_until,
                    timer_due=x.timer_due,
                )
            )
        return Observation(tenants=tuple(out), fresh=fresh)

    @rule(name=TENANTS, n=st.integers(1, 5))
    def append(self, name: str, n: int) -> None:
        self.tenants[name].pending += n

    @rule(name=TENANTS)
    def dispatch(self, name: str) -> None:
        x = self.tenants[name]
        if x.phase is Phase.READY and x.pending:
            x.pending -= 1
            x.active += 1

    @rule(name=TENANTS)
    def complete(self, name: str) -> None:
        x = self.tenants[name]
        if x.active:
            x.active -= 1
            x.busy_at = self.now

    @rule(name=TENANTS)
    def booted(self, name: str) -> None:
        x = self.tenants[name]
        if x.phase is Phase.STARTING:
            x.phase, x.since = Phase.READY, self.now

    @rule(name=TENANTS, pause=st.floats(0.1, 10))
    def crash(self, name: str, pause: float) -> None:
        x = self.tenants[name]
        if x.phase in (Phase.STARTING, Phase.READY, Phase.DRAINING):
            x.pending += x.active  # its calls go back
            x.active = 0
            x.phase, x.backoff_until = Phase.NONE, self.now + pause

    @rule(name=TENANTS)
    def stopped(self, name: str) -> None:
        x = self.tenants[name]
        if x.phase is Phase.DRAINING:
            x.phase = Phase.NONE

    @rule(name=TENANTS, ahead=st.floats(0, 20))
    def timer(self, name: str, ahead: float) -> None:
        self.tenants[name].timer_due = self.now + ahead

    @rule(dt=st.floats(0, 4))
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule(fresh=st.booleans())
    def reconcile(self, fresh: bool) -> None:
        obs = self._obs(fresh)
        self.last_obs = {o.tenant: o for o in obs.tenants}
        self.last = decide(obs, self.now, self.policy)
        self.decided_at = self.now
        for a in self.last:
            x = self.tenants[a.tenant]
            if a.kind is Kind.START:
                x.phase, x.since = Phase.STARTING, self.now
            elif a.kind is Kind.STOP:
                x.phase = Phase.DRAINING
            else:
                x.phase, x.backoff_until = Phase.NONE, self.now + 1.0

    @invariant()
    def never_stops_a_busy_executor(self) -> None:
        for a in self.last:
            o = self.last_obs[a.tenant]
            if a.kind is Kind.STOP:
                assert not o.pending and o.active == 0 and o.phase is Phase.READY

    @invariant()
    def never_starts_a_second_one_or_in_backoff(self) -> None:
        for a in self.last:
            o = self.last_obs[a.tenant]
            if a.kind is Kind.START:
                assert o.phase is Phase.NONE and o.backoff_until <= self.decided_at

    @invariant()
    def every_pending_tenant_past_its_backoff_is_started(self) -> None:
        started = {a.tenant for a in self.last if a.kind is Kind.START}
        for name, o in self.last_obs.items():
            if o.phase is Phase.NONE and o.pending and o.backoff_until <= self.decided_at:
                assert name in started

    @invariant()
    def one_action_per_tenant(self) -> None:
        names = [a.tenant for a in self.last]
        assert len(names) == len(set(names))


TestLifecycle = Lifecycle.TestCase
TestLifecycle.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)


def test_the_observation_is_frozen() -> None:
    o = t()
    with pytest.raises(AttributeError):
        o.pending = True  # type: ignore[misc]
    assert replace(o, pending=True).pending
