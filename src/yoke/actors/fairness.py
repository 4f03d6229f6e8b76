"""Fairness telemetry of one worker's drain, per tenant, with bounded labels.

What it counts: events processed per tenant, the wait of each event from its append to the
start of its first `process()` call (a histogram per tenant), and the starts of the last
`recent` calls, from which Jain's index over the backlogged tenants is computed (each tenant's
starts divided by its weight: 1 = every backlogged tenant got its weighted share, 1/n = one
took all). Backlog and oldest pending age come from the rows the drain holds and has not
started (it claims each tenant's oldest rows first, so its oldest held row is that tenant's
oldest pending row at this worker).

Bounds: at most `max_tenants` tenants are counted by name here (later ones under `_other`);
the exported series name the `top` tenants by backlog (then by processed) and sum the rest
under `_other`, so a scrape has at most `top + 1` series per metric however many tenants there
are. A tenant moving in or out of the top shows as a counter reset, which `rate()` absorbs.
Pure bookkeeping: times come from the caller.
"""

from __future__ import annotations

import bisect
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

OTHER = "_other"
WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


def jain(values: Iterable[float]) -> float:
    """Jain's fairness index: 1 when all are equal, 1/n when one has everything."""
    xs = list(values)
    square = sum(x * x for x in xs)
    return 1.0 if not xs or square == 0 else sum(xs) ** 2 / (len(xs) * square)


@dataclass(frozen=True, kw_only=True, slots=True)
class TenantFigures:
    tenant: str
    processed: int
    backlog: int  # rows held here, not started
    oldest_pending: float | None  # seconds since the oldest of them was appended
    recent_share: float  # its part of the last starts
    weight: float
    wait_buckets: tuple[int, ...]  # cumulative counts per WAIT_BUCKETS bound, then +Inf
    wait_sum: float


@dataclass(frozen=True, kw_only=True, slots=True)
class FairnessView:
    tenants: tuple[TenantFigures, ...]  # the top ones by name, then `_other` if any
    jain: float  # over the backlogged tenants' weighted recent starts


class _Waits:
    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(WAIT_BUCKETS) + 1)
        self.total = 0.0

    def add(self, other: _Waits) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.total += other.total


class TenantTelemetry:
    def __init__(self, *, recent: int = 1000, max_tenants: int = 10_000) -> None:
        self._max = max_tenants
        self._processed: Counter[str] = Counter()
        self._waits: dict[str, _Waits] = {}
        self._recent: deque[str] = deque(maxlen=recent)

    def __repr__(self) -> str:
        return f"TenantTelemetry(tenants={len(self._waits)}, recent={len(self._recent)})"

    def _name(self, tenant: str) -> str:
        return tenant if tenant in self._waits or len(self._waits) < self._max else OTHER

    def started(self, tenant: str, wait: float) -> None:
        """An event's first `process()` call starts, `wait` seconds after its append."""
        name = self._name(tenant)
        w = self._waits.get(name)
        if w is None:
            w = self._waits[name] = _Waits()
        w.counts[bisect.bisect_left(WAIT_BUCKETS, wait)] += 1
        w.total += max(0.0, wait)
        self._recent.append(tenant)

    def processed(self, tenant: str) -> None:
        self._processed[self._name(tenant)] += 1

    def view(
        self,
        *,
        backlog: Mapping[str, int],
        oldest: Mapping[str, float],
        weights: Mapping[str, float],
        top: int,
        visible: str | None = None,
    ) -> FairnessView:
        """The figures of the `top` tenants (by backlog, then processed) and `_other`; with
        `visible`, of that tenant alone (Jain's index stays the worker's: a number, no names)."""
        recent = Counter(self._recent)
        n = len(self._recent) or 1
        backlogged = [t for t, b in backlog.items() if b > 0]
        index = jain(recent[t] / weights.get(t, 1.0) for t in backlogged)
        names = set(self._waits) | set(backlog) | set(self._processed)
        names.discard(OTHER)
        if visible is not None:
            chosen = [visible]
            rest: list[str] = []
        else:
            order = sorted(names, key=lambda t: (-backlog.get(t, 0), -self._processed[t], t))
            chosen, rest = order[:top], order[top:]
        rows = [self._figures(t, backlog, oldest, weights, recent, n) for t in chosen]
        if visible is None and (rest or OTHER in self._waits or OTHER in self._processed):
            rows.append(self._other(rest, backlog, oldest, recent, n))
        return FairnessView(tenants=tuple(rows), jain=index)

    def _figures(
        self,
        t: str,
        backlog: Mapping[str, int],
        oldest: Mapping[str, float],
        weights: Mapping[str, float],
        recent: Counter[str],
        n: int,
    ) -> TenantFigures:
        w = self._waits.get(t) or _Waits()
        return TenantFigures(
            tenant=t,
            processed=self._processed[t],
            backlog=backlog.get(t, 0),
            oldest_pending=oldest.get(t),
            recent_share=recent[t] / n,
            weight=weights.get(t, 1.0),
            wait_buckets=_cumulative(w.counts),
            wait_sum=w.total,
        )

    def _other(
        self,
        rest: list[str],
        backlog: Mapping[str, int],
        oldest: Mapping[str, float],
        recent: Counter[str],
        n: int,
    ) -> TenantFigures:
        w = _Waits()
        for t in [*rest, OTHER]:
            if t in self._waits:
                w.add(self._waits[t])
        ages = [oldest[t] for t in rest if t in oldest]
        return TenantFigures(
            tenant=OTHER,
            processed=sum(self._processed[t] for t in [*rest, OTHER]),
            backlog=sum(backlog.get(t, 0) for t in rest),
            oldest_pending=max(ages, default=None),
            recent_share=sum(recent[t] for t in rest) / n,
            weight=1.0,
            wait_buckets=_cumulative(w.counts),
            wait_sum=w.total,
        )


def bucket_quantile(cumulative: tuple[int, ...], q: float) -> float | None:
    """The upper bound of the bucket holding quantile `q` (None: no waits; past the last
    bound: that bound, the histogram knows no more)."""
    if not cumulative or not cumulative[-1]:
        return None
    rank = q * cumulative[-1]
    for bound, n in zip(WAIT_BUCKETS, cumulative, strict=False):
        if n >= rank:
            return bound
    return WAIT_BUCKETS[-1]


def _cumulative(counts: list[int]) -> tuple[int, ...]:
    out, total = [], 0
    for c in counts:
        total += c
        out.append(total)
    return tuple(out)


class FairnessCollector:
    """A prometheus_client collector of the current drain's `FairnessView` (its source is
    replaced when the worker runs again, so the registry holds one collector per app)."""

    def __init__(self) -> None:
        self.source: Any = None  # () -> FairnessView | None

    def describe(self) -> list[Any]:
        return []  # collected on scrape only: the series depend on the tenants

    def collect(self) -> Iterator[Any]:
        view = None if self.source is None else self.source()
        if view is None:
            return
        import prometheus_client.metrics_core as core  # only when prometheus_client is there

        processed = core.CounterMetricFamily(
            "yoke_tenant_events_processed",
            "Events processed by this worker, per tenant (top tenants by backlog, then _other)",
            labels=["tenant"],
        )
        waits = core.HistogramMetricFamily(
            "yoke_tenant_wait_seconds",
            "Wait from an event's append to the start of its first process() call",
            labels=["tenant"],
        )
        oldest = core.GaugeMetricFamily(
            "yoke_tenant_oldest_pending_seconds",
            "Age of the oldest event this worker holds and has not started, per tenant",
            labels=["tenant"],
        )
        backlog = core.GaugeMetricFamily(
            "yoke_tenant_backlog", "Events held by this worker, not started", labels=["tenant"]
        )
        for f in view.tenants:
            processed.add_metric([f.tenant], f.processed)
            bounds = [*(str(b) for b in WAIT_BUCKETS), "+Inf"]
            waits.add_metric([f.tenant], list(zip(bounds, f.wait_buckets, strict=True)), f.wait_sum)
            backlog.add_metric([f.tenant], f.backlog)
            if f.oldest_pending is not None:
                oldest.add_metric([f.tenant], f.oldest_pending)
        yield processed
        yield waits
        yield oldest
        yield backlog
        yield core.GaugeMetricFamily(
            "yoke_actor_fairness_jain",
            "Jain's index over the backlogged tenants' weighted shares of the last starts",
            value=view.jain,
        )
