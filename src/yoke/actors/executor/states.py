"""The states of one executor's life and the only moves between them; why a life ended.

    SPARE ----assign----> STARTING ----ready----> READY ----stop----> DRAINING
      |                      |                      |                    |
      +----------------------+------- die ----------+--------------------+
                                        |
                                      DYING ----its tree ended----> STOPPED | FAILED

A warm spare is SPARE from its birth, a cold executor STARTING. DYING is the time between its
death being decided (no call is sent to it any more, its calls in flight are the ones it took
down) and its exit being seen and accounted for; it is still live then, so that no second
executor of its tenant starts before its failure counts. A life never goes back: a restart is
a new `ExecutorProcess`, which alone moves its state (`ExecutorProcess._move`); a move not in
`MOVES` is a bug in yoke, and raises `IllegalTransition`. This module is plain data: no I/O.
"""

from __future__ import annotations

from enum import Enum


class ExecutorState(Enum):
    SPARE = "SPARE"  # a warm spare: bound to no tenant yet
    STARTING = "STARTING"  # spawned or being bound, not yet ready
    READY = "READY"  # its tenant's calls are sent to it
    DRAINING = "DRAINING"  # asked to stop: nothing new is sent, its calls in flight finish
    DYING = "DYING"  # its end is decided: its tree is being killed, its exit awaited
    STOPPED = "STOPPED"  # ended as asked
    FAILED = "FAILED"  # boot failed, crashed, broke the protocol, ran past a deadline, killed


class Ending(Enum):
    """Why a life ends, decided when it starts to (DRAINING or DYING)."""

    ASKED = "asked"  # the worker stopped it (idle, shutdown): STOPPED, nothing charged
    KILLED = "killed"  # the worker killed it (a boot past its deadline): FAILED
    FAULT = "fault"  # its own doing (an exit, a fault, a bad frame, an OOM kill, a call past
    # its deadline): FAILED; the calls it took down may have done it
    OUTSIDE = "outside"  # a FAULT whose exit was a SIGKILL not its own doing: FAILED, the
    # calls in flight suspected of nothing


S = ExecutorState
LIVE = frozenset({S.SPARE, S.STARTING, S.READY, S.DRAINING, S.DYING})
GOING = frozenset({S.DYING, S.STOPPED, S.FAILED})  # its end is decided
MOVES: dict[ExecutorState, frozenset[ExecutorState]] = {
    S.SPARE: frozenset({S.STARTING, S.DYING}),
    S.STARTING: frozenset({S.READY, S.DYING}),
    S.READY: frozenset({S.DRAINING, S.DYING}),
    S.DRAINING: frozenset({S.DYING}),
    S.DYING: frozenset({S.STOPPED, S.FAILED}),
    S.STOPPED: frozenset(),
    S.FAILED: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A move of an executor's state that its life does not have: a bug in yoke."""


def moved(state: ExecutorState, to: ExecutorState, who: str) -> ExecutorState:
    """`to`, if `state` may move there; `IllegalTransition` otherwise."""
    if to not in MOVES[state]:
        raise IllegalTransition(f"{who}: {state.value} -> {to.value} is not a move of its life")
    return to


__all__ = ["GOING", "LIVE", "MOVES", "Ending", "ExecutorState", "IllegalTransition", "moved"]
