"""Who is calling: bearer tokens from the TOML file named by `YOKE_TOKENS_FILE`, roles, tenants.

A token maps to a `Principal` (name, roles, tenant). Tokens are compared in constant time: the
presented token is hashed once and compared with `hmac.compare_digest` against every entry,
without stopping at a match, so the answer time says nothing about which prefix was right. The
file may hold `token = "..."` or `token_sha256 = "<hex>"` (a hash, so the file need not hold the
secret).

Ownership: a principal without OPERATOR or ADMIN sees and touches only the starts and executions
of its tenant, whose sessions are the tenant itself or `<tenant>/<anything>`, and the actor
instances of its home tenant (`home_tenant`); anything else is answered 404 as if absent, so a
tenant cannot even learn another's ids exist.

With no tokens file every caller is the local admin; `serve` then binds loopback only. This
module must never talk to the store or the scheduler: it only says who is asking.
"""

from __future__ import annotations

import hashlib
import hmac
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from yoke.errors import BadValue, Forbidden, NotFound, Unauthorized
from yoke.executions import ADMIN, OPERATOR, Principal
from yoke.server.problems import from_yoke_error

ROLES = frozenset({ADMIN, OPERATOR})
LOCAL_ADMIN = Principal("local", roles=(ADMIN, OPERATOR), tenant=None)
# Routes anyone may call without a token (probes, scrapers, the API description).
PUBLIC_PATHS = frozenset({"/metrics", "/healthz", "/readyz", "/openapi.json", "/docs"})
_SCOPE_KEY = "yoke.principal"


@dataclass(frozen=True, kw_only=True, slots=True)
class _Entry:
    digest: bytes
    principal: Principal


class TokenBook:
    """Tokens to principals. `TokenBook([])` accepts no one; `None` (no file) means local."""

    def __init__(self, entries: Iterable[tuple[str, Principal]]) -> None:
        self._entries = tuple(_Entry(digest=_digest(t), principal=p) for t, p in entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"TokenBook({len(self._entries)} tokens)"

    def lookup(self, token: str) -> Principal | None:
        presented = _digest(token)
        found: Principal | None = None
        for entry in self._entries:  # no early exit: constant time in the position of a match
            if hmac.compare_digest(entry.digest, presented):
                found = entry.principal
        return found

    @classmethod
    def from_file(cls, path: str | Path) -> TokenBook:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise BadValue(f"cannot read the tokens file {str(path)!r}: {exc}") from None
        rows = data.get("tokens", [])
        if not isinstance(rows, list):
            raise BadValue("the tokens file must hold [[tokens]] tables")
        book = cls([])
        book._entries = tuple(_parse_row(i, row) for i, row in enumerate(rows))
        return book


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _parse_row(i: int, row: object) -> _Entry:
    where = f"tokens[{i}]"
    if not isinstance(row, dict):
        raise BadValue(f"{where} must be a table")
    token, hashed = row.get("token"), row.get("token_sha256")
    if (token is None) == (hashed is None):
        raise BadValue(f"{where} needs exactly one of `token` or `token_sha256`")
    name, tenant, roles = row.get("principal"), row.get("tenant"), row.get("roles", [])
    if not isinstance(name, str) or not name:
        raise BadValue(f"{where}.principal must be a non-empty string")
    if tenant is not None and (not isinstance(tenant, str) or not tenant or "/" in tenant):
        raise BadValue(f"{where}.tenant must be a non-empty string without '/'")
    if not isinstance(roles, list) or not set(roles) <= ROLES:
        raise BadValue(f"{where}.roles must be a list of {sorted(ROLES)}")
    if isinstance(token, str) and token:
        digest = _digest(token)
    elif isinstance(hashed, str) and len(hashed) == 64:
        try:
            digest = bytes.fromhex(hashed)
        except ValueError:
            raise BadValue(f"{where}.token_sha256 must be 64 hex digits") from None
    else:
        raise BadValue(f"{where}: a token must be a non-empty string (or 64 hex digits)")
    return _Entry(digest=digest, principal=Principal(name, roles=roles, tenant=tenant))


class Authenticate:
    """Pure ASGI: puts the caller's principal in the scope, or answers 401."""

    def __init__(self, app: ASGIApp, *, tokens: TokenBook | None) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        if self.tokens is None:
            scope[_SCOPE_KEY] = LOCAL_ADMIN
            await self.app(scope, receive, send)
            return
        principal = None
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, token = value.decode("latin-1").partition(" ")
                if scheme.lower() == "bearer" and token.strip():
                    principal = self.tokens.lookup(token.strip())
                break
        if principal is None:
            response = from_yoke_error(
                Unauthorized("a valid bearer token is required"), scope["path"]
            )
            response.headers["WWW-Authenticate"] = 'Bearer realm="yoke"'
            await response(scope, receive, send)
            return
        scope[_SCOPE_KEY] = principal
        await self.app(scope, receive, send)


def principal_of(request: Request) -> Principal:
    p = request.scope.get(_SCOPE_KEY)
    if not isinstance(p, Principal):  # a route outside the middleware: never serve it as anyone
        raise Unauthorized("a valid bearer token is required")
    return p


def privileged(p: Principal) -> bool:
    return p.has_any(OPERATOR, ADMIN)


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


def check_visible(p: Principal, session: str, what: str) -> None:
    """Another tenant's object is answered as absent."""
    if not owns(p, session):
        raise NotFound(f"no {what}")


def check_session(p: Principal, session: str) -> None:
    if not owns(p, session):
        raise Forbidden(
            f"session {session!r} is outside tenant {tenant_of(p)!r}: use "
            f"{tenant_of(p)!r} or {tenant_of(p) + '/...'!r}"
        )


def need(p: Principal, *roles: str) -> None:
    if not p.has_any(*roles):
        raise Forbidden(f"{p.name} lacks role {' or '.join(roles)}")
