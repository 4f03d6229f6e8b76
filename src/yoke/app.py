"""The `App` facade and composition root: the one module that names a concrete store backend.

`App` holds the workflow registry, the reviewers and `app.executions`; `async with
app.running():` opens the store chosen by the database URL (migrating it), registers this
process (`instances` row + heartbeat), recovers the rows of dead processes, re-applies the newest
recorded limits over configuration, and runs every long-lived service (execution dispatcher,
slot-freed listener, heartbeat, and what later parts add with `add_service`) as tasks of one
TaskGroup, in which the granted executions run too. With actors defined (`app.actor`), it
also runs this process's actor worker (`yoke.actors.ActorRuntime.running`: queue drain, timer
dispatch, worker heartbeat). Leaving it shuts down in order: executions first (refuse queued,
let running finish within the timeout, abort the rest), then services, then the actor worker
(running `process()` calls finish, completions are written, instances are handed back), then
the store.

Defining an app is cheap: `App(...)` and `@app.workflow`, `@app.actor`, `@app.portal` hold
definitions only, and the engines (`app.executions`, `app.actors`, `app.tenants`, the store
backends) are built, and their modules imported, on first use: by `running()`, a worker, the
server. An executor process imports the app's module to find its actors and must not pay for
the engines it never runs (its boot is on a cold tenant's wake path).

This module must never hold scheduling policy; it wires the parts and owns their lifetimes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

from yoke.actors.definitions import ActorRegistry, Backoff, Process, Queue
from yoke.actors.portals import PortalRegistry, Start
from yoke.clock import Clock, SystemClock
from yoke.config import Settings
from yoke.errors import BadValue, YokeError
from yoke.executions.workflows import Registry, Workflow
from yoke.tracing import NO_TRACING, Tracing

if TYPE_CHECKING:  # the engines: imported where they are first built (see above)
    from yoke.actors import ActorRuntime, ActorSettings, ActorStore
    from yoke.executions.leadership import Leadership, Liveness
    from yoke.executions.model import Limits
    from yoke.executions.retention import Pruner
    from yoke.executions.schedules import Schedules
    from yoke.executions.service import Executions, Reviewer
    from yoke.executions.steps import Retry
    from yoke.executions.tenant_book import Rates
    from yoke.executions.tenants import Tenants
    from yoke.executions.ticker import TickListener, TickLoop
    from yoke.store import Store
    from yoke.store.actor_records import EventKey
    from yoke.store.scheduleverbs import ScheduleVerbs
    from yoke.store.tenantverbs import TenantRow

log = logging.getLogger("yoke.app")

Service = Callable[[], Coroutine[Any, Any, None]]
# Seconds a transaction of an HA server may sit idle before PostgreSQL ends its session: a
# frozen leader's open transaction holds the fence's shared lock, which a takeover waits for.
HA_IDLE_IN_TRANSACTION = 2.0


class Backend(Protocol):
    """A store backend as the app holds it: its lifecycle, and the two sets of verbs it
    exposes over its transactions."""

    @property
    def executions(self) -> Store: ...

    @property
    def actors(self) -> ActorStore: ...

    async def open(self) -> None:
        """Connect and bring the schema up to date (numbered migrations)."""
        ...

    async def close(self) -> None: ...

    async def schema_version(self) -> int: ...

    async def listen_leases(self, on_released: Callable[[], None]) -> None:
        """Call `on_released` when a lease is released, until cancelled (or return at once)."""
        ...

    async def listen_tenant_settings(self, on_changed: Callable[[], None]) -> None:
        """Call `on_changed` when a tenant's settings change, until cancelled (or return at
        once)."""
        ...

    @property
    def schedules(self) -> ScheduleVerbs: ...

    async def listen_schedules(self, on_changed: Callable[[], None]) -> None:
        """Call `on_changed` when a schedule is set or deleted, until cancelled (or return at
        once)."""
        ...

    def liveness(self, holder: str) -> Liveness | None:
        """The admission leader's liveness lock (None where sessions are not shared)."""
        ...


def check_ha(settings: Settings) -> None:
    """`--ha` needs a database that several servers share and that fences: PostgreSQL."""
    if settings.ha and not settings.database_url.startswith(("postgresql:", "postgres:")):
        raise BadValue(
            "high availability (--ha, YOKE_HA=1) needs PostgreSQL: a SQLite file is one "
            f"machine's, got {settings.database_url!r}"
        )


def open_store(url: str, settings: Settings | None = None, *, name: str | None = None) -> Backend:
    """The backend for a database URL (not yet opened); `name`: the process's, for the
    database's view of its sessions."""
    s = settings or Settings()
    if url.startswith("sqlite:"):
        from yoke.store.sqlite import SQLiteStore

        return SQLiteStore(url, busy_timeout=s.sqlite_busy_timeout)
    if url.startswith(("postgresql:", "postgres:")):
        from yoke.store.leaseverbs import ha_session_name
        from yoke.store.postgres import PostgresStore

        return PostgresStore(
            url,
            min_size=s.pg_pool_min,
            max_size=s.pg_pool_max,
            connect_timeout=s.pg_connect_timeout,
            retry=s.retry(),
            application_name=(
                None if name is None else ha_session_name(name) if s.ha else f"yoke:{name}"
            ),
            idle_in_transaction_timeout=HA_IDLE_IN_TRANSACTION if s.ha else None,
        )
    raise BadValue(f"unsupported database URL {url!r}: use sqlite:///path or postgresql://...")


async def reach(settings: Settings) -> None:
    """Make one connection to the settings' database and close it, so that a command can say
    why it cannot serve before it starts to: a URL yoke cannot use, or a database that does
    not exist, is `BadValue`; a server that does not answer or refuses the credentials is
    `StoreUnavailable`; each names the cause in one line."""
    url = settings.database_url
    if url.startswith(("postgresql:", "postgres:")):
        from yoke.store.reach import reach_postgres

        await reach_postgres(url, timeout=settings.pg_connect_timeout)
    else:  # a URL of no backend is refused here; a SQLite file (and its folder) is made
        backend = open_store(url, settings)
        await backend.open()
        await backend.close()


async def upgrade(url: str | None = None) -> int:
    """Apply pending migrations to the database (`yoke db upgrade`); returns the version."""
    settings = Settings.from_env()
    store = open_store(url or settings.database_url, settings)
    await store.open()
    try:
        return await store.schema_version()
    finally:
        await store.close()


class App:
    def __init__(
        self,
        database_url: str | None = None,
        *,
        settings: Settings | None = None,
        limits: Limits | None = None,
        clock: Clock | None = None,
        actor_settings: ActorSettings | None = None,
        actor_worker: bool = True,
        executors: str | None = None,
        tracing: Tracing | bool | None = None,
    ) -> None:
        self.settings = settings or Settings.from_env()
        if database_url is not None:
            self.settings = self.settings.with_(database_url=database_url)
        self.clock: Clock = clock or SystemClock()
        self._limits = limits
        if executors not in (None, "inline", "process"):  # said here, not at first use
            raise BadValue(f"executors must be 'inline' or 'process', got {executors!r}")
        self._executors = executors
        self._actor_settings = actor_settings
        self._tracing = tracing  # None: YOKE_TRACING
        # The definitions: workflows, actors and portals, as the decorators register them.
        self.registry = Registry()
        self.actor_registry = ActorRegistry()
        self.portal_registry = PortalRegistry()
        self._reviewers: list[Reviewer] = []
        self._services: list[tuple[str, Service]] = []
        # Actors: inside `running()` this process's worker (drain, timers, heartbeat) runs
        # when any actor or portal is defined and `actor_worker` is true.
        self.actor_worker = actor_worker
        self.store: Store | None = None
        self.instance_id: str | None = None
        self.leadership: Leadership | None = None  # with `settings.ha`, while running
        self.pruner: Pruner | None = None  # retention, while running (None: kept for ever)
        self._stopping = False
        self._service_tasks: list[asyncio.Task[None]] = []
        self._tenants_changed = asyncio.Event()  # read the tenants' settings again now
        self._backend: Backend | None = None  # while running
        self.tick_loop: TickLoop | None = None  # this process's ticker, while running
        self._tick_listeners: list[TickListener] = []

    # -- the engines, built on first use -------------------------------------------------------
    @cached_property
    def configured_limits(self) -> Limits:
        """The limits given, or those of the settings; the newest recorded ones win in
        `running()`."""
        from yoke.executions.model import Limits

        s = self.settings
        return self._limits or Limits(
            max_running=s.max_running,
            max_running_per_session=s.max_running_per_session,
            max_running_per_workflow=s.max_running_per_workflow,
            max_queued=s.max_queued,
            on_limit="reject" if s.on_limit == "reject" else "queue",
        )

    @cached_property
    def tracing(self) -> Tracing:
        """Spans of each start and `process()` call: `App(tracing=...)` (True: OpenTelemetry
        through the global tracer provider; or a `yoke.otel.OtelTracing` of a provider), else
        `YOKE_TRACING` (`otel`); off by default. On needs the `yoke[otel]` extra."""
        chosen = self._tracing
        if isinstance(chosen, Tracing):
            return chosen
        if not (self.settings.tracing == "otel" if chosen is None else chosen):
            return NO_TRACING
        try:
            from yoke.otel import OtelTracing
        except ImportError as exc:
            raise BadValue(
                f"tracing needs OpenTelemetry: pip install 'yoke[otel]' ({exc})"
            ) from exc
        return OtelTracing()

    @cached_property
    def executions(self) -> Executions:
        from yoke.executions.service import Executions

        return Executions(
            registry=self.registry,
            clock=self.clock,
            limits=self.configured_limits,
            reviewers=self._reviewers,
            slot_poll_interval=self.settings.slot_poll_interval,
            retry=self.settings.retry(),
            batch_overlap=self.settings.batch_overlap,
            recovery_max=self.settings.recovery_max if self.settings.recovery == "resume" else None,
            request_poll=self.settings.request_poll_secs,
            store_timeout=self.settings.ready_timeout,
            tracing=self.tracing,
        )

    @cached_property
    def actors(self) -> ActorRuntime:
        """The actor runtime over this app's definitions. `executors`: where process() runs,
        "inline" (here, the default) or "process" (one executor process per tenant); None:
        YOKE_EXECUTORS."""
        from yoke.actors.runtime import ActorRuntime

        return ActorRuntime(
            settings=self._actor_settings,
            clock=self.clock,
            retry=self.settings.retry(),
            executors=self._executors,
            registry=self.actor_registry,
            portals=self.portal_registry,
            owner=self,
            tracing=self.tracing,
        )

    @cached_property
    def tenants(self) -> Tenants:
        """The tenants' settings: weights, executions' and actors' limits, `*` the defaults
        (ADMIN, reviewed and audited like limits)."""
        from yoke.executions.tenants import Tenants

        def changed(row: TenantRow) -> None:  # this process applies them at once
            self.executions.tenants.put(row)
            self.executions.apply_tenant_settings()
            self.actors.tenants_changed()
            self._tenants_changed.set()  # and reads every row again soon

        return Tenants(
            store=lambda: self.actors.store().tenants,
            reviewers=self._reviewers,
            clock=self.clock,
            changed=changed,
        )

    @cached_property
    def schedules(self) -> Schedules:
        """Workflows started on a cron expression or every N seconds (`executions/schedules.py`);
        this process's ticker starts their ticks while `running()`."""
        from yoke.executions.schedules import Schedules

        def changed() -> None:  # this process's ticker looks again at once
            if self.tick_loop is not None:
                self.tick_loop.wake()

        return Schedules(
            store=self._schedule_store, registry=self.registry, clock=self.clock, changed=changed
        )

    def _schedule_store(self) -> ScheduleVerbs:
        if self._backend is None:
            from yoke.errors import NotRunning

            raise NotRunning("the app is not running: use `async with app.running():`")
        return self._backend.schedules

    def add_tick_listener(self, listener: TickListener) -> None:
        """`listener` hears each tick the ticker starts, refuses or misses (for metrics)."""
        self._tick_listeners.append(listener)

    def __repr__(self) -> str:
        return (
            f"App(instance_id={self.instance_id!r}, store={self.store!r}, "
            f"workflows={self.registry.names()})"
        )

    def workflow(
        self,
        name: str | None = None,
        *,
        retry: Retry | None = None,
        timeout: float | None = None,
    ) -> Callable[[Workflow], Workflow]:
        """Register `async def wf(ctx, input)` under `name` (default: the function's name).
        `retry`: the rule of its steps that name none (`yoke.Retry`); `timeout`: seconds from
        its grant after which it ends TIMED_OUT, its children stopped and its slot freed."""

        def register(fn: Workflow) -> Workflow:
            self.registry.register(fn, name, retry=retry, timeout=timeout)
            return fn

        return register

    def actor(
        self,
        name: str | None = None,
        *,
        subscribe: list[str] | tuple[str, ...],
        key: str | None = None,
        queue: Queue | None = None,
        backoff: Backoff | None = None,
    ) -> Callable[[Process], Process]:
        """Register `async def process(ctx, event)` as an actor (see `yoke.actors`)."""
        return self.actor_registry.actor(
            name, subscribe=subscribe, key=key, queue=queue, backoff=backoff
        )

    def portal(
        self, name: str | None = None, *, per_worker: bool = False
    ) -> Callable[[Start], Start]:
        """Register `async def start(ctx)` as a portal: an ingress loop of the app's own that
        appends events (`ctx.append`); by default on exactly one live worker at a time, with
        `per_worker=True` on every worker (see `yoke.actors.portals`)."""
        return self.portal_registry.portal(name, per_worker=per_worker)

    async def append(self, stream: str, data: Any, *, tenant: str = "default") -> int:
        """Append an event to `stream` and fan it out to the subscribed actor instances."""
        with self.tracing.appending(stream=stream, tenant=tenant, count=1):
            return await self.actors.append(stream, data, tenant=tenant)

    async def append_once(self, stream: str, data: Any, *, tenant: str, key: EventKey) -> int:
        """`append` once per Idempotency-Key: a retry gets the first append's event id."""
        with self.tracing.appending(stream=stream, tenant=tenant, count=1):
            return await self.actors.append_once(stream, data, tenant=tenant, key=key)

    async def append_many(
        self, stream: str, items: list[Any], *, tenant: str = "default"
    ) -> list[int]:
        """Append many events to one stream in one transaction."""
        with self.tracing.appending(stream=stream, tenant=tenant, count=len(items)):
            return await self.actors.append_many(stream, items, tenant=tenant)

    def add_reviewer(self, fn: Reviewer) -> None:
        """`fn(change)` sees every runtime change first; returning a reason (str) vetoes it."""
        self._reviewers.append(fn)

    def add_service(self, name: str, fn: Service) -> None:
        """Run `fn()` as a task of the app's TaskGroup while `running()` (cancelled at exit)."""
        self._services.append((name, fn))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[App]:
        s = self.settings
        check_ha(s)
        # 48 random bits (from os, not `uuid`: importing it is a cost to every executor boot).
        self.instance_id = f"{s.instance_id or socket.gethostname()}-{os.urandom(6).hex()}"
        backend = open_store(s.database_url, s, name=self.instance_id)
        await backend.open()
        self.store = store = backend.executions
        self._backend = backend
        self._stopping = False
        self.actors.attach(backend.actors)
        rates = self._rates(backend.actors)
        self.actors.admit_appends = self._appends_gate(rates)
        actor_worker = contextlib.AsyncExitStack()
        try:
            now = self.clock.wall()
            await store.register_instance(self.instance_id, now=now)
            limits = await recorded_limits(store) or self.configured_limits  # the log wins
            await self._read_tenant_settings(backend)  # no start is admitted before they apply
            if self.actor_worker and (len(self.actor_registry) or len(self.portal_registry)):
                await actor_worker.enter_async_context(self.actors.running())
            body_error: BaseException | None = None
            try:
                async with asyncio.TaskGroup() as tg:
                    self.executions.attach(
                        store,
                        instance_id=self.instance_id,
                        spawn=tg.create_task,
                        limits=limits,
                        rates=rates,
                    )
                    if not s.ha:  # with HA the leader recovers, after it adopted the queue
                        await self.executions.recover(stale_before=now - s.instance_stale_after)
                    if s.ha:
                        self.leadership = self._leadership(backend, self.instance_id)
                        self.leadership.stand_by()
                    self._start_services(tg, store, self.instance_id, backend)
                    try:
                        yield self
                    except BaseException as exc:
                        body_error = exc
                        raise
                    finally:
                        await self._stop()
            except BaseExceptionGroup as group:
                # The caller's own exception comes back as itself, not wrapped in a group.
                if body_error is not None and group.exceptions == (body_error,):
                    raise body_error from body_error.__cause__
                raise
        finally:
            try:
                await actor_worker.aclose()  # drain stops, completions written, instances freed
            finally:
                self.actors.detach()
                self.actors.admit_appends = None
            self.executions.detach()
            self.leadership = None
            self.tick_loop = None
            with contextlib.suppress(YokeError):
                await store.stop_instance(self.instance_id, now=self.clock.wall())
            await backend.close()
            self.store = None
            self._backend = None

    async def _stop(self) -> None:
        await self.shutdown()
        tasks, self._service_tasks = self._service_tasks, []
        for task in tasks:
            task.cancel()
        # On Python 3.11 a cancel can be lost inside a library's `asyncio.wait_for` (the pool's
        # connection wait, when the wait ends just as the cancel lands): ask again until every
        # service has ended, or the TaskGroup would wait for it forever.
        while pending := [t for t in tasks if not t.done()]:
            await asyncio.wait(pending, timeout=0.5)
            for task in pending:
                if not task.done():
                    task.cancel()

    def _leadership(self, backend: Backend, instance_id: str) -> Leadership:
        s = self.settings
        store = backend.executions

        async def recover() -> None:
            stale_before = self.clock.wall() - s.instance_stale_after
            await self.executions.recover(stale_before=stale_before)

        from yoke.executions.leadership import Leadership

        return Leadership(
            executions=self.executions,
            store=store,
            leases=backend.actors.leases,
            holder=instance_id,
            clock=self.clock,
            ttl=s.ha_lease_ttl_secs,
            poll=s.ha_poll_secs,
            requeue=s.ha_requeue,
            recover=recover,
            liveness=backend.liveness(instance_id) if s.ha_liveness_lock else None,
        )

    def _start_services(
        self, tg: asyncio.TaskGroup, store: Store, instance_id: str, backend: Backend
    ) -> None:
        services = [
            tg.create_task(self.executions.run_dispatcher(), name="yoke-dispatcher"),
            tg.create_task(
                store.listen_slot_freed(self.executions.wake), name="yoke-slot-listener"
            ),
            tg.create_task(self._heartbeat(store, instance_id), name="yoke-heartbeat"),
            tg.create_task(self.executions.rescue.run_requests(), name="yoke-requests"),
            tg.create_task(self.executions.timers.run(), name="yoke-execution-timers"),
            tg.create_task(
                store.time.listen(self.executions.timers.wake), name="yoke-timer-listener"
            ),
            tg.create_task(
                store.requests.listen(self.executions.rescue.heard), name="yoke-request-listener"
            ),
        ]
        services += [
            tg.create_task(self._follow_tenant_settings(backend), name="yoke-tenant-settings"),
            tg.create_task(
                backend.listen_tenant_settings(self._tenants_changed.set),
                name="yoke-tenant-settings-listener",
            ),
        ]
        loop = self._tick_loop()
        services += [
            tg.create_task(loop.run(), name="yoke-ticker"),
            tg.create_task(backend.listen_schedules(loop.wake), name="yoke-schedule-listener"),
        ]
        pruner = self._pruner(store, backend, instance_id)
        if pruner is not None:
            services.append(tg.create_task(pruner.run(), name="yoke-pruner"))
        if self.leadership is not None:
            services += [
                tg.create_task(self.leadership.run(), name="yoke-leadership"),
                tg.create_task(
                    backend.listen_leases(self.leadership.wake), name="yoke-lease-listener"
                ),
            ]
        services += [tg.create_task(fn(), name=name) for name, fn in self._services]
        self._service_tasks = services

    def _tick_loop(self) -> TickLoop:
        """The ticker (`executions/ticker.py`): on an HA pair, the leader's only."""
        from yoke.executions.ticker import Ticker, TickListeners, TickLoop

        lead = self.leadership
        ticker = Ticker(
            store=self._schedule_store,
            start=self.executions.start,
            clock=self.clock,
            grace=self.settings.schedule_grace_secs,
            listener=TickListeners(self._tick_listeners),
            active=(lambda: True) if lead is None else (lambda: lead.is_leader),
        )
        self.tick_loop = TickLoop(
            ticker,
            clock=self.clock,
            poll=self.settings.schedule_poll_secs,
            retry=self.settings.retry(),
        )
        return self.tick_loop

    def _rates(self, buckets: ActorStore) -> Rates:
        from yoke.executions.tenant_book import Rates

        return Rates(buckets.tenants, self.clock)

    def _appends_gate(self, rates: Rates) -> Callable[[str, int], Awaitable[None]]:
        """Appends spend their tenant's tokens (`actors.append_rate`) before writing."""
        book = self.executions.tenants

        async def admit(tenant: str, n: int) -> None:
            await rates.take(tenant, "appends", book.actors(tenant).bucket, n)

        return admit

    async def _read_tenant_settings(self, backend: Backend) -> None:
        from yoke.executions.tenant_book import MAX_ROWS, read_into

        await read_into(
            self.executions.tenants,
            lambda: backend.actors.tenants.tenant_settings(limit=MAX_ROWS),
            changed=lambda: None,  # nothing is admitted yet
        )

    async def _follow_tenant_settings(self, backend: Backend) -> None:
        """The tenants' settings, read again on a change here, a NOTIFY, or the poll."""
        from yoke.executions.tenant_book import MAX_ROWS, follow

        await follow(
            self.executions.tenants,
            lambda: backend.actors.tenants.tenant_settings(limit=MAX_ROWS),
            wake=self._tenants_changed,
            poll=self.actors.settings.tenant_settings_poll,
            changed=self.executions.apply_tenant_settings,
        )

    def _pruner(self, store: Store, backend: Backend, instance_id: str) -> Pruner | None:
        """Retention (`executions/retention.py`), unless `YOKE_RETENTION_SECS` is 0."""
        s = self.settings
        if not s.retention_secs:
            self.pruner = None
            return None
        from yoke.executions.retention import Pruner

        lead = self.leadership
        self.pruner = Pruner(
            store,
            None if lead is not None else backend.actors.leases,  # one leader at a time already
            clock=self.clock,
            holder=instance_id,
            retention=s.retention_secs,
            interval=s.prune_interval_secs,
            audit_retention=s.audit_retention_secs,
            only_while=None if lead is None else (lambda: lead.is_leader),
        )
        return self.pruner

    async def shutdown(self, timeout: float | None = None) -> None:
        """Admit nothing new, refuse queued starts, give running executions `timeout` seconds
        (default `YOKE_EXECUTION_SHUTDOWN_TIMEOUT`), then abort them. Idempotent."""
        if self._stopping:
            return
        self._stopping = True
        if self.leadership is not None:
            # First of all: the standby takes over (and adopts the queue) while the running
            # executions finish here.
            await self.leadership.resign()
        t = self.settings.execution_shutdown_timeout if timeout is None else timeout
        await self.executions.shutdown(t)
        if self.leadership is not None:
            await self.leadership.release()

    async def _heartbeat(self, store: Store, instance_id: str) -> None:
        s = self.settings
        while True:
            await asyncio.sleep(s.heartbeat_interval)  # a period, not a synchronisation
            now = self.clock.wall()
            try:
                if not await store.heartbeat(instance_id, now=now):
                    # Declared dead by a peer (our rows were aborted): register again, so what
                    # we start from now on is recoverable.
                    log.warning("instance %s was declared dead; registering again", instance_id)
                    await store.register_instance(instance_id, now=now)
                    await self.executions.rescue.stop_recovered()
                if self.leadership is None or self.leadership.is_leader:
                    await self.executions.recover(stale_before=now - s.instance_stale_after)
                await self._follow_limits(store)
            except YokeError as exc:
                log.warning("heartbeat failed: %s", exc)

    async def _follow_limits(self, store: Store) -> None:
        """Limits changed by a peer (recorded in the control log) apply here from the next
        heartbeat: every instance puts its own caps into the ledger slots it asks for."""
        limits = await recorded_limits(store)
        if limits is None:
            return
        if limits != await self.executions.limits():
            log.info("limits changed by a peer; applying them: %s", limits)
            self.executions.apply_limits(limits)


async def recorded_limits(store: Store) -> Limits | None:
    """The newest limits in the control log, if any: from boot on they win over configuration."""
    from yoke.executions.model import Limits

    recorded = await store.latest_limits()
    return None if recorded is None else Limits.from_json(json.loads(recorded))


async def run_worker(app: App, *, stop: asyncio.Event | None = None) -> None:
    """`yoke worker`: run `app` (its actor worker, executions and services) until `stop` is
    set or the process gets SIGINT/SIGTERM, then shut down in order."""
    import signal

    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    handled: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            handled.append(sig)
    try:
        async with app.running():
            log.info("worker %s running actors %s", app.actors.worker_id, app.actors.registry)
            await stop.wait()
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
