"""`InFlight`: the calls one executor process runs now, apart from the process itself.

It owns the calls in dispatch order (each told once how it ended), the `run` message a call
is sent as, the checks on the ctx calls the executor makes for them, the deadline of the
oldest call (one timer, re-armed, not one per call) and the state versions the executor
holds (an LRU of `KNOWN_STATES` instances, so an unchanged state is not sent again).
`ExecutorProcess` (`process.py`) holds one and decides what a death means for these calls;
this module does no I/O but the frames it adds to the `Outbox`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from yoke.actors.ctx import Fenced, InstanceStateCell
from yoke.actors.definitions import Event
from yoke.actors.executor.calls import CallRefused
from yoke.actors.executor.protocol import Outbox, ProtocolError
from yoke.actors.runner import Done, RemoteError
from yoke.clock import Clock

KNOWN_STATES = 10_000  # instances whose state version is tracked per executor (LRU)
MAX_OUTSTANDING_CALLS = 4096  # ctx calls of one executor being served at once, at most
OPS = ("cas", "emit", "schedule")  # the ctx calls an executor may make


class Call:
    __slots__ = ("call_id", "cell", "done", "event_id", "started")

    def __init__(
        self, call_id: int, cell: InstanceStateCell, event_id: int, done: Done, started: float
    ) -> None:
        self.call_id = call_id
        self.cell = cell
        self.event_id = event_id  # the queue row's id (`Event.id`)
        self.done: Done | None = done  # None once told (a call ends once)
        self.started = started

    def end(self, error: BaseException | None) -> None:
        done, self.done = self.done, None
        if done is not None:
            done(error)


class InFlight:
    """Calls sent and not yet ended, oldest first; `overdue` is told of the oldest once it
    ran past `timeout` seconds."""

    def __init__(self, *, clock: Clock, timeout: float, overdue: Callable[[Call], None]) -> None:
        self._clock = clock
        self._timeout = timeout
        self._overdue = overdue
        self._calls: dict[int, Call] = {}  # in dispatch order
        self._known: dict[tuple[str, str], int] = {}  # instance -> state version it holds
        self._ids = itertools.count(1)
        self._watchdog: asyncio.TimerHandle | None = None
        self._closed = False
        self._serving = 0  # ctx calls being served

    def __len__(self) -> int:
        return len(self._calls)

    def __repr__(self) -> str:
        return f"InFlight(calls={len(self._calls)}, known={len(self._known)})"

    def send(
        self, out: Outbox, actor: str, cell: InstanceStateCell, event: Event, done: Done
    ) -> None:
        """Add the `run` of one call to `out` (its state only if the executor does not hold
        that version already)."""
        key = (actor, cell.ref.instance_id)
        known = self._known.get(key)
        if known is None and len(self._known) >= KNOWN_STATES:
            old = next(iter(self._known))  # the oldest entry: its state is sent again if needed
            del self._known[old]
            out.add("forget", list(old))
        state = None if known == cell.version else cell.state
        self._known[key] = cell.version
        call_id = next(self._ids)
        self._calls[call_id] = Call(call_id, cell, event.id, done, self._clock.monotonic())
        if self._watchdog is None:
            self._arm(self._timeout)
        out.add(
            "run",
            [
                call_id,
                actor,
                cell.ref.instance_id,
                [
                    event.id,
                    event.event_id,
                    event.stream,
                    event.data,
                    event.group_id,
                    event.attempt,
                    event.appended_at,
                ],
                cell.version,
                state,
            ],
        )

    def ended(self, done: list[Any]) -> None:
        """The `done` items of one frame: each call told how it ended. The whole frame is
        checked before any call is told: a bad item fails the executor with every call of the
        frame still in flight (each told once, lost)."""
        calls = self._calls
        ended = [(call_id, outcome(error)) for call_id, error in done]
        ids = {call_id for call_id, _ in ended}
        if len(ids) != len(ended) or not all(call_id in calls for call_id in ids):
            raise ProtocolError("a done for a call that is not in flight (or twice)")
        for call_id, error in ended:
            calls.pop(call_id).end(error)

    def requests(self, items: Iterable[Any]) -> Iterator[tuple[Any, Call, str, Any]]:
        """The ctx calls of one frame, each checked as it comes (made by a call in flight, at
        most `MAX_OUTSTANDING_CALLS` served at once, a known op) and counted until `served`."""
        for req_id, call_id, op, args in items:
            call = self._calls.get(call_id)
            if call is None:
                raise ProtocolError(f"a ctx call of call {call_id!r}, which is not in flight")
            if self._serving >= MAX_OUTSTANDING_CALLS:
                raise ProtocolError(f"more than {MAX_OUTSTANDING_CALLS} ctx calls at once")
            if op not in OPS:
                raise CallRefused(f"no call {op!r}")
            self._serving += 1
            yield req_id, call, str(op), args

    def served(self) -> None:
        """A ctx call of `requests` was answered (or failed)."""
        self._serving -= 1

    def holds(self, call: Call) -> None:
        """The executor holds the state `call` has now (it wrote it)."""
        cell = call.cell
        self._known[(str(cell.ref.actor), cell.ref.instance_id)] = cell.version

    def close(self) -> list[Call]:
        """No deadline from now on (the executor is going); the calls in flight now."""
        self._closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        return list(self._calls.values())

    def lose(
        self, calls: list[Call], *, blame: Call | None, crashed: bool
    ) -> tuple[list[Call], Call | None]:
        """The executor is gone: `calls` (those in flight when it went, from `close`) and any
        still here, all forgotten here, and the one to blame for it: `blame`, or the call that
        ran alone when it crashed on its own. None of them is told anything yet."""
        calls = calls + [c for c in self._calls.values() if c not in calls]
        self._calls.clear()
        if crashed and blame is None and len(calls) == 1:
            blame = calls[0]  # it ran alone: the crash is its doing
        return calls, blame

    def _arm(self, delay: float) -> None:
        self._watchdog = asyncio.get_running_loop().call_later(max(0.0, delay), self._check)

    def _check(self) -> None:
        self._watchdog = None
        if not self._calls or self._closed:
            return
        oldest = next(iter(self._calls.values()))
        late = self._clock.monotonic() - oldest.started - self._timeout
        if late < 0:
            self._arm(-late)
            return
        self._overdue(oldest)


def settle(fut: asyncio.Future[None], error: BaseException | None) -> None:
    if fut.done():
        return
    if error is None:
        fut.set_result(None)
    else:
        fut.set_exception(error)


def outcome(error: Any) -> Exception | None:
    """A `done` item's error (None, or [kind, text]) as what the call raised."""
    if error is None:
        return None
    kind, text = error
    return Fenced(str(text)) if kind == "fenced" else RemoteError(str(text))
