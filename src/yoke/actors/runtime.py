"""`ActorRuntime`: the actors of one app, their stream appends, and the services that run them.

`App` owns one and delegates `app.actor(...)`, `app.append(...)` and, inside
`async with app.running():`, `runtime.running(store)`: the worker registers and takes orphan
instances over, then the drain, the timer dispatch, the heartbeat and the NOTIFY listener run
as tasks of one TaskGroup until the block ends. On exit nothing new is claimed, running calls
get `shutdown_timeout`, completions are written, and the worker gives its instances up.

With `executors="process"` (`YOKE_EXECUTORS`), `process()` runs in per-tenant executor
processes: the drain runs its calls through an `ExecutorPool` instead of inline, and a
`RuntimeLifecycleService` starts and stops the executors; every signal that may mean new
events (an append here, a NOTIFY, a fired timer, a takeover) wakes it beside the drain.

This module must never name a store backend and reads time only through its `Clock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from yoke.actors.ctx import fire_time
from yoke.actors.definitions import ActorRegistry, Backoff, Process, Queue, encode
from yoke.actors.drain import QueueDrainScheduler
from yoke.actors.drain_parts import DrainConfig, DrainStats
from yoke.actors.executor.settings import ExecutorSettings
from yoke.actors.fleet import Fleet, LiveWorkers, Placer
from yoke.actors.inspection import DEAD_LETTERS_SHOWN, ActorInspector, InstanceView
from yoke.actors.metrics import ActorMetrics, app_registry
from yoke.actors.placement import PlacementMode
from yoke.actors.portal_runner import PortalRunner
from yoke.actors.portals import PortalRegistry, Start
from yoke.actors.protocol import ActorStore
from yoke.actors.settings import ActorSettings
from yoke.actors.timers import TimerDispatch, TimerStats
from yoke.actors.traced import traced
from yoke.actors.workers import WorkerHeartbeat
from yoke.clock import Clock, SystemClock
from yoke.errors import BadType, NotRunning, YokeError
from yoke.retry import RetryPolicy
from yoke.store.actor_records import EventKey, NewTimer, WorkerRow
from yoke.store.text import check_text
from yoke.tracing import NO_TRACING, Tracing

if TYPE_CHECKING:
    from yoke.actors.executor.boot import Launch
    from yoke.actors.executor.pool import ExecutorPool, ExecutorView
    from yoke.actors.lifecycle.service import RuntimeLifecycleService

log = logging.getLogger("yoke.actors")


class ActorRuntime:
    def __init__(
        self,
        *,
        settings: ActorSettings | None = None,
        clock: Clock | None = None,
        metrics_registry: Any | None = None,
        retry: RetryPolicy | None = None,
        executors: str | None = None,
        executor_settings: ExecutorSettings | None = None,
        app_spec: str | None = None,
        registry: ActorRegistry | None = None,
        portals: PortalRegistry | None = None,
        owner: object | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.tracing = tracing or NO_TRACING  # each process() call's span, when enabled
        self.registry = registry if registry is not None else ActorRegistry()
        self.portals = portals if portals is not None else PortalRegistry()
        # How the drain, the timers and the heartbeat wait out an unavailable store.
        self.retry = retry or RetryPolicy()
        self.settings = settings or ActorSettings.from_env()
        # Where process() runs: `inline` (here) or `process` (per-tenant executors), and how
        # an executor finds the app (`module:attribute`; found among the loaded modules when
        # not given: this runtime, its registry or `owner`, the App holding it).
        self.executor_settings = executor_settings or ExecutorSettings.from_env(mode=executors)
        self.app_spec = app_spec
        self._launch: Launch | None = None  # how executors start, once detected
        self._owner = owner
        self._clock = clock or SystemClock()
        self._metrics_registry = metrics_registry
        self._metrics: ActorMetrics | None = None
        self._store: ActorStore | None = None
        # What the HTTP API and the metrics scrape read (`GET /v1/actors`, `/v1/workers`...).
        self.inspect = ActorInspector(
            registry=self.registry,
            store=self._require,
            clock=self._clock,
            stale_after=self.settings.stale_after,
            forget_after=self.settings.forget_after,
        )
        self._drain: QueueDrainScheduler | None = None
        self._timers: TimerDispatch | None = None
        self._heartbeat: WorkerHeartbeat | None = None
        self._pool: ExecutorPool | None = None
        self._lifecycle: RuntimeLifecycleService | None = None
        # Placement of new instances (`yoke.actors.fleet`): over the live workers as read from
        # the store; `creator` is this worker while it runs one.
        self._live: LiveWorkers | None = None
        self._placer: Placer | None = None
        self._fleet: Fleet | None = None
        # Before an append writes anything: `await admit_appends(tenant, n)` spends the
        # tenant's tokens (`actors.append_rate`) or raises `RateLimited` (the app sets it).
        self.admit_appends: Callable[[str, int], Awaitable[None]] | None = None

    def __repr__(self) -> str:
        state = "running" if self._drain is not None else "idle"
        return (
            f"ActorRuntime({state}, worker_id={self.worker_id!r}, actors={self.registry.names()})"
        )

    @property
    def metrics(self) -> ActorMetrics:
        """The specification's metrics, on this app's own registry (`metrics.registry`) unless
        one was given; made on first use (an executor process importing the app makes none)."""
        if self._metrics is None:
            reg = self._metrics_registry
            self._metrics = ActorMetrics(reg if reg is not None else app_registry())
        return self._metrics

    @property
    def worker_id(self) -> str:
        return self.settings.worker_id

    @property
    def executors(self) -> str:
        """`inline` or `process`: where this worker runs `process()`."""
        return self.executor_settings.mode

    def use_executors(self, mode: str) -> None:
        """Choose where `process()` runs (before `running()`): `inline` or `process`."""
        self.executor_settings = self.executor_settings.with_(mode=mode)
        self._launch = None

    def check_executors(self) -> None:
        """With executors in processes: detect (and probe) their isolation now, before the
        worker starts: `WeakIsolation` as root when tenant code would run as root and that
        was not accepted (the CLI exits 2 on it)."""
        if self.executors == "process":
            self._launch_of()

    def _launch_of(self) -> Launch:
        if self._launch is None:
            from yoke.actors.executor.launch import make_launch, spec_of

            spec = self.app_spec or spec_of([self._owner, self, self.registry])
            self._launch = make_launch(
                self.executor_settings, app=spec, worker_id=self.settings.worker_id
            )
        return self._launch

    def actor(
        self,
        name: str | None = None,
        *,
        subscribe: Sequence[str],
        key: str | None = None,
        queue: Queue | None = None,
        backoff: Backoff | None = None,
    ) -> Callable[[Process], Process]:
        return self.registry.actor(name, subscribe=subscribe, key=key, queue=queue, backoff=backoff)

    def portal(
        self, name: str | None = None, *, per_worker: bool = False
    ) -> Callable[[Start], Start]:
        """Register `async def start(ctx)` as a portal (see `yoke.actors.portals`)."""
        return self.portals.portal(name, per_worker=per_worker)

    def attach(self, store: ActorStore) -> None:
        """Use `store` for appends and lookups (the App calls this when it opens its store)."""
        self._store = store
        s = self.settings
        self._live = LiveWorkers(
            store,
            clock=self._clock,
            stale_after=s.stale_after,
            max_age=min(s.heartbeat_interval, 1.0),
        )
        self._placer = Placer(mode=PlacementMode.parse(s.placement), live=self._live, creator=None)

    def detach(self) -> None:
        self._store = None
        self._live = self._placer = None

    def store(self) -> ActorStore:
        """The store attached (the app's, while it runs)."""
        return self._require()

    def tenants_changed(self) -> None:
        """Tenant settings were changed here: this worker's drain reads them at once."""
        if self._drain is not None:
            self._drain.refresh_settings()

    def _require(self) -> ActorStore:
        if self._store is None:
            raise NotRunning("the app's store is not open (use `async with app.running():`)")
        return self._store

    # -- CtxHost ---------------------------------------------------------------------------
    def wall(self) -> float:
        return self._clock.wall()

    async def append(self, stream: str, data: Any, *, tenant: str = "default") -> int:
        """Append one event to `stream` and fan it out; returns its event id."""
        ids = await self.append_many(stream, [data], tenant=tenant)
        return ids[0]

    async def append_once(self, stream: str, data: Any, *, tenant: str, key: EventKey) -> int:
        """`append`, once per Idempotency-Key `key`: a retry (even one racing the first on
        another server) gets the first append's event id, and appends nothing."""
        store = self._require()
        (event,) = self.registry.new_events(stream, [data], tenant=tenant)
        if self.admit_appends is not None:
            await self.admit_appends(tenant, 1)
        owner = None if self._placer is None else await self._placer.rule()  # as append_many
        event_id, appended = await store.append_event_once(
            event, key=key, owner=owner, now=self._clock.wall()
        )
        if appended and self._drain is not None:
            self._drain.wake()
        if appended and self._lifecycle is not None:
            self._lifecycle.wake(tenant)
        return event_id

    async def append_many(
        self, stream: str, items: Iterable[Any], *, tenant: str = "default"
    ) -> list[int]:
        """Append many events to one stream in one transaction (the fast path)."""
        store = self._require()
        events = self.registry.new_events(stream, items, tenant=tenant)
        if not events:
            return []
        if self.admit_appends is not None:
            await self.admit_appends(tenant, len(events))
        owner = None if self._placer is None else await self._placer.rule()
        ids = await store.append_events(events, owner=owner, now=self._clock.wall())
        if self._drain is not None:
            self._drain.wake()
        if self._lifecycle is not None:
            self._lifecycle.wake(tenant)
        return ids

    async def schedule(
        self,
        stream: str,
        data: Any,
        *,
        tenant: str = "default",
        fire_at: float | None = None,
        delay: float | None = None,
    ) -> int:
        """Fire `data` into `stream` at `fire_at` (epoch seconds) or after `delay` seconds."""
        at = fire_time(self._clock.wall(), fire_at, delay)
        (timer_id,) = await self.schedule_many(stream, [(data, at)], tenant=tenant)
        return timer_id

    async def schedule_many(
        self, stream: str, items: Iterable[tuple[Any, float]], *, tenant: str = "default"
    ) -> list[int]:
        """Schedule many `(data, fire_at)` timers into one stream in one transaction."""
        store = self._require()
        if not isinstance(stream, str) or not stream:
            raise BadType("stream must be a non-empty str")
        if not isinstance(tenant, str) or not tenant:
            raise BadType("tenant must be a non-empty str")
        check_text(stream, "stream")
        check_text(tenant, "tenant")
        timers = [
            NewTimer(
                tenant=tenant,
                stream=stream,
                data=encode(data),
                fire_at_ms=round(fire_time(0.0, at, None) * 1000),
            )
            for data, at in items
        ]
        ids = await store.schedule(timers, now=self._clock.wall())
        if self._timers is not None:
            self._timers.wake()
        return ids

    # -- inspection --------------------------------------------------------------------------
    async def instance(
        self,
        actor: str,
        instance_id: str,
        *,
        tenant: str = "default",
        dead_letters: int = DEAD_LETTERS_SHOWN,
    ) -> InstanceView:
        return await self.inspect.instance(
            actor, instance_id, tenant=tenant, dead_letters=dead_letters
        )

    async def workers(self) -> list[WorkerRow]:
        return await self._require().fleet.list_workers()

    async def refresh_gauges(self) -> None:
        """Read `yoke_queue_depth` and `yoke_runtime_workers` from the store now."""
        await self.metrics.refresh(
            self._require(), now=self._clock.wall(), stale_after=self.settings.stale_after
        )

    def drain_stats(self) -> DrainStats | None:
        return None if self._drain is None else self._drain.stats()

    def timer_stats(self) -> TimerStats | None:
        return None if self._timers is None else self._timers.stats()

    @property
    def drain(self) -> QueueDrainScheduler | None:
        return self._drain

    @property
    def fleet(self) -> Fleet | None:
        return self._fleet

    @property
    def lifecycle(self) -> RuntimeLifecycleService | None:
        return self._lifecycle

    @property
    def pool(self) -> ExecutorPool | None:
        return self._pool

    def executor_views(self) -> list[ExecutorView]:
        """This worker's executors (none in inline mode), from memory."""
        return [] if self._pool is None else self._pool.views()

    # -- running -----------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def running(self, store: ActorStore | None = None) -> AsyncIterator[ActorRuntime]:
        """Run this process as a worker: drain, timers, heartbeat, NOTIFY listener."""
        if store is not None:
            self.attach(store)
        st = self._require()
        if self._drain is not None:
            raise YokeError("this actor runtime is already running")
        s = self.settings
        pool = self._make_pool(st) if self.executors == "process" else None
        drain = QueueDrainScheduler(
            store=st,
            registry=self.registry,
            host=self,
            worker_id=s.worker_id,
            clock=self._clock,
            metrics=self.metrics,
            config=DrainConfig(
                concurrency=s.concurrency,
                batch_size=s.batch_size,
                prefetch=s.prefetch,
                claim=s.claim,
                claim_depth=s.claim_depth,
                settings_poll=s.tenant_settings_poll,
                stale_after=s.stale_after,
                poll_interval=s.poll_interval,
                retry=self.retry,
            ),
            runner=traced(pool, self, self.tracing),
        )
        lifecycle = None if pool is None else self._make_lifecycle(st, pool, drain)
        lifecycle_wake: Callable[[], None] = (lambda: None) if lifecycle is None else lifecycle.wake

        def new_rows() -> None:  # an append, a fired timer, a takeover: events may wait here
            drain.wake()
            lifecycle_wake()

        assert self._live is not None
        placer = Placer(mode=PlacementMode.parse(s.placement), live=self._live, creator=s.worker_id)
        fleet = Fleet(
            store=st,
            drain=drain,
            settings=s,
            live=self._live,
            clock=self._clock,
            metrics=self.metrics,
        )
        timers = TimerDispatch(
            store=st,
            registry=self.registry,
            clock=self._clock,
            owner=placer.rule_now,
            on_fired=new_rows,
            poll_interval=s.timer_poll_interval,
            retry=self.retry,
        )
        heartbeat = WorkerHeartbeat(
            store=st,
            worker_id=s.worker_id,
            clock=self._clock,
            heartbeat_interval=s.heartbeat_interval,
            stale_after=s.stale_after,
            forget_after=s.forget_after,
            on_takeover=new_rows,
            metrics=self.metrics,
            retry=self.retry,
            placer=placer,
        )

        def on_rows() -> None:  # a NOTIFY: rows for us, ownerless instances, moves to make
            new_rows()
            heartbeat.poke()
            fleet.poke()

        portals = None
        if len(self.portals):
            portals = PortalRunner(
                portals=self.portals,
                host=self,
                store=st.leases,
                worker_id=s.worker_id,
                clock=self._clock,
                lease_ttl=s.stale_after,
                renew_every=s.heartbeat_interval,
            )
        await heartbeat.boot()
        self._drain, self._timers, self._heartbeat = drain, timers, heartbeat
        self._placer, self._fleet = placer, fleet
        self._pool, self._lifecycle = pool, lifecycle
        body_error: BaseException | None = None
        try:
            async with asyncio.TaskGroup() as tg:
                tasks = [
                    tg.create_task(drain.run(), name="yoke-actor-drain"),
                    tg.create_task(timers.run(), name="yoke-timer-dispatch"),
                    tg.create_task(heartbeat.run(), name="yoke-worker-heartbeat"),
                    tg.create_task(fleet.run(), name="yoke-fleet"),
                    tg.create_task(
                        st.listen_actor_wakeups(on_rows, timers.wake, drain.refresh_settings),
                        name="yoke-actor-listen",
                    ),
                ]
                if pool is not None and lifecycle is not None:
                    tasks += [
                        tg.create_task(pool.run_pool(), name="yoke-executor-pool"),
                        tg.create_task(lifecycle.run(), name="yoke-runtime-lifecycle"),
                    ]
                if portals is not None:
                    tasks.append(tg.create_task(portals.run(), name="yoke-portals"))
                try:
                    yield self
                except BaseException as exc:
                    body_error = exc
                    raise
                finally:
                    if portals is not None:
                        await portals.stop(s.shutdown_timeout)
                    await drain.shutdown(s.shutdown_timeout)
                    if pool is not None:
                        await pool.shutdown(s.shutdown_timeout)
                    for t in tasks:
                        t.cancel()
        except BaseExceptionGroup as group:
            # The caller's own exception comes back as itself, not wrapped in a group.
            if body_error is not None and group.exceptions == (body_error,):
                raise body_error from body_error.__cause__
            raise
        finally:
            self._drain = self._timers = self._heartbeat = None
            self._pool = self._lifecycle = self._fleet = None
            if self._live is not None:
                self._placer = Placer(
                    mode=PlacementMode.parse(s.placement), live=self._live, creator=None
                )
            try:
                await heartbeat.stop()
            except YokeError as exc:
                log.warning("could not release this worker's instances: %s", exc)

    def _make_pool(self, store: ActorStore) -> ExecutorPool:
        from yoke.actors.executor.pool import ExecutorPool

        es, s = self.executor_settings, self.settings
        launch = self._launch_of()
        pool = ExecutorPool(
            launch=launch,
            host=self,
            store=store,
            worker_id=s.worker_id,
            clock=self._clock,
            boot_concurrency=es.boot_concurrency,
            backoff=es.backoff,
            metrics=self.metrics,
            record_every=es.hot_interval,
            spares=es.warm_spares,
        )
        log.info(
            "worker %s runs process() in executors of %s: %s",
            s.worker_id,
            launch.app,
            launch.isolation.report(),
        )
        return pool

    def _make_lifecycle(
        self, store: ActorStore, pool: ExecutorPool, drain: QueueDrainScheduler
    ) -> RuntimeLifecycleService:
        from yoke.actors.lifecycle.decide import Policy
        from yoke.actors.lifecycle.service import Periods, RuntimeLifecycleService

        es, s = self.executor_settings, self.settings
        lifecycle = RuntimeLifecycleService(
            store=store,
            pool=pool,
            held=drain.held_by_tenant,
            worker_id=s.worker_id,
            clock=self._clock,
            policy=Policy(
                idle_secs=es.idle_secs,
                boot_timeout=es.boot_timeout,
                prewarm=s.timer_poll_interval + 2.0,
            ),
            periods=Periods(
                hot=es.hot_interval,
                cold=es.cold_interval,
                timers=s.timer_poll_interval,
                backup=s.poll_interval,
            ),
            retry=self.retry,
        )
        pool.on_ready = lambda tenant: drain.wake()
        pool.on_exit = lambda tenant: lifecycle.wake()
        return lifecycle
