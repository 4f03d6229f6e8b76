"""Prometheus metrics of one server, on a registry of its own (never the global default one, so
two apps in one process, as in tests, count apart).

Counted as they happen: `yoke_starts_total{outcome}` and `yoke_start_wait_seconds` (from a
start's arrival to its grant), and the schedules' `yoke_schedule_ticks_total{tenant, outcome}`
and `yoke_schedule_lateness_seconds` (heard from the ticker). Read at scrape time from the
scheduler, so they cannot drift:
`yoke_executions_running`, `yoke_starts_queued`, `yoke_session_queued{session}` and
`yoke_fairness_jain`, per tenant (bounded as below) `yoke_tenant_executions_running`,
`yoke_tenant_starts_queued` and `yoke_tenant_running_share{of="actual"|"target"}`,
`yoke_pruned_rows_total{table}` (retention), and with `--ha` `yoke_ha_role`, `yoke_ha_epoch`,
`yoke_ha_failovers_total`. The actor runtime's metrics (`yoke_actor_process_total`,
`yoke_actor_process_errors_total`, `yoke_queue_depth`, `yoke_runtime_workers`) live on the
app's own actor registry, which is registered into this one, so a scrape is one exposition and
a metric defined twice fails at construction, not in the scraper; `scrape()` first reads the
actor gauges from the store. The per-session gauge keeps cardinality bounded: the `TOP_SESSIONS`
deepest queues are labelled by name and the rest are summed under `session="_other"`, so a
flood of one-off sessions cannot blow up the scraper's memory.

This module must never change the scheduler's state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from yoke.actors import ActorRuntime
from yoke.errors import NotRunning, YokeError
from yoke.executions import Executions, Start
from yoke.executions.core import Role
from yoke.executions.leadership import Leadership
from yoke.executions.retention import Pruner
from yoke.server import introspect

log = logging.getLogger("yoke.server")

TOP_SESSIONS = 20
TOP_TENANTS = 20
NAMED_TENANTS = 1000  # tenants whose refusals are counted by name, at most
OTHER = "_other"
LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)


class Outcome(StrEnum):
    GRANTED = "granted"  # 201
    QUEUED = "queued"  # 202
    REJECTED = "rejected"  # 429: a limit is full and on_limit is reject (or max_queued)
    REFUSED = "refused"  # 503: shutting down or standby
    INVALID = "invalid"  # any other 4xx: unknown workflow, bad body, key reuse
    REPLAYED = "replayed"  # an idempotent retry answered from the first answer


class _SchedulerCollector(Collector):
    def __init__(self, executions: Executions) -> None:
        self._ex = executions

    def collect(self) -> Iterator[Metric]:
        per = introspect.sessions(self._ex)
        running = sum(s.running for s in per)
        queued = sum(s.queued for s in per)
        yield GaugeMetricFamily(
            "yoke_executions_running", "Executions running in this server process", value=running
        )
        yield GaugeMetricFamily(
            "yoke_starts_queued", "Starts queued in this server process", value=queued
        )
        depth = GaugeMetricFamily(
            "yoke_session_queued",
            f"Queued starts per session (the {TOP_SESSIONS} deepest; the rest as {OTHER})",
            labels=["session"],
        )
        ranked = sorted((s for s in per if s.queued), key=lambda s: (-s.queued, s.session))
        for s in ranked[:TOP_SESSIONS]:
            depth.add_metric([s.session], s.queued)
        rest = sum(s.queued for s in ranked[TOP_SESSIONS:])
        if rest:
            depth.add_metric([OTHER], rest)
        yield depth
        yield GaugeMetricFamily(
            "yoke_fairness_jain",
            "Jain's fairness index over the running counts of sessions with work (1 = equal)",
            value=introspect.jain(s.running for s in per),
        )
        yield from self._tenants()

    def _tenants(self) -> Iterator[Metric]:
        """Per tenant, read from the kernel's groups: running and queued executions here, and
        the running share against the weighted target. The `TOP_TENANTS` tenants with the
        most work are labelled by name and the rest summed under `_other` (their shares
        summed too), so a flood of tenants cannot blow up the scraper's memory."""
        counts = [c for c in self._ex.kernel.group_counts() if c[1] or c[2]]
        total_running = sum(c[2] for c in counts)
        total_weight = sum(c[3] for c in counts) or 1.0
        counts.sort(key=lambda c: (-(c[1] + c[2]), str(c[0])))
        running = GaugeMetricFamily(
            "yoke_tenant_executions_running",
            f"Executions running in this server process per tenant (the {TOP_TENANTS} with the"
            f" most work; the rest as {OTHER})",
            labels=["tenant"],
        )
        queued = GaugeMetricFamily(
            "yoke_tenant_starts_queued",
            f"Starts queued in this server process per tenant (as {OTHER}, the rest)",
            labels=["tenant"],
        )
        share = GaugeMetricFamily(
            "yoke_tenant_running_share",
            "A tenant's share of the running executions here, and (target) its weighted share"
            " among the tenants with work",
            labels=["tenant", "of"],
        )
        rest = [0, 0, 0.0]
        for i, (name, q, r, w) in enumerate(counts):
            if i < TOP_TENANTS:
                label = str(name)
                running.add_metric([label], r)
                queued.add_metric([label], q)
                share.add_metric([label, "actual"], r / total_running if total_running else 0.0)
                share.add_metric([label, "target"], w / total_weight)
            else:
                rest[0] += q
                rest[1] += r
                rest[2] += w
        if len(counts) > TOP_TENANTS:
            running.add_metric([OTHER], rest[1])
            queued.add_metric([OTHER], rest[0])
            share.add_metric([OTHER, "actual"], rest[1] / total_running if total_running else 0.0)
            share.add_metric([OTHER, "target"], rest[2] / total_weight)
        yield running
        yield queued
        yield share


class _Refusals(Collector):
    """`yoke_tenant_starts_refused_total{tenant, cause}`: refusals counted as they happen, by
    tenant and cause (`rate`, `tenant_queue`, `limit`, `shutdown`, `store`). At most
    `NAMED_TENANTS` tenants are counted by name (later ones under `_other`), and a scrape names
    the `TOP_TENANTS` with the most refusals and sums the rest under `_other`."""

    def __init__(self) -> None:
        self._counts: dict[str, dict[str, int]] = {}

    def refused(self, tenant: str, cause: str) -> None:
        causes = self._counts.get(tenant)
        if causes is None:
            name = tenant if len(self._counts) < NAMED_TENANTS else OTHER
            causes = self._counts.setdefault(name, {})
        causes[cause] = causes.get(cause, 0) + 1

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "yoke_tenant_starts_refused",
            f"Starts refused per tenant and cause (the {TOP_TENANTS} most refused tenants; the"
            f" rest as {OTHER})",
            labels=["tenant", "cause"],
        )
        ranked = sorted(self._counts.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
        rest: dict[str, int] = {}
        for i, (tenant, causes) in enumerate(ranked):
            if i < TOP_TENANTS and tenant != OTHER:
                for cause, n in sorted(causes.items()):
                    family.add_metric([tenant, cause], n)
            else:
                for cause, n in causes.items():
                    rest[cause] = rest.get(cause, 0) + n
        for cause, n in sorted(rest.items()):
            family.add_metric([OTHER, cause], n)
        yield family


class _ScheduleTicks(Collector):
    """The ticker's report, as `yoke_schedule_ticks_total{tenant, outcome}` (`started`,
    `refused`: admission refused the tick's start; `missed`: stood for by one start of catch-up
    "one"; `skipped`: catch-up "skip") and `yoke_schedule_lateness_seconds` (from a tick's due
    time to its start's answer). Tenants are bounded as in `_Refusals`: at most
    `NAMED_TENANTS` counted by name, the `TOP_TENANTS` with the most ticks named by a scrape."""

    OUTCOMES = ("started", "refused", "missed", "skipped")

    def __init__(self, lateness: Histogram) -> None:
        self._counts: dict[str, dict[str, int]] = {}
        self._lateness = lateness

    def _add(self, tenant: str, outcome: str, n: int) -> None:
        counts = self._counts.get(tenant)
        if counts is None:
            name = tenant if len(self._counts) < NAMED_TENANTS else OTHER
            counts = self._counts.setdefault(name, {})
        counts[outcome] = counts.get(outcome, 0) + n

    def started(self, tenant: str, lateness: float) -> None:
        self._add(tenant, "started", 1)
        self._lateness.observe(lateness)

    def refused(self, tenant: str) -> None:
        self._add(tenant, "refused", 1)

    def missed(self, tenant: str, missed: int, skipped: int) -> None:
        if missed:
            self._add(tenant, "missed", missed)
        if skipped:
            self._add(tenant, "skipped", skipped)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "yoke_schedule_ticks",
            "Schedule ticks by tenant and outcome: started, refused (by admission), missed (one "
            f"start stood for them) or skipped while no server ran (the {TOP_TENANTS} tenants "
            f"with the most ticks; the rest as {OTHER})",
            labels=["tenant", "outcome"],
        )
        ranked = sorted(self._counts.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
        rest: dict[str, int] = {}
        for i, (tenant, counts) in enumerate(ranked):
            if i < TOP_TENANTS and tenant != OTHER:
                for outcome in self.OUTCOMES:
                    family.add_metric([tenant, outcome], counts.get(outcome, 0))
            else:
                for outcome, n in counts.items():
                    rest[outcome] = rest.get(outcome, 0) + n
        if rest:
            for outcome in self.OUTCOMES:
                family.add_metric([OTHER, outcome], rest.get(outcome, 0))
        yield family


class _HaCollector(Collector):
    """`yoke_ha_role{role}`, `yoke_ha_epoch`, `yoke_ha_failovers_total`: read at scrape time
    from the leadership of a server run with `--ha` (nothing without it)."""

    def __init__(self, leadership: Callable[[], Leadership | None]) -> None:
        self._leadership = leadership

    def collect(self) -> Iterator[Metric]:
        lead = self._leadership()
        if lead is None:
            return
        role = GaugeMetricFamily(
            "yoke_ha_role", "1 for this server's role in its HA pair", labels=["role"]
        )
        for r in (Role.LEADER, Role.STANDBY):
            role.add_metric([r.value], 1.0 if lead.role is r else 0.0)
        yield role
        yield GaugeMetricFamily(
            "yoke_ha_epoch", "The term this server leads, or led last (0: never)", value=lead.epoch
        )
        yield CounterMetricFamily(
            "yoke_ha_failovers",
            "Terms this server began as leader (takeovers, the first election included)",
            value=lead.terms,
        )


class _PruneCollector(Collector):
    """`yoke_pruned_rows_total{table}`: rows this process deleted for retention (every table
    labelled from the first scrape, so a rate is defined before the first pruning)."""

    TABLES = ("executions", "steps", "requests", "starts", "answers", "controls")

    def __init__(self, pruner: Callable[[], Pruner | None]) -> None:
        self._pruner = pruner

    def collect(self) -> Iterator[Metric]:
        pruner = self._pruner()
        counts = {} if pruner is None else pruner.pruned
        family = CounterMetricFamily(
            "yoke_pruned_rows",
            "Rows deleted for retention by this process (YOKE_RETENTION_SECS), by table",
            labels=["table"],
        )
        for table in self.TABLES:
            family.add_metric([table], counts.get(table, 0))
        yield family


class Metrics:
    def __init__(
        self,
        executions: Executions,
        actors: ActorRuntime | None = None,
        leadership: Callable[[], Leadership | None] | None = None,
        pruner: Callable[[], Pruner | None] | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._actors = actors
        self.starts = Counter(
            "yoke_starts",
            "Answers to start requests, by outcome",
            ["outcome"],
            registry=self.registry,
        )
        # Every series exists from the first scrape; each is looked up once, not per answer.
        self._started = {outcome: self.starts.labels(outcome.value) for outcome in Outcome}
        self.wait = Histogram(
            "yoke_start_wait_seconds",
            "Seconds from a start's arrival to its grant",
            buckets=WAIT_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_SchedulerCollector(executions))
        lateness = Histogram(
            "yoke_schedule_lateness_seconds",
            "Seconds from a schedule tick's due time to its start's answer (this server's)",
            buckets=LATENESS_BUCKETS,
            registry=self.registry,
        )
        self.ticks = _ScheduleTicks(lateness)
        self.registry.register(self.ticks)
        self._refusals = _Refusals()
        self.registry.register(self._refusals)
        if leadership is not None:
            self.registry.register(_HaCollector(leadership))
        if pruner is not None:
            self.registry.register(_PruneCollector(pruner))
        if actors is not None and actors.metrics.registry is not None:
            # A registry is a collector too; registering it checks its names against ours.
            self.registry.register(actors.metrics.registry)

    def granted(self, start: Start) -> None:
        """A grant listener: how long the start waited, from its arrival to its grant."""
        if start.decided_at is not None:
            self.wait.observe(max(0.0, start.decided_at - start.created_at))

    def refused(self, tenant: str, cause: str) -> None:
        """A refusal listener: one of `tenant`'s starts was refused for `cause`."""
        self._refusals.refused(tenant, cause)

    def count(self, outcome: Outcome) -> None:
        self._started[outcome].inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def scrape(self) -> bytes:
        """`render()`, with the actor gauges read from the store first (when it is open)."""
        if self._actors is not None:
            try:
                await self._actors.refresh_gauges()
            except NotRunning:
                pass  # before the lifespan: nothing stored to read yet
            except YokeError as exc:  # a scrape still answers, with the last values read
                log.warning("could not refresh the actor gauges: %s", exc)
        return self.render()
