"""Brute-force model of the admission core: every decision written as a scan of every start.

It knows no kernel, no heap and no ticket: a start is a plain record with a state, running
counts are recounted from the records each time, and the next pick is the smallest

    (-priority, running in its tenant, its tenant's virtual time, its tenant's tie-break,
     running in its session, arrival)

among the queued starts that fit every cap (a tenant is a session's first segment; a start
charges its tenant `2**32` of virtual time from max(its tag, the system's time), a start that
goes back in line gets it back, and a tenant with nothing queued or running is forgotten).
What the caller of each start is told is recorded once. If this file and `AdmissionCore` disagree,
the core is wrong (or this file is, and then it should be obvious).
"""

from __future__ import annotations

from dataclasses import dataclass

from yoke.executions import Limits

STRIDE = 1 << 32  # the virtual time a start charges a tenant of weight 1


@dataclass
class MStart:
    id: str
    session: str
    workflow: str
    prio: int
    seq: int = -1
    state: str = "logging"  # logging | queued | granting | running | finishing | ended
    at_once: bool = False  # its current grant is its caller's own start that fitted at once
    told: str | None = None  # what its caller was told, once
    stored: str = "QUEUED"  # its status in the store

    @property
    def tenant(self) -> str:
        return self.session.partition("/")[0]


@dataclass
class MTenant:
    tb: int  # its tie-break: fresh when it is made and at each of its starts
    S: int = 0  # its virtual start tag


class AdmissionModel:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.starts: dict[str, MStart] = {}
        self.closing = False
        self._seq = 0
        self.tenants: dict[str, MTenant] = {}
        self.V = 0
        self._tb = 0

    # -- counts, always recounted ------------------------------------------------------------
    def _holding(self) -> list[MStart]:
        return [s for s in self.starts.values() if s.state in ("granting", "running")]

    def _in(self, state: str) -> list[MStart]:
        return [s for s in self.starts.values() if s.state == state]

    def session_running(self, session: str) -> int:
        return sum(1 for s in self._holding() if s.session == session)

    def tenant_running(self, tenant: str) -> int:
        return sum(1 for s in self._holding() if s.tenant == tenant)

    # -- tenants' turns ----------------------------------------------------------------------
    def _join(self, s: MStart) -> None:
        """The start enters the kernel (queued or granted at once): its tenant is known."""
        if s.tenant not in self.tenants:
            self._tb += 1
            self.tenants[s.tenant] = MTenant(tb=self._tb)

    def _charge(self, s: MStart) -> None:
        t = self.tenants[s.tenant]
        seff = max(t.S, self.V)
        self.V = max(self.V, seff)
        t.S = seff + STRIDE
        self._tb += 1
        t.tb = self._tb

    def _refund(self, s: MStart) -> None:
        t = self.tenants[s.tenant]
        t.S = max(0, t.S - STRIDE)

    def _forget(self) -> None:
        held = ("queued", "granting", "running")
        live = {s.tenant for s in self.starts.values() if s.state in held}
        for name in [n for n in self.tenants if n not in live]:
            del self.tenants[name]

    def key(self, s: MStart) -> tuple[int, ...]:
        t = self.tenants[s.tenant]
        return (
            -s.prio,
            self.tenant_running(s.tenant),
            max(t.S, self.V),
            t.tb,
            self.session_running(s.session),
            s.seq,
        )

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
            self._join(s)
            self._charge(s)
            return "grant"
        s.state = "logging"
        return "log"

    def logged(self, s: MStart) -> list[str]:
        """The ids sent to the ledger, in order."""
        s.seq, self._seq = self._seq, self._seq + 1
        self._join(s)
        if not self.closing and not self._in("queued") and self.fits(s):
            s.state, s.at_once = "granting", True
            self._charge(s)
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
            best = min(ready, key=self.key)
            best.state, best.at_once = "granting", False
            self._charge(best)
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
        self._refund(s)
        return self._decide(s, pump=False)

    def finishing(self, s: MStart) -> list[str]:
        """Its end is being recorded: its slot goes to the next picks at once (they ride with
        the end, which the store writes first)."""
        s.state = "finishing"
        self._forget()
        return self.pump()

    def finished(self, s: MStart) -> None:
        s.state = "ended"
        self._forget()

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
        self._forget()
