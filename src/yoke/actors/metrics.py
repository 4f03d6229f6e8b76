"""Prometheus metrics of the actor runtime (the actors specification's names), on the app's
own registry.

`yoke_actor_process_total` and `yoke_actor_process_errors_total` count `process()` calls per
actor; `yoke_queue_depth` is per instance, but only for the `depth_limit` deepest instances at
each refresh, and the rest of each actor's rows as one series with tenant and instance
`_other` (bounded cardinality however many tenants and instances there are: label sets that
drop out are removed);
`yoke_runtime_workers` counts workers with a recent heartbeat. The two gauges are read from
the store by `refresh()`, which a worker's heartbeat calls and the server's `/metrics` calls on
every scrape (so a server without a worker, or between heartbeats, never shows stale gauges).
Without `prometheus_client` installed (or with `registry=None`) every method is a no-op, so the
runtime never depends on it. The registry is the app's own, never the global default one: two
apps in one process (as in tests) count apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from yoke.actors.inspection import WorkerStatus, worker_status
from yoke.actors.protocol import ActorStore
from yoke.store.actor_records import QueueDepth

try:  # optional: metrics are a feature, not a requirement of the runtime
    import prometheus_client as _prom
except ImportError:  # pragma: no cover - exercised only where prometheus_client is absent
    _prom = None  # type: ignore[assignment]

DEPTH_LIMIT = 50  # yoke_queue_depth series at most: the deepest instances
OTHER = "_other"  # the tenant and instance label of the rest of an actor's queue rows


class ActorMetrics:
    """The actor metrics on `registry` (a `prometheus_client.CollectorRegistry`), or none."""

    def __init__(self, registry: Any | None) -> None:
        self.registry = registry  # render with prometheus_client.generate_latest(registry)
        self.enabled = registry is not None and _prom is not None
        self._processed: dict[str, Any] = {}
        self._failed: dict[str, Any] = {}
        self._depth_labels: set[tuple[str, str, str]] = set()
        if not self.enabled:
            return
        assert _prom is not None
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
        workers = await store.list_workers()
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
    return None if _prom is None else _prom.CollectorRegistry()
