"""Who is calling: bearer tokens from the TOML file named by `YOKE_TOKENS_FILE`, roles, tenants.

A token maps to a `Principal` (name, roles, tenant) and the highest start priority it may ask
(`max_priority`: 0 by default for a token without OPERATOR or ADMIN, unlimited for those). The
`METRICS` role lets a scraper read `/metrics` and nothing else. Tokens are compared in constant
time: the presented token is hashed once and compared with `hmac.compare_digest` against every
entry, without stopping at a match, so the answer time says nothing about which prefix was
right. The file may hold `token = "..."` or `token_sha256 = "<hex>"` (a hash, so the file need
not hold the secret). A file with an unknown key, role or field, or with one token twice, is
refused at start with an error naming the entry: a typo must not silently change who may do
what.

Ownership: a principal without OPERATOR or ADMIN sees and touches only the starts and executions
stored with its tenant (`sees`), starts them only in sessions of its tenant (the tenant itself or
`<tenant>/<anything>`), and sees the actor instances of its home tenant (`home_tenant`);
anything else is answered 404 as if absent, so a tenant cannot even learn another's ids exist.

`Authenticate` only says who is asking (or that no valid token came); whether that may call a
route is the route table's check (`routing.guarded`). With no tokens file every caller is the
local admin; `serve` then binds loopback only. This module must never talk to the store or the
scheduler The dashboard's browser
sessions come in through one seam, `browser`: without a valid bearer token, a request to
`/ui/...` (any method: the dashboard checks its CSRF token itself) or a GET of the API (what the
dashboard's own scripts read) is the principal of its session cookie.
"""

from __future__ import annotations

import hashlib
import hmac
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from yoke.errors import BadValue, Forbidden, NotFound, Unauthorized
from yoke.executions import ADMIN, OPERATOR, Principal
from yoke.server.calls import Incoming

METRICS = "METRICS"
ROLES = frozenset({ADMIN, OPERATOR, METRICS})
LOCAL_ADMIN = Principal("local", roles=(ADMIN, OPERATOR), tenant=None)
_SCOPE_KEY = "yoke.principal"
_PRIORITY_KEY = "yoke.max_priority"
_ENTRY_KEYS = frozenset({"token", "token_sha256", "principal", "tenant", "roles", "max_priority"})
_INT_MAX = 2**31 - 1
UI_PREFIX = "/ui"
# A browser session's principal and the highest start priority its token may ask.
Browser = Callable[[Scope], tuple[Principal, int | None] | None]


@dataclass(frozen=True, kw_only=True, slots=True)
class _Entry:
    digest: bytes
    principal: Principal
    max_priority: int | None  # None: any priority


class TokenBook:
    """Tokens to principals. `TokenBook([])` accepts no one; `None` (no file) means local."""

    def __init__(self, entries: Iterable[tuple[str, Principal]]) -> None:
        self._entries = _unique(
            [
                _Entry(digest=_digest(t), principal=p, max_priority=_default_max(p))
                for t, p in entries
            ]
        )

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"TokenBook({len(self._entries)} tokens)"

    def lookup(self, token: str) -> Principal | None:
        found = self.entry_for(token)
        return None if found is None else found.principal

    def entry_for(self, token: str) -> _Entry | None:
        presented = _digest(token)
        found: _Entry | None = None
        for entry in self._entries:  # no early exit: constant time in the position of a match
            if hmac.compare_digest(entry.digest, presented):
                found = entry
        return found

    @classmethod
    def from_file(cls, path: str | Path) -> TokenBook:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise BadValue(f"cannot read the tokens file {str(path)!r}: {exc}") from None
        unknown = sorted(set(data) - {"tokens"})
        if unknown:
            raise BadValue(f"the tokens file holds unknown keys {unknown}: only [[tokens]] tables")
        rows = data.get("tokens", [])
        if not isinstance(rows, list):
            raise BadValue("the tokens file must hold [[tokens]] tables")
        book = cls([])
        book._entries = _unique([_parse_row(i, row) for i, row in enumerate(rows)])
        return book


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _default_max(p: Principal) -> int | None:
    return None if p.has_any(OPERATOR, ADMIN) else 0


def _unique(entries: list[_Entry]) -> tuple[_Entry, ...]:
    """One entry per token: a second would silently decide who the token is. One identity per
    principal name: several tokens may name one principal (a rotation), but not with another
    tenant or other roles, since a principal's name scopes its Idempotency-Keys (one tenant
    would be answered with another's start) and names it in the audit log."""
    first: dict[bytes, int] = {}
    named: dict[str, int] = {}
    for i, e in enumerate(entries):
        if e.digest in first:
            raise BadValue(
                f"tokens[{i}] ({e.principal.name}) has the same token as "
                f"tokens[{first[e.digest]}] ({entries[first[e.digest]].principal.name})"
            )
        first[e.digest] = i
        j = named.setdefault(e.principal.name, i)
        other = entries[j].principal
        if (other.tenant, other.roles) != (e.principal.tenant, e.principal.roles):
            raise BadValue(
                f"tokens[{i}] names principal {e.principal.name!r} as tokens[{j}] does, with "
                f"another tenant or other roles: give each its own principal name"
            )
    return tuple(entries)


def _parse_row(i: int, row: object) -> _Entry:
    where = f"tokens[{i}]"
    if not isinstance(row, dict):
        raise BadValue(f"{where} must be a table")
    name = row.get("principal")
    if isinstance(name, str) and name:
        where = f"{where} ({name})"
    unknown = sorted(set(row) - _ENTRY_KEYS)
    if unknown:
        raise BadValue(f"{where} has unknown fields {unknown}; known: {sorted(_ENTRY_KEYS)}")
    token, hashed = row.get("token"), row.get("token_sha256")
    if (token is None) == (hashed is None):
        raise BadValue(f"{where} needs exactly one of `token` or `token_sha256`")
    tenant, roles = row.get("tenant"), row.get("roles", [])
    if not isinstance(name, str) or not name:
        raise BadValue(f"{where}.principal must be a non-empty string")
    if tenant is not None and (
        not isinstance(tenant, str) or not tenant or "/" in tenant or tenant == "*"
    ):
        raise BadValue(f"{where}.tenant must be a non-empty string without '/', and not '*'")
    if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
        raise BadValue(f"{where}.roles must be a list of {sorted(ROLES)}")
    if not set(roles) <= ROLES:
        raise BadValue(f"{where}.roles has unknown roles {sorted(set(roles) - ROLES)}")
    if isinstance(token, str) and token:
        digest = _digest(token)
    elif isinstance(hashed, str) and len(hashed) == 64:
        try:
            digest = bytes.fromhex(hashed)
        except ValueError:
            raise BadValue(f"{where}.token_sha256 must be 64 hex digits") from None
    else:
        raise BadValue(f"{where}: a token must be a non-empty string (or 64 hex digits)")
    principal = Principal(name, roles=roles, tenant=tenant)
    top = row.get("max_priority", _default_max(principal))
    if top is not None and (
        isinstance(top, bool) or not isinstance(top, int) or not -_INT_MAX <= top <= _INT_MAX
    ):
        raise BadValue(f"{where}.max_priority must be an integer within +-{_INT_MAX}")
    return _Entry(digest=digest, principal=principal, max_priority=top)


class Authenticate:
    """Pure ASGI: puts the caller's principal (and the priority it may ask) in the scope when a
    valid token came, or the local admin when there is no tokens file. It refuses nothing:
    whether a route needs a principal is the route table's to say (401 there)."""

    def __init__(
        self, app: ASGIApp, *, tokens: TokenBook | None, browser: Browser | None = None
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.browser = browser

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.tokens is None:
            scope[_SCOPE_KEY] = LOCAL_ADMIN
            scope[_PRIORITY_KEY] = None
        else:
            for name, value in scope.get("headers", ()):
                if name == b"authorization":
                    scheme, _, token = value.decode("latin-1").partition(" ")
                    entry = None
                    if scheme.lower() == "bearer" and token.strip():
                        entry = self.tokens.entry_for(token.strip())
                    if entry is not None:
                        scope[_SCOPE_KEY] = entry.principal
                        scope[_PRIORITY_KEY] = entry.max_priority
                    break
        if self.browser is not None and _SCOPE_KEY not in scope:
            path = scope["path"]
            ui = path == UI_PREFIX or path.startswith(UI_PREFIX + "/")
            if ui or scope.get("method") in ("GET", "HEAD"):
                session = self.browser(scope)
                if session is not None:
                    scope[_SCOPE_KEY], scope[_PRIORITY_KEY] = session
        await self.app(scope, receive, send)


def principal_in(scope: Scope) -> Principal | None:
    p = scope.get(_SCOPE_KEY)
    return p if isinstance(p, Principal) else None


def principal_of(request: Incoming) -> Principal:
    p = request.scope.get(_SCOPE_KEY)
    if not isinstance(p, Principal):  # no valid token (or a route outside the middleware)
        raise Unauthorized("a valid bearer token is required")
    return p


def check_priority(request: Incoming, priority: int) -> None:
    """A token may not ask a start priority above its `max_priority` (fairness: a plain tenant
    would otherwise go ahead of every other tenant), whether it starts, restarts, resumes or
    re-prioritises a queued start, through the API or a dashboard session."""
    top = request.scope.get(_PRIORITY_KEY)
    if top is not None and priority > top:
        raise Forbidden(
            f"priority {priority} is above this token's max_priority {top}: ask at most {top}"
        )


def privileged(p: Principal) -> bool:
    return p.has_any(OPERATOR, ADMIN)


def scraper(p: Principal) -> bool:
    """A METRICS token without OPERATOR or ADMIN: it reads `/metrics` and nothing else (a
    scraper's token, often kept less carefully, must not start work or read a tenant's)."""
    return p.has_any(METRICS) and not privileged(p)


def tenant_of(p: Principal) -> str:
    return p.tenant or p.name


def home_tenant(p: Principal) -> str:
    """The tenant of a principal's stream events and actor instances: its own, or `default` for
    a privileged principal bound to none (the local admin, an operator)."""
    return p.tenant or ("default" if privileged(p) else tenant_of(p))


def owns(p: Principal, session: str) -> bool:
    if privileged(p):
        return True
    t = tenant_of(p)
    return session == t or session.startswith(t + "/")


def sees(p: Principal, tenant: str) -> bool:
    """Whether `p` may see a start or an execution of `tenant` (the tenant stored with it):
    every tenant's for OPERATOR or ADMIN, else its own only. The one rule that every route,
    dashboard view and control asks."""
    return privileged(p) or tenant == tenant_of(p)


def check_visible(p: Principal, tenant: str, what: str) -> None:
    """Another tenant's start or execution is answered as absent."""
    if not sees(p, tenant):
        raise NotFound(f"no {what}")


def check_session(p: Principal, session: str) -> None:
    if not owns(p, session):
        raise Forbidden(
            f"session {session!r} is outside tenant {tenant_of(p)!r}: use "
            f"{tenant_of(p)!r} or {tenant_of(p) + '/...'!r}"
        )
