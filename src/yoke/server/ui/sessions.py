"""Browser sessions of the dashboard: a bearer token traded once for an HttpOnly cookie.

The login form takes the same token as the API (`TokenBook.lookup`); the server keeps the
session (principal, CSRF token, expiry) in memory and hands the browser only a random id, in a
cookie that is HttpOnly (no script reads it) and SameSite=Strict (no other site's page sends
it). A state-changing dashboard request must also carry the session's CSRF token (a form field
or the `X-CSRF-Token` header htmx adds) and, when the browser says where it comes from, an
`Origin` of this very host. Without a tokens file every caller is the local admin; a session is
still made, only to bind the CSRF token.

Memory is bounded: at most `per_principal` sessions of one principal (its oldest dropped first,
so a principal logging in by the thousand only logs itself out) and `max_sessions` in all (the
oldest dropped first); expired sessions are dropped as new ones are made. A restart forgets
them all (people log in again). This module must never decide what a principal may do.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from http.cookies import SimpleCookie

from starlette.types import Scope

from yoke.errors import Forbidden
from yoke.executions import Principal

COOKIE = "yoke_session"
SAFE_METHODS = frozenset({"GET", "HEAD"})
MAX_SESSIONS = 10_000
PER_PRINCIPAL = 32


@dataclass(frozen=True, kw_only=True, slots=True)
class Session:
    sid: str
    principal: Principal
    max_priority: int | None  # its token's: the highest start priority it may ask (None: any)
    csrf: str
    expires: float


class Sessions:
    def __init__(
        self,
        *,
        ttl: float = 8 * 3600.0,
        max_sessions: int = MAX_SESSIONS,
        per_principal: int = PER_PRINCIPAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.max_sessions = max_sessions
        self.per_principal = per_principal
        self._clock = clock
        self._by_id: OrderedDict[str, Session] = OrderedDict()  # oldest (first to expire) first
        self._of: dict[Principal, OrderedDict[str, None]] = {}  # each principal's, oldest first

    def __len__(self) -> int:
        return len(self._by_id)

    def __repr__(self) -> str:
        return f"Sessions({len(self._by_id)}, principals={len(self._of)}, ttl={self.ttl:g})"

    def create(self, principal: Principal, *, max_priority: int | None = None) -> Session:
        now = self._clock()
        # One TTL for all: the oldest session is the first to expire.
        while self._by_id and next(iter(self._by_id.values())).expires <= now:
            self.drop(next(iter(self._by_id)))
        mine = self._of.get(principal)
        while mine and len(mine) >= self.per_principal:
            self.drop(next(iter(mine)))
        while len(self._by_id) >= self.max_sessions:
            self.drop(next(iter(self._by_id)))
        s = Session(
            sid=secrets.token_urlsafe(32),
            principal=principal,
            max_priority=max_priority,
            csrf=secrets.token_urlsafe(32),
            expires=now + self.ttl,
        )
        self._by_id[s.sid] = s
        self._of.setdefault(principal, OrderedDict())[s.sid] = None
        return s

    def get(self, sid: str | None) -> Session | None:
        if not sid or len(sid) > 100:
            return None
        s = self._by_id.get(sid)
        if s is None:
            return None
        if s.expires <= self._clock():
            self.drop(sid)
            return None
        return s

    def drop(self, sid: str) -> None:
        s = self._by_id.pop(sid, None)
        if s is None:
            return
        mine = self._of[s.principal]
        del mine[sid]
        if not mine:
            del self._of[s.principal]

    def of_principal(self, principal: Principal) -> int:
        return len(self._of.get(principal, ()))

    def of_scope(self, scope: Scope) -> Session | None:
        return self.get(cookie_of(scope))


def cookie_of(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"cookie" and len(value) <= 8192:
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(value.decode("latin-1"))
            except Exception:  # a malformed Cookie header is a missing cookie
                return None
            morsel = jar.get(COOKIE)
            return None if morsel is None else morsel.value
    return None


def set_cookie_header(session: Session, *, secure: bool) -> str:
    flags = "; Secure" if secure else ""
    return f"{COOKIE}={session.sid}; Path=/; HttpOnly; SameSite=Strict{flags}"


def clear_cookie_header() -> str:
    return f"{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"


def check_csrf(session: Session | None, presented: str | None, scope: Scope) -> None:
    """Refuse (403) a state-changing request without this session's token, or from another
    origin. Browsers send `Origin` on such requests; a request with none is a non-browser
    client, which still needs the token."""
    if session is None or not presented or not hmac.compare_digest(session.csrf, presented):
        raise Forbidden("a dashboard form needs its session's CSRF token: reload the page")
    headers = {k: v for k, v in scope.get("headers", ()) if k in (b"origin", b"host")}
    origin = headers.get(b"origin")
    if origin is not None:
        host = headers.get(b"host", b"").decode("latin-1")
        text = origin.decode("latin-1")
        allowed = {f"http://{host}", f"https://{host}"}
        if text not in allowed:
            raise Forbidden(f"cross-origin request refused (Origin {text[:100]!r})")
