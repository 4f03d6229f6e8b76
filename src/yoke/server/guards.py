"""Pure ASGI guards every request passes before any route: the body bound, the loopback-only
rules of a server without tokens, and the security headers of every answer.

Body: a declared `Content-Length` past `max_body_bytes` is answered 413 at once, unread; a body
of any other framing (chunked) is counted as the app reads it and refused with 413 as soon as
it passes the bound, so no more than the bound and one chunk is ever held. An answer given
before the body was read to its end closes the connection, so a client streaming a huge body
is not read to the end either.

Without a tokens file every local caller is the admin, so a web page the operator happens to
open must not be able to drive the server: a `Host` that is not a loopback name or address is
answered 421 (DNS rebinding), and a state-changing request whose `Origin` is another site's
(or `null`) is answered 403 (cross-site requests). JSON bodies must be declared
`application/json` on every route (`routing.guarded`, 415), which a cross-site form cannot do
without a CORS preflight that yoke never grants.

This module must never know a route or a principal.
"""

from __future__ import annotations

import functools
import ipaddress
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from yoke.errors import Forbidden, YokeError
from yoke.server.problems import from_yoke_error

# One policy for every answer, the API docs page included: nothing from another origin, no
# inline script, not framed by another site.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class TooLarge(YokeError):
    status = 413
    title = "Request body too large"


class Misdirected(YokeError):
    status = 421
    title = "Misdirected request"


def is_loopback_host(host: str) -> bool:
    """`localhost`, `127.0.0.1`, `[::1]`..., with or without a port."""
    if len(host) > 263:  # longer than any name (253) and port: not one, and not kept
        return False
    return _loopback(host)


@functools.lru_cache(maxsize=256)
def _loopback(host: str) -> bool:
    # Asked on every request without tokens, almost always for the same few Host values:
    # parsing an address each time cost more than the rest of the guard.
    if host.startswith("["):
        name = host[1 : host.find("]")] if "]" in host else host
    else:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    name = name.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _origin_is_local(origin: str) -> bool:
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and is_loopback_host(parts.netloc)


class Guard:
    def __init__(self, app: ASGIApp, *, max_body: int, local_only: bool) -> None:
        self.app = app
        self.max_body = max_body
        self.local_only = local_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared: int | None = None
        has_body = False
        host = origin = ""
        for name, value in scope["headers"]:
            if name == b"content-length":
                has_body = value not in (b"0", b"")
                declared = int(value) if value.isdigit() and len(value) < 20 else self.max_body + 1
            elif name == b"transfer-encoding":
                has_body = True
            elif name == b"host":
                host = value.decode("latin-1")
            elif name == b"origin":
                origin = value.decode("latin-1")
        refusal: YokeError | None = None
        if self.local_only and host and not is_loopback_host(host):
            refusal = Misdirected(
                f"host {host!r} is not a loopback name: without YOKE_TOKENS_FILE the server "
                "answers only to 127.0.0.1, ::1 or localhost"
            )
        elif (
            self.local_only
            and origin
            and scope["method"] not in SAFE_METHODS
            and not _origin_is_local(origin)
        ):
            refusal = Forbidden(
                f"a request from origin {origin!r} may not change anything on a server "
                "without tokens"
            )
        if refusal is None and declared is not None and declared > self.max_body:
            refusal = TooLarge(f"the body must be at most {self.max_body} bytes")
        read = 0
        ended = not has_body

        async def bounded_receive() -> Message:
            nonlocal read, ended
            message = await receive()
            if message["type"] == "http.request":
                read += len(message.get("body", b""))
                if read > self.max_body:
                    raise TooLarge(f"the body must be at most {self.max_body} bytes")
                if not message.get("more_body", False):
                    ended = True
            return message

        async def guarded_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                # An answer with its own policy (the dashboard's pages, which post forms to
                # themselves) keeps it; two policies would both apply.
                own = {name.lower() for name, _ in headers}
                headers += [h for h in SECURITY_HEADERS if h[0] not in own]
                if not ended:  # do not read the rest of a body nobody wants
                    headers.append((b"connection", b"close"))
                message = {**message, "headers": headers}
            await send(message)

        if refusal is not None:
            await from_yoke_error(refusal, scope["path"])(scope, receive, guarded_send)
            return
        await self.app(scope, bounded_receive, guarded_send)
