"""`ActorCtx`: what `process(ctx, event)` may do, and the instance state behind `ctx.state`.

`ctx.state.update(fn)` is the only safe shared state between concurrent `process()` calls of
one instance: inside one worker the updates of an instance are serialised by a lock, and the
write itself is a compare-and-set on the state's version under the owner's epoch, so an update
is never lost to another process either, and a worker that lost the instance cannot write.
`fn` may therefore run more than once; it must be a pure function of the state it is given.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from yoke.actors.definitions import encode
from yoke.errors import BadType, BadValue, Conflict

if TYPE_CHECKING:  # the worker's side only (`InstanceStateCell`): an executor has no store
    from yoke.actors.protocol import ActorStore
    from yoke.store.actor_records import InstanceRef, InstanceState


class Fenced(Conflict):
    """This worker no longer owns the instance (another worker took it over): nothing changed."""

    title = "Instance owned by another worker"


class CtxHost(Protocol):
    """What a ctx needs from the runtime that runs it."""

    async def append(self, stream: str, data: Any, *, tenant: str) -> int: ...

    async def schedule(self, stream: str, data: Any, *, tenant: str, fire_at: float) -> int: ...

    def wall(self) -> float: ...


class InstanceStateCell:
    """The cached state of one owned instance; loaded once, then kept current by its updates."""

    __slots__ = ("_lock", "_store", "epoch", "loaded", "ref", "state", "version", "worker_id")

    def __init__(self, store: ActorStore, ref: InstanceRef, *, worker_id: str, epoch: int):
        self._store = store
        self.ref = ref
        self.worker_id = worker_id
        self.epoch = epoch
        self.state: dict[str, Any] = {}
        self.version = 0
        self.loaded = False
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"InstanceStateCell({self.ref.actor}/{self.ref.instance_id}, v={self.version})"

    async def load(self) -> None:
        async with self._lock:
            if not self.loaded:
                await self._reload()

    def prime(self, row: InstanceState) -> None:
        """Take a state read for several instances at once (the drain does that for the
        instances a claim meets first), unless loaded already; a row that shows another owner
        is left for `load()` to report."""
        if not self.loaded and row.worker_id == self.worker_id and row.epoch == self.epoch:
            self._set(row)

    def _set(self, row: InstanceState) -> None:
        value = json.loads(row.state)
        self.state = value if isinstance(value, dict) else {}
        self.version = row.version
        self.loaded = True

    async def _reload(self) -> None:
        row = await self._store.get_state(self.ref)
        if row is None:
            raise Fenced(f"instance {self.ref.actor}/{self.ref.instance_id} does not exist")
        if row.worker_id != self.worker_id or row.epoch != self.epoch:
            raise Fenced(
                f"instance {self.ref.actor}/{self.ref.instance_id} is owned by "
                f"{row.worker_id} (epoch {row.epoch}), not this worker"
            )
        self._set(row)

    async def update(self, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        async with self._lock:
            if not self.loaded:
                await self._reload()
            while True:
                new = fn(copy.deepcopy(self.state))
                if not isinstance(new, dict):
                    raise BadType(
                        f"state.update's function must return a dict, not {type(new).__name__}"
                    )
                try:
                    text = encode(new)
                except (TypeError, ValueError) as exc:
                    raise BadValue(f"actor state must be JSON-serialisable: {exc}") from None
                ok = await self._store.update_state(
                    self.ref,
                    state=text,
                    expected_version=self.version,
                    worker_id=self.worker_id,
                    epoch=self.epoch,
                )
                if ok:
                    self.state, self.version = json.loads(text), self.version + 1
                    return copy.deepcopy(self.state)
                await self._reload()  # someone else wrote (or we lost the instance: Fenced)

    async def offer(self, expected_version: int, new: dict[str, Any]) -> bool:
        """A state computed elsewhere (in an executor process) from version
        `expected_version`: written if that is still the version here and in the store, under
        the same lock and compare-and-set as `update`. Otherwise nothing is written and the
        cell holds the current state after (reloaded if the store had moved on)."""
        try:
            text = encode(new)
        except (TypeError, ValueError) as exc:
            raise BadValue(f"actor state must be JSON-serialisable: {exc}") from None
        async with self._lock:
            if not self.loaded:
                await self._reload()
            if expected_version != self.version:
                return False
            ok = await self._store.update_state(
                self.ref,
                state=text,
                expected_version=self.version,
                worker_id=self.worker_id,
                epoch=self.epoch,
            )
            if ok:
                self.state, self.version = json.loads(text), self.version + 1
                return True
            await self._reload()  # someone else wrote (or we lost the instance: Fenced)
            return False


class StateHandle:
    """`ctx.state`: `get()` the current state (a copy), `await update(fn)` atomically."""

    __slots__ = ("_cell",)

    def __init__(self, cell: InstanceStateCell) -> None:
        self._cell = cell

    def get(self) -> dict[str, Any]:
        return copy.deepcopy(self._cell.state)

    async def update(self, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        if not callable(fn):
            raise BadType("state.update needs a function state -> new state")
        return await self._cell.update(fn)

    def __repr__(self) -> str:
        return f"StateHandle(version={self._cell.version})"


class ActorCtx:
    """One `process()` call's view: its instance, tenant, state, and ways to emit events."""

    __slots__ = ("_host", "actor", "instance_id", "state", "tenant")

    def __init__(
        self, *, host: CtxHost, actor: str, instance_id: str, tenant: str, state: StateHandle
    ) -> None:
        self._host = host
        self.actor = actor
        self.instance_id = instance_id
        self.tenant = tenant
        self.state = state

    def __repr__(self) -> str:
        return (
            f"ActorCtx(actor={self.actor!r}, instance_id={self.instance_id!r}, "
            f"tenant={self.tenant!r})"
        )

    async def emit(self, stream: str, data: Any) -> int:
        """Append an event to `stream` (same tenant); returns its event id."""
        return await self._host.append(stream, data, tenant=self.tenant)

    async def schedule(
        self,
        stream: str,
        data: Any,
        *,
        at: float | datetime | None = None,
        delay: float | None = None,
    ) -> int:
        """Fire `data` into `stream` at `at` (epoch seconds or an aware datetime) or after
        `delay` seconds; exactly once, whichever worker fires it."""
        return await self._host.schedule(
            stream, data, tenant=self.tenant, fire_at=fire_time(self._host.wall(), at, delay)
        )


# The latest time a timer may fire (9999-12-31, epoch seconds): its milliseconds fit the
# stores' 64-bit integer, and every datetime can say it.
MAX_FIRE_AT = 253_402_300_799.0


def fire_time(now: float, at: float | datetime | None, delay: float | None) -> float:
    """When a timer fires, in epoch seconds: `BadValue` for anything a store cannot keep (NaN,
    an infinity, before 1970 or after `MAX_FIRE_AT`), so a bad time fails its call, never its
    store write."""
    if (at is None) == (delay is None):
        raise BadValue("schedule needs exactly one of at= or delay=")
    if delay is not None:
        if isinstance(delay, bool) or not isinstance(delay, int | float) or not delay >= 0:
            raise BadValue(f"delay must be a number of seconds >= 0, got {delay!r}")
        when = now + float(delay)
    elif isinstance(at, datetime):
        if at.tzinfo is None:
            raise BadValue("at must be an aware datetime (with tzinfo)")
        when = at.timestamp()
    elif isinstance(at, bool) or not isinstance(at, int | float):
        raise BadType("at must be epoch seconds or an aware datetime")
    else:
        when = float(at)
    if not 0.0 <= when <= MAX_FIRE_AT:  # False for NaN too
        raise BadValue(f"a timer must fire between 1970 and the year 9999, got {when!r}")
    return when
