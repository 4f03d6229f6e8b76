"""Prometheus metrics of the actor runtime (the actors specification's names), on the app's
own registry.

`yoke_actor_process_total` and `yoke_actor_process_errors_total` count `process()` calls per
actor; `yoke_queue_depth` is per instance, but only for the `depth_limit` deepest instances at
each refresh, and the rest of each actor's rows as one series with tenant and instance
`_other` (bounded cardinality however many tenants and instances there are: label sets that
drop out are removed);
`yoke_runtime_workers` counts workers with a recent heartbeat; `yoke_actor_moves_total{reason}`
counts the instances this worker handed over or took over. The per-tenant fairness of
this worker's drain (`yoke_tenant_events_processed`, `yoke_tenant_wait_seconds`,
`yoke_tenant_oldest_pending_seconds`, `yoke_tenant_backlog`, `yoke_actor_fairness_jain`) is
collected on each scrape by `fairness.FairnessCollector`, the top tenants by backlog by name
and the rest as `_other`. The executor metrics are this
worker's: `yoke_executor_boot_phase_seconds{phase}` (stamped by each boot), `yoke_executors{state}`
and `yoke_executor_crashes_total`. The two store gauges are read from
the store by `refresh()`, which a worker's heartbeat calls and the server's `/metrics` calls on
every scrape (so a server without a worker, or between heartbeats, never shows stale gauges).
Without `prometheus_client` installed (or with `registry=None`) every method is a no-op, so the
runtime never depends on it. The registry is the app's own, never the global default one: two
apps in one process (as in tests) count apart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from yoke.actors.executor.boot import PHASES as BOOT_PHASES  # one list: boot.py times them
from yoke.actors.fairness import FairnessCollector, FairnessView
from yoke.actors.inspection import WorkerStatus, worker_status
from yoke.actors.protocol import ActorStore
from yoke.store.actor_records import QueueDepth

_loaded: list[Any] = []  # [prometheus_client or None], once looked for


def _prometheus() -> Any:
    """prometheus_client, or None without it: imported on first use (an executor process,
    which counts nothing, never pays for it)."""
    if not _loaded:
        try:  # optional: metrics are a feature, not a requirement of the runtime
            import prometheus_client
        except ImportError:  # pragma: no cover - only where prometheus_client is absent
            _loaded.append(None)
        else:
            _loaded.append(prometheus_client)
    return _loaded[0]


DEPTH_LIMIT = 50  # yoke_queue_depth series at most: the deepest instances
OTHER = "_other"  # the tenant and instance label of the rest of an actor's queue rows
MOVE_REASONS = ("rebalance", "cancelled", "stop", "takeover", "other")
EXECUTOR_STATES = ("STARTING", "READY", "DRAINING", "DYING", "STOPPED", "FAILED")
BOOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ActorMetrics:
    """The actor metrics on `registry` (a `prometheus_client.CollectorRegistry`), or none."""

    def __init__(self, registry: Any | None) -> None:
        self.registry = registry  # render with prometheus_client.generate_latest(registry)
        _prom = None if registry is None else _prometheus()
        self.enabled = _prom is not None
        self._processed: dict[str, Any] = {}
        self._failed: dict[str, Any] = {}
        self._depth_labels: set[tuple[str, str, str]] = set()
        self._fairness: FairnessCollector | None = None
        if not self.enabled:
            return
        assert _prom is not None
        # Per-tenant fairness of this worker's drain, collected on scrape (`fairness.py`).
        self._fairness = FairnessCollector()
        assert registry is not None
        registry.register(self._fairness)
        self._process_total = _prom.Counter(
            "yoke_actor_process", "process() invocations", ["actor"], registry=registry
        )
        self._errors_total = _prom.Counter(
            "yoke_actor_process_errors", "Failed process() calls", ["actor"], registry=registry
        )
        self._depth = _prom.Gauge(
            "yoke_queue_depth",
            "Per-instance queue depth (the deepest instances only)",
            ["tenant", "actor", "instance"],
            registry=registry,
        )
        self._workers = _prom.Gauge(
            "yoke_runtime_workers", "Workers with a recent heartbeat", registry=registry
        )
        # Executor processes of this worker (none in inline mode). No tenant label: the
        # per-tenant detail is in GET /v1/executors.
        self._boot = _prom.Histogram(
            "yoke_executor_boot_phase_seconds",
            "Per-phase executor cold-start duration",
            ["phase"],
            buckets=BOOT_BUCKETS,
            registry=registry,
        )
        self._phases = {p: self._boot.labels(p) for p in BOOT_PHASES}
        self._executors = _prom.Gauge(
            "yoke_executors",
            "Executor processes of this worker by state",
            ["state"],
            registry=registry,
        )
        for state in EXECUTOR_STATES:
            self._executors.labels(state).set(0)
        self._crashes = _prom.Counter(
            "yoke_executor_crashes",
            "Executor processes that failed (crash, kill, timeout, boot failure)",
            registry=registry,
        )
        # Changes of owner this worker made, by why (MOVE_REASONS: a bounded label set).
        self._moves = _prom.Counter(
            "yoke_actor_moves",
            "Instances this worker handed over or took over, by reason",
            ["reason"],
            registry=registry,
        )
        for reason in MOVE_REASONS:
            self._moves.labels(reason)

    def moved(self, reason: str, n: int = 1) -> None:
        """`n` instances changed owner: `rebalance` (a balancer's move), `cancelled` (its
        taker left first), `stop` (handed over at SIGTERM), `takeover` (of a stale or stopped
        worker, or ownerless)."""
        if self.enabled and n:
            self._moves.labels(reason if reason in MOVE_REASONS else "other").inc(n)

    def track_fairness(self, source: Callable[[], FairnessView | None]) -> None:
        """Export `source()`'s per-tenant figures (the running drain's) on every scrape."""
        if self._fairness is not None:
            self._fairness.source = source

    def processed(self, actor: str) -> None:
        if self.enabled:
            c = self._processed.get(actor)
            if c is None:
                c = self._processed[actor] = self._process_total.labels(actor)
            c.inc()

    def failed(self, actor: str) -> None:
        if self.enabled:
            c = self._failed.get(actor)
            if c is None:
                c = self._failed[actor] = self._errors_total.labels(actor)
            c.inc()

    def executor_phase(self, phase: str, seconds: float) -> None:
        if self.enabled:
            self._phases[phase].observe(max(0.0, seconds))

    def executor_crashed(self) -> None:
        if self.enabled:
            self._crashes.inc()

    def set_executors(self, by_state: dict[str, int]) -> None:
        if self.enabled:
            for state, n in by_state.items():
                self._executors.labels(state).set(n)

    def set_depths(
        self, depths: Iterable[QueueDepth], totals: Mapping[str, int] | None = None
    ) -> None:
        """The deepest instances by name; with `totals` (queue rows per actor), the rest of
        each actor's rows under `_other`."""
        if not self.enabled:
            return
        seen: set[tuple[str, str, str]] = set()
        rest = dict(totals or {})
        for d in depths:
            labels = (d.tenant, d.actor, d.instance_id)
            seen.add(labels)
            self._depth.labels(*labels).set(d.depth)
            if d.actor in rest:
                rest[d.actor] -= d.depth
        for actor, n in rest.items():
            if n > 0:
                labels = (OTHER, actor, OTHER)
                seen.add(labels)
                self._depth.labels(*labels).set(n)
        for labels in self._depth_labels - seen:
            self._depth.remove(*labels)
        self._depth_labels = seen

    def set_workers(self, n: int) -> None:
        if self.enabled:
            self._workers.set(n)

    async def refresh(
        self, store: ActorStore, *, now: float, stale_after: float, depth_limit: int = DEPTH_LIMIT
    ) -> None:
        """Read both gauges from the store (every worker's heartbeats, every instance's rows)."""
        if not self.enabled:
            return
        workers = await store.fleet.list_workers()
        live = [
            w
            for w in workers
            if worker_status(w, now=now, stale_after=stale_after) is WorkerStatus.LIVE
        ]
        depths = await store.queue_depths(limit=depth_limit)
        counts = await store.actor_counts(tenant=None)
        self.set_workers(len(live))
        self.set_depths(depths, {c.actor: c.pending + c.in_flight for c in counts})

    def __repr__(self) -> str:
        return f"ActorMetrics(enabled={self.enabled})"


def app_registry() -> Any | None:
    """A fresh registry for one app, or None without prometheus_client."""
    prom = _prometheus()
    return None if prom is None else prom.CollectorRegistry()
