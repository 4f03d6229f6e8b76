"""`ActorRuntime`: the actors of one app, their stream appends, and the services that run them.

`App` owns one and delegates `app.actor(...)`, `app.append(...)` and, inside
`async with app.running():`, `runtime.running(store)`: the worker registers and takes orphan
instances over, then the drain, the timer dispatch, the heartbeat and the NOTIFY listener run
as tasks of one TaskGroup until the block ends. On exit nothing new is claimed, running calls
get `shutdown_timeout`, completions are written, and the worker gives its instances up.

This module must never name a store backend and reads time only through its `Clock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any

from yoke.actors.ctx import fire_time
from yoke.actors.definitions import ActorRegistry, Backoff, Process, Queue, encode
from yoke.actors.drain import DrainConfig, DrainStats, QueueDrainScheduler
from yoke.actors.inspection import DEAD_LETTERS_SHOWN, ActorInspector, InstanceView
from yoke.actors.metrics import ActorMetrics, app_registry
from yoke.actors.protocol import ActorStore
from yoke.actors.settings import ActorSettings
from yoke.actors.timers import TimerDispatch, TimerStats
from yoke.actors.workers import WorkerHeartbeat
from yoke.clock import Clock, SystemClock
from yoke.errors import BadType, NotRunning, YokeError
from yoke.retry import RetryPolicy
from yoke.store.actor_records import NewTimer, WorkerRow

log = logging.getLogger("yoke.actors")


class ActorRuntime:
    def __init__(
        self,
        *,
        settings: ActorSettings | None = None,
        clock: Clock | None = None,
        metrics_registry: Any | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.registry = ActorRegistry()
        # How the drain, the timers and the heartbeat wait out an unavailable store.
        self.retry = retry or RetryPolicy()
        self.settings = settings or ActorSettings.from_env()
        self._clock = clock or SystemClock()
        # The actors specification's metrics, on this app's own registry (`metrics.registry`)
        # unless one is given.
        self.metrics = ActorMetrics(
            metrics_registry if metrics_registry is not None else app_registry()
        )
        self._store: ActorStore | None = None
        # What the HTTP API and the metrics scrape read (`GET /v1/actors`, `/v1/workers`...).
        self.inspect = ActorInspector(
            registry=self.registry,
            store=self._require,
            clock=self._clock,
            stale_after=self.settings.stale_after,
        )
        self._drain: QueueDrainScheduler | None = None
        self._timers: TimerDispatch | None = None
        self._heartbeat: WorkerHeartbeat | None = None

    def __repr__(self) -> str:
        state = "running" if self._drain is not None else "idle"
        return (
            f"ActorRuntime({state}, worker_id={self.worker_id!r}, actors={self.registry.names()})"
        )

    @property
    def worker_id(self) -> str:
        return self.settings.worker_id

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

    def attach(self, store: ActorStore) -> None:
        """Use `store` for appends and lookups (the App calls this when it opens its store)."""
        self._store = store

    def detach(self) -> None:
        self._store = None

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

    async def append_many(
        self, stream: str, items: Iterable[Any], *, tenant: str = "default"
    ) -> list[int]:
        """Append many events to one stream in one transaction (the fast path)."""
        store = self._require()
        events = self.registry.new_events(stream, items, tenant=tenant)
        if not events:
            return []
        owner = self.worker_id if self._drain is not None else None
        ids = await store.append_events(events, owner=owner, now=self._clock.wall())
        if self._drain is not None:
            self._drain.wake()
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
        timers = [
            NewTimer(tenant=tenant, stream=stream, data=encode(data), fire_at_ms=round(at * 1000))
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
        return await self._require().list_workers()

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
                poll_interval=s.poll_interval,
                retry=self.retry,
            ),
        )
        timers = TimerDispatch(
            store=st,
            registry=self.registry,
            clock=self._clock,
            owner=lambda: s.worker_id,
            on_fired=drain.wake,
            poll_interval=s.timer_poll_interval,
            retry=self.retry,
        )
        heartbeat = WorkerHeartbeat(
            store=st,
            worker_id=s.worker_id,
            clock=self._clock,
            heartbeat_interval=s.heartbeat_interval,
            stale_after=s.stale_after,
            on_takeover=drain.wake,
            metrics=self.metrics,
            retry=self.retry,
        )

        def on_rows() -> None:  # a NOTIFY: rows for us, or ownerless instances to take
            drain.wake()
            heartbeat.poke()

        await heartbeat.boot()
        self._drain, self._timers, self._heartbeat = drain, timers, heartbeat
        body_error: BaseException | None = None
        try:
            async with asyncio.TaskGroup() as tg:
                tasks = [
                    tg.create_task(drain.run(), name="yoke-actor-drain"),
                    tg.create_task(timers.run(), name="yoke-timer-dispatch"),
                    tg.create_task(heartbeat.run(), name="yoke-worker-heartbeat"),
                    tg.create_task(
                        st.listen_actor_wakeups(on_rows, timers.wake), name="yoke-actor-listen"
                    ),
                ]
                try:
                    yield self
                except BaseException as exc:
                    body_error = exc
                    raise
                finally:
                    await drain.shutdown(s.shutdown_timeout)
                    for t in tasks:
                        t.cancel()
        except BaseExceptionGroup as group:
            # The caller's own exception comes back as itself, not wrapped in a group.
            if body_error is not None and group.exceptions == (body_error,):
                raise body_error from body_error.__cause__
            raise
        finally:
            self._drain = self._timers = self._heartbeat = None
            try:
                await heartbeat.stop()
            except YokeError as exc:
                log.warning("could not release this worker's instances: %s", exc)
