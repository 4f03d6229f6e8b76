"""Portals: an app's own ingress loops, `@app.portal` on `async def start(ctx)`.

The actors specification (docs/decisions.md): "Portals are not scheduled: start() loops run
independently." A portal is the app's code (not a tenant's): it runs in the worker process,
reads from wherever it likes (a socket, a broker, a poll) and appends events with
`ctx.append(stream, data, tenant=...)`, which wakes the tenants they reach like any append.
`ctx.stopping` is set when the worker shuts down (or the portal must move): a well-behaved loop
returns then; one that does not is cancelled after the worker's shutdown timeout.

This module holds what an app defines (`PortalRegistry`, `PortalCtx`). The worker runs them
with `portal_runner.PortalRunner`: by default a portal runs on exactly one live worker at a
time, the holder of the lease `portal:<name>`, renewed every heartbeat; it moves when its
worker stops (the lease is released at once) or goes stale (its lease expires after
`YOKE_WORKER_STALE_SECS`). `per_worker=True` runs one on every worker, with no lease.

This module must never name a store backend, and imports nothing of the worker's side (an
executor process that imports an app with portals pays for the definitions only).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from yoke.errors import BadType, BadValue
from yoke.store.text import check_text


class Appender(Protocol):
    async def append(self, stream: str, data: Any, *, tenant: str = "default") -> int: ...

    async def append_many(
        self, stream: str, items: Iterable[Any], *, tenant: str = "default"
    ) -> list[int]: ...


class PortalCtx:
    """What `start(ctx)` gets: where to append, and a flag for when to stop."""

    __slots__ = ("_host", "name", "run", "stopping", "worker_id")

    def __init__(self, *, host: Appender, name: str, worker_id: str, run: int) -> None:
        self._host = host
        self.name = name
        self.worker_id = worker_id
        self.run = run  # 1 for the first start on this worker, then one more per restart
        self.stopping = asyncio.Event()  # set on shutdown, or when the portal must move

    def __repr__(self) -> str:
        return f"PortalCtx({self.name!r}, worker={self.worker_id!r}, run={self.run})"

    async def append(self, stream: str, data: Any, *, tenant: str = "default") -> int:
        """Append an event (fanned out, its tenants woken); returns its event id."""
        return await self._host.append(stream, data, tenant=tenant)

    async def append_many(
        self, stream: str, items: Iterable[Any], *, tenant: str = "default"
    ) -> list[int]:
        """Append many events to one stream of one tenant, in one transaction."""
        return await self._host.append_many(stream, items, tenant=tenant)


Start = Callable[[PortalCtx], Coroutine[Any, Any, None]]


@dataclass(frozen=True, kw_only=True, slots=True)
class PortalDef:
    name: str
    per_worker: bool
    start: Start = field(repr=False)


class PortalRegistry:
    def __init__(self) -> None:
        self._portals: dict[str, PortalDef] = {}

    def __len__(self) -> int:
        return len(self._portals)

    def __iter__(self) -> Any:
        return iter(self._portals.values())

    def __repr__(self) -> str:
        return f"PortalRegistry({sorted(self._portals)})"

    def portal(
        self, name: str | None = None, *, per_worker: bool = False
    ) -> Callable[[Start], Start]:
        if name is not None and not isinstance(name, str):
            raise BadType("a portal's name must be a str")
        if not isinstance(per_worker, bool):
            raise BadType("per_worker must be a bool")

        def register(fn: Start) -> Start:
            if not inspect.iscoroutinefunction(fn):
                raise BadType("a portal must be an `async def start(ctx)`")
            portal_name = check_text(name or fn.__name__, "portal name")
            if portal_name in self._portals:
                raise BadValue(f"portal {portal_name!r} is defined twice")
            self._portals[portal_name] = PortalDef(
                name=portal_name, per_worker=per_worker, start=fn
            )
            return fn

        return register
