"""`TracedRunner`: a `Runner` (`runner.py`) that gives each `process()` call a span of its own,
around the runner that runs it (inline, or in the tenant's executor process).

The drain knows nothing of it: the runtime hands the drain this runner instead of the plain one
when tracing is on (`traced`), and hands it the plain one otherwise, so tracing off costs a
call nothing. A call run inline has its span as the current one, so the actor's own spans nest
under it; a call sent to an executor is timed from the worker's side.

This module must never import a tracer: it speaks `yoke.tracing`'s verbs.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Collection

from yoke.actors.ctx import CtxHost, InstanceStateCell
from yoke.actors.definitions import ActorDef, Event
from yoke.actors.runner import Done, InlineRunner, Runner
from yoke.tracing import CallTrace, Tracing


def traced(runner: Runner | None, host: CtxHost, tracing: Tracing) -> Runner | None:
    """The runner the drain gets: `runner` (None: the drain's inline one) while tracing is
    off, else it behind a `TracedRunner`."""
    if not tracing.enabled:
        return runner
    return TracedRunner(runner or InlineRunner(host), tracing)


class TracedRunner:
    __slots__ = ("_inner", "_tracing", "sends")

    def __init__(self, inner: Runner, tracing: Tracing) -> None:
        self._inner = inner
        self._tracing = tracing
        self.sends = inner.sends

    def __repr__(self) -> str:
        return f"TracedRunner({self._inner!r})"

    def claimable(self) -> Collection[str] | None:
        return self._inner.claimable()

    def ready(self, tenant: str) -> bool:
        return self._inner.ready(tenant)

    def _begin(
        self, actor: ActorDef, cell: InstanceStateCell, event: Event, start_ns: int | None = None
    ) -> CallTrace:
        return self._tracing.call(
            actor=actor.name,
            instance=cell.ref.instance_id,
            tenant=event.tenant,
            stream=event.stream,
            event_id=event.event_id,
            group=event.group_id,
            attempt=event.attempt,
            start_ns=start_ns,
        )

    def run(self, actor: ActorDef, cell: InstanceStateCell, event: Event) -> Awaitable[None]:
        call = self._begin(actor, cell, event)
        try:
            with call.current():
                work = self._inner.run(actor, cell, event)
        except BaseException as exc:  # ExecutorLost at once
            call.ended(exc)
            raise
        return _awaited(call, work)

    def send(self, actor: ActorDef, cell: InstanceStateCell, event: Event, done: Done) -> bool:
        # The span is made only once the call is sent (a call not sent is `run`, with a span
        # of its own), from the moment it was asked for.
        start_ns = time.time_ns()
        call: CallTrace | None = None
        early: list[BaseException | None] = []  # `done` before the span exists

        def ended(error: BaseException | None) -> None:
            if call is None:
                early.append(error)
            else:
                call.ended(error)
            done(error)

        if not self._inner.send(actor, cell, event, ended):
            return False
        call = self._begin(actor, cell, event, start_ns)
        if early:
            call.ended(early[0])
        return True


async def _awaited(call: CallTrace, work: Awaitable[None]) -> None:
    try:
        with call.current():
            await work
    except Exception as exc:
        call.ended(exc)
        raise
    except BaseException:  # cancelled (the worker stops): not the call's failure
        call.ended(None)
        raise
    call.ended(None)
