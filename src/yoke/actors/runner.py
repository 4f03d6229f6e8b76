"""How one `process(ctx, event)` call is run: the seam between the queue drain and tenant code.

The drain claims, orders, retries and completes; a `Runner` only runs a call and says whose
calls it can run now. Two runners exist:

* `InlineRunner` (executor mode `inline`, the default): `process()` runs in the worker's own
  event loop, as a coroutine of the drain's runner task. Every tenant is always runnable.
* `ExecutorRunner` (`yoke.actors.executor.pool`, mode `process`): the call is sent to the
  tenant's own executor process. A tenant is runnable only while its executor is READY.

A runner that can (`sends`) also takes a call without a coroutine: `send` hands it over and
calls `done` when it ended, with None or what `run` would have raised. The drain uses it for
the calls it can start at once, so that the results of an executor's frame end their calls in
one pass, with no future and no task wake-up per call.

A runner knows nothing of claims, rows or epochs. What it tells the drain is in the outcome
of `run`: it returns (process() returned), raises what process() raised (`RemoteError` when
it raised in another process), or raises `ExecutorLost`: the call never ran to an end because
its executor is not running or died under it. `charge` says whether the call is to blame: it
was the one call its executor was running when it died (or it ran past its deadline), and
the drain counts a crash attempt on it; otherwise the drain puts the row back at no cost.

This module must never touch the store or a kernel.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import Protocol

from yoke.actors.ctx import ActorCtx, CtxHost, InstanceStateCell, StateHandle
from yoke.actors.definitions import ActorDef, Event


class ExecutorLost(Exception):
    """A call that did not run to an end because its executor is gone (or not running)."""

    def __init__(self, reason: str, *, charge: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.charge = charge


class RemoteError(Exception):
    """What `process()` raised inside an executor process, as text (`Type: message`)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def describe(error: BaseException) -> str:
    """The text a failed attempt records: the same for a call run inline or remotely."""
    if isinstance(error, RemoteError):
        return error.text
    return f"{type(error).__name__}: {error}"


Done = Callable[[BaseException | None], None]  # how a sent call ended: None, or what it raised


class Runner(Protocol):
    sends: bool  # whether `send` may hand calls over (else it always answers False)

    def claimable(self) -> Collection[str] | None:
        """The tenants whose events may be claimed now; None: every tenant."""
        ...

    def ready(self, tenant: str) -> bool:
        """Whether a call of `tenant` can be run now."""
        ...

    def run(self, actor: ActorDef, cell: InstanceStateCell, event: Event) -> Awaitable[None]:
        """Run `actor.process` on `event` for the instance whose state `cell` holds: what the
        drain awaits (a coroutine or a future). It may raise `ExecutorLost` at once."""
        ...

    def send(self, actor: ActorDef, cell: InstanceStateCell, event: Event, done: Done) -> bool:
        """Start the call now and tell `done` how it ended; False if it was not sent (then
        `run` it)."""
        ...


class InlineRunner:
    """`process()` in this process: what yoke does without executor processes."""

    __slots__ = ("_host",)
    sends = False

    def __init__(self, host: CtxHost) -> None:
        self._host = host

    def __repr__(self) -> str:
        return "InlineRunner()"

    def claimable(self) -> None:
        return None

    def ready(self, tenant: str) -> bool:
        return True

    def run(self, actor: ActorDef, cell: InstanceStateCell, event: Event) -> Awaitable[None]:
        ref = cell.ref
        ctx = ActorCtx(
            host=self._host,
            actor=actor.name,
            instance_id=ref.instance_id,
            tenant=ref.tenant,
            state=StateHandle(cell),
        )
        return actor.process(ctx, event)

    def send(self, actor: ActorDef, cell: InstanceStateCell, event: Event, done: Done) -> bool:
        return False  # process() runs in the drain's runner tasks
