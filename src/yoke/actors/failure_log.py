"""One log line per failed `process()` call, at most `per_window` a window per actor.

A failing actor can fail thousands of times a minute; each line says which actor, instance,
attempt and error, so an operator sees what fails without a line per event drowning the rest:
past `per_window` lines in `window` seconds an actor's failures are counted, and the count is
written with the next line after the window. The traceback goes out at DEBUG only. This
module must never change what happens to the event: it only writes.
"""

from __future__ import annotations

import logging

from yoke.store.actor_records import InstanceRef

log = logging.getLogger("yoke.actors.drain")


class FailureLog:
    def __init__(self, *, per_window: int = 5, window: float = 60.0) -> None:
        self.per_window = per_window
        self.window = window
        self._windows: dict[str, tuple[float, int, int]] = {}  # actor: (start, written, held)

    def __repr__(self) -> str:
        return f"FailureLog(per_window={self.per_window}, actors={len(self._windows)})"

    def failed(
        self,
        ref: InstanceRef,
        attempt: int,
        error: BaseException,
        *,
        retry_in: float | None,
        now: float,
    ) -> None:
        start, written, held = self._windows.get(ref.actor, (now, 0, 0))
        if now - start >= self.window:
            start, written = now, 0
        if written >= self.per_window:
            self._windows[ref.actor] = (start, written, held + 1)
            return
        then = "now a dead letter" if retry_in is None else f"retry in {retry_in:.2f}s"
        more = f" ({held} more failures of this actor were not logged)" if held else ""
        log.warning(
            "actor %r instance %r (tenant %r) failed, attempt %d, %s: %s: %s%s",
            ref.actor,
            ref.instance_id,
            ref.tenant,
            attempt,
            then,
            type(error).__name__,
            error,
            more,
        )
        log.debug("traceback of that failure", exc_info=error)
        self._windows[ref.actor] = (start, written + 1, 0)
