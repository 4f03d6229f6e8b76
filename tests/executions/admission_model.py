"""Brute-force model of the admission core: every decision written as a scan of every start.

It knows no kernel, no heap and no ticket: a start is a plain record with a state, running
counts are recounted from the records each time, and the next pick is the smallest
(-priority, running in its session, arrival) among the queued starts that fit every cap. What
the caller of each start is told is recorded once. If this file and `AdmissionCore` disagree,
the core is wrong (or this file is, and then it should be obvious).
"""

from __future__ import annotations

from dataclasses import dataclass

from yoke.executions import Limits


@dataclass
class MStart:
    id: str
    session: str
    workflow: str
    prio: int
    seq: int = -1
    state: str = "logging"  # logging | queued | granting | running | ended
    at_once: bool = False  # its current grant is its caller's own start that fitted at once
    told: str | None = None  # what its caller was told, once
    stored: str = "QUEUED"  # its status in the store


class AdmissionModel:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.starts: dict[str, MStart] = {}
        self.closing = False
        self._seq = 0

    # -- counts, always recounted ------------------------------------------------------------
    def _holding(self) -> list[MStart]:
        return [s for s in self.starts.values() if s.state in ("granting", "running")]

    def _in(self, state: str) -> list[MStart]:
        return [s for s in self.starts.values() if s.state == state]

    def session_running(self, session: str) -> int:
        return sum(1 for s in self._holding() if s.session == session)

    def fits(self, s: MStart) -> bool:
        lim = self.limits
        held = self._holding()
        if lim.max_running is not None and len(held) >= lim.max_running:
            return False
        per = lim.max_running_per_session
        if per is not None and sum(1 for h in held if h.session == s.session) >= per:
            return False
        cap = lim.workflow_cap(s.workflow)
        return cap is None or sum(1 for h in held if h.workflow == s.workflow) < cap

    def _tell(self, s: MStart, what: str) -> None:
        if s.told is None:
            s.told = what

    # -- events ------------------------------------------------------------------------------
    def arrive(self, s: MStart) -> str:
        """ "grant" (fits at once, logged with its grant) or "log"."""
        fits = not self._in("logging") and not self._in("queued") and self.fits(s)
        self.starts[s.id] = s
        if fits:
            s.seq, self._seq = self._seq, self._seq + 1
            s.state, s.at_once = "granting", True
            return "grant"
        s.state = "logging"
        return "log"

    def logged(self, s: MStart) -> list[str]:
        """The ids sent to the ledger, in order."""
        s.seq, self._seq = self._seq, self._seq + 1
        if not self.closing and not self._in("queued") and self.fits(s):
            s.state, s.at_once = "granting", True
            return [s.id]
        s.state = "queued"
        return self._decide(s, pump=True)

    def _decide(self, s: MStart, *, pump: bool) -> list[str]:
        if self.closing:
            self._end(s, "refused: shutting down")
            return []
        picks = self.pump() if pump else []
        if s.state != "queued":
            return picks
        lim = self.limits
        over = lim.max_queued is not None and len(self._in("queued")) > lim.max_queued
        if s.told is None and (lim.on_limit == "reject" or over):
            self._end(s, "refused: limit", stored="REFUSED")
        else:
            self._tell(s, "queued")
        return picks

    def pump(self) -> list[str]:
        picks: list[str] = []
        if self.closing:
            return picks
        while True:
            ready = [s for s in self._in("queued") if self.fits(s)]
            if not ready:
                return picks
            best = min(ready, key=lambda s: (-s.prio, self.session_running(s.session), s.seq))
            best.state, best.at_once = "granting", False
            picks.append(best.id)

    def granted(self, s: MStart, outcome: str) -> list[str]:
        if outcome == "GRANTED":
            s.state, s.stored = "running", "GRANTED"
            self._tell(s, "granted")
            return []
        if outcome == "GONE":
            self._end(s, "ended")
            return []
        return self._back_in_line(s)

    def failed(self, s: MStart) -> list[str]:
        if s.at_once and s.told is None:
            self._end(s, "refused: the store failed", stored="REFUSED")
            return []
        return self._back_in_line(s)

    def _back_in_line(self, s: MStart) -> list[str]:
        if s.stored != "QUEUED":  # cancelled while it was being granted
            self._end(s, "ended")
            return []
        s.state = "queued"
        return self._decide(s, pump=False)

    def finished(self, s: MStart) -> None:
        s.state = "ended"

    def cancel(self, s: MStart) -> None:
        s.stored = "CANCELLED"
        if s.state == "queued":
            self._end(s, "ended")

    def shutdown(self) -> None:
        self.closing = True
        for s in sorted(self._in("queued"), key=lambda s: (-s.prio, s.seq)):
            self._end(s, "refused: shutting down", stored="REFUSED")

    def _end(self, s: MStart, told: str, *, stored: str | None = None) -> None:
        s.state = "ended"
        if stored is not None and s.stored == "QUEUED":
            s.stored = stored
        self._tell(s, told)
