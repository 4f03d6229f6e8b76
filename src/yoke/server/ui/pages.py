"""The dashboard's HTML routes under `/ui`: pages, live fragments, login, and the controls.

Who: the principal the authentication layer found (a bearer token, or this dashboard's session
cookie); a page without one sends the browser to the login form, and without a tokens file
every caller is the local admin (a session is still made, for its CSRF token). Controls are
plain HTML forms carrying the session's CSRF token; each calls the same `app.executions` method
as the API (so roles, reviewers and the control log apply alike), and the server checks the
role whatever the page showed. A refused control answers an error page with the problem's
status (403, 404, 409, 422).

This module must never compute a figure (`views`, `stored`) nor apply a change itself.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qs, urlencode

from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from yoke.errors import BadValue, YokeError
from yoke.executions import ADMIN, OPERATOR, Limits, Principal
from yoke.executions.policy import Act, need
from yoke.server.auth import (
    LOCAL_ADMIN,
    check_priority,
    check_visible,
    principal_in,
    privileged,
    scraper,
)
from yoke.server.problems import retry_after
from yoke.server.state import ServerState, read_body
from yoke.server.ui import sessions as ss
from yoke.server.ui.hub import Hub
from yoke.server.ui.regions import NAV, PAGES, REGIONS, Region, params_of
from yoke.server.ui.render import FragmentCache, html, render_to
from yoke.server.ui.throttle import LoginThrottle, client_key
from yoke.store.text import check_text

CSRF_MARK = b"__YOKE_CSRF__"
# The act of each control: its roles are the policy's (`executions/policy.py`), the entry the
# API's route for the same act reads; the object's owner is checked after.
ACTION_ACTS: dict[str, Act] = {
    "limits": Act.SET_LIMITS,
    "priority": Act.SET_PRIORITY,
    "cancel": Act.CANCEL_START,
    "restart": Act.RESTART,
    "resume": Act.RESUME,
    "cancel_execution": Act.CANCEL_EXECUTION,
}
EXECUTION_ACTIONS = ("restart", "resume", "cancel_execution")
FRESH = 2.0
MAX_FIELDS = 20


class Pages:
    def __init__(self, state: ServerState, hub: Hub, sessions: ss.Sessions) -> None:
        from yoke.server.ui.render import environment

        self.s = state
        self.hub = hub
        self.sessions = sessions
        self.throttle = LoginThrottle()
        self.cache = FragmentCache()
        self.env = environment()

    # -- who is looking -------------------------------------------------------------------------
    def _viewer(
        self, request: Request, *, make: bool = False
    ) -> tuple[Principal | None, ss.Session | None, bool]:
        """(principal, session, new session made): a local admin gets a session on first sight
        of a page (`make`), the answer that can hand it its cookie."""
        p = principal_in(request.scope)
        if p is not None and scraper(p):
            p = None  # a METRICS token reads /metrics alone: no dashboard
        session = self.sessions.of_scope(request.scope)
        if make and p is not None and self.s.tokens is None and session is None:
            return p, self.sessions.create(LOCAL_ADMIN), True
        if session is not None and p is not None and session.principal != p:
            session = None  # a bearer token overrides the cookie: no CSRF token for it
        return p, session, False

    def _login_redirect(self, request: Request) -> Response:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/ui/login?{urlencode({'next': target})}", status_code=303)

    @staticmethod
    def _scope_key(p: Principal) -> tuple[str, tuple[str, ...]]:
        return ("*" if privileged(p) else (p.tenant or p.name), tuple(sorted(p.roles)))

    # -- rendering ------------------------------------------------------------------------------
    async def region(self, region: Region, p: Principal, params: dict[str, str]) -> bytes:
        version = self.hub.check()
        # A render is shared by every viewer of one scope at one version, and for at most
        # FRESH seconds: ages move, and a priority change leaves the counts alike.
        fresh = int(time.monotonic() // FRESH)
        key = (region.name, tuple(sorted(params.items())), self._scope_key(p), version, fresh)

        async def render() -> bytes:
            context: dict[str, Any] = {
                "region": region.name,
                "qs": urlencode(params),
                "version": version,
                "can_admin": p.has_any(ADMIN),
                "can_operate": p.has_any(OPERATOR, ADMIN),
                "csrf": CSRF_MARK.decode(),
                "params": params,
            }
            try:
                context["d"] = await region.feed(self.s, p, params)
                name = region.template
            except YokeError as exc:
                context.update(error=str(exc) or exc.title, status=exc.status)
                name = "r_error.html"
            return render_to(self.env, name, context)

        return await self.cache.get(key, render)

    def _finish(self, body: bytes, session: ss.Session | None) -> bytes:
        return body.replace(CSRF_MARK, (session.csrf if session else "").encode())

    async def page(self, request: Request, name: str, params: dict[str, str]) -> Response:
        p, session, made = self._viewer(request, make=True)
        if p is None:
            return self._login_redirect(request)
        title, names, _ = PAGES[name]
        parts = []
        for region_name in names:
            region = REGIONS[region_name]
            body = await self.region(region, p, params_of_dict(region, params))
            parts.append(Markup(self._finish(body, session).decode()))
        body = render_to(
            self.env,
            "page.html",
            {
                "title": title,
                "page": name,
                "nav": [(n, PAGES[n][0]) for n in NAV if _may(p, PAGES[n][2])],
                "regions": parts,
                "principal": p,
                "local": self.s.tokens is None,
                "csrf": session.csrf if session else "",
                "version": self.hub.version,
                "charts": name in ("overview", "fairness"),
                "params": params,
            },
        )
        headers = {}
        if made and session is not None:
            headers["Set-Cookie"] = ss.set_cookie_header(session, secure=_secure(request))
        return html(body, headers=headers)

    async def fragment(self, request: Request) -> Response:
        p, session, _ = self._viewer(request)
        if p is None:
            return html(b"", status=401)
        region = REGIONS.get(request.path_params["region"])
        if region is None:
            return html(b"no such region", status=404)
        body = await self.region(region, p, params_of(region, request.query_params))
        return html(self._finish(body, session))

    # -- login ----------------------------------------------------------------------------------
    async def login_form(self, request: Request) -> Response:
        return self._login(request, error=None, status=200)

    def _login(self, request: Request, *, error: str | None, status: int) -> Response:
        body = render_to(
            self.env,
            "login.html",
            {
                "error": error,
                "next": _safe_next(request.query_params.get("next")),
                "local": self.s.tokens is None,
            },
        )
        return html(body, status=status)

    async def login(self, request: Request) -> Response:
        form = await _form(request)
        if not _same_origin(request):
            return self._login(request, error="cross-origin login refused", status=403)
        token = form.get("token", "").strip()
        tokens = self.s.tokens
        if tokens is None:
            session = self.sessions.create(LOCAL_ADMIN)
        else:
            client = client_key(request.client.host if request.client else None)
            wait = self.throttle.retry_after(client)
            if wait is not None:  # before the token is looked at: no guess is judged
                error = "too many failed logins from this address: try again later"
                refused = self._login(request, error=error, status=429)
                refused.headers["Retry-After"] = retry_after(wait)
                return refused
            entry = tokens.entry_for(token) if token else None
            if entry is None:
                self.throttle.failed(client)
                return self._login(request, error="that token is not valid", status=401)
            if scraper(entry.principal):
                error = "a METRICS token reads /metrics alone: log in with another token"
                return self._login(request, error=error, status=403)
            session = self.sessions.create(entry.principal, max_priority=entry.max_priority)
        target = _safe_next(form.get("next"))
        response = RedirectResponse(target, status_code=303)
        response.headers["Set-Cookie"] = ss.set_cookie_header(session, secure=_secure(request))
        return response

    async def logout(self, request: Request) -> Response:
        form = await _form(request)
        session = self.sessions.of_scope(request.scope)
        ss.check_csrf(session, form.get("csrf"), request.scope)
        if session is not None:
            self.sessions.drop(session.sid)
        response = RedirectResponse("/ui/login", status_code=303)
        response.headers["Set-Cookie"] = ss.clear_cookie_header()
        return response

    # -- controls -------------------------------------------------------------------------------
    async def _control(self, request: Request) -> tuple[Principal, dict[str, str]]:
        form = await _form(request)
        p, session, _ = self._viewer(request)
        if p is None:
            from yoke.errors import Unauthorized

            raise Unauthorized("log in first")
        ss.check_csrf(session, form.get("csrf"), request.scope)
        return p, form

    async def act(self, request: Request) -> Response:
        target: str | None = None
        try:
            p, form = await self._control(request)
            action = request.path_params["action"]
            if action not in ACTION_ACTS:
                return html(b"no such action", status=404)
            # The role first, as the API's rows do: a caller without it learns nothing from
            # how its form is judged (403, never a 422 about a field).
            need(p, ACTION_ACTS[action])
            if action == "limits":
                await self._set_limits(p, form)
            elif action == "priority":
                start_id = check_text(form.get("start_id", ""), "start_id")
                priority = _number(form.get("priority"), "priority")
                check_priority(request, priority)
                await self.s.executions.set_priority(start_id, priority, principal=p)
            elif action == "cancel":
                start_id = check_text(form.get("start_id", ""), "start_id")
                start = await self.s.executions.get(start_id)
                check_visible(p, start.tenant, f"start {start_id}")
                await self.s.executions.cancel_start(start_id)
            elif action in EXECUTION_ACTIONS:
                target = await self._on_execution(request, p, action, form)
        except YokeError as exc:
            body = render_to(
                self.env,
                "error.html",
                {"status": exc.status, "title": exc.title, "detail": str(exc)},
            )
            return html(body, status=exc.status if 400 <= exc.status < 500 else 503)
        self.hub.bump()
        return RedirectResponse(target or _safe_next(form.get("next")), status_code=303)

    async def _on_execution(
        self, request: Request, p: Principal, action: str, form: dict[str, str]
    ) -> str:
        """Restart, resume or cancel an execution (the API's calls, its visibility rule);
        the page to go to: the new execution, or its start while it waits for a slot."""
        ex = self.s.executions
        execution_id = check_text(form.get("execution_id", ""), "execution_id")
        found = await ex.get_execution(execution_id)
        check_visible(p, found.session, f"execution {execution_id}")
        if action == "cancel_execution":
            await ex.cancel(execution_id, principal=p)
            return f"/ui/executions/{execution_id}"
        if action == "restart":
            start = await ex.restart(execution_id, principal=p)
        else:
            start = await ex.resume(execution_id, principal=p)
        if start.execution_id is not None:
            return f"/ui/executions/{start.execution_id}"
        return f"/ui/starts/{start.start_id}"

    async def _set_limits(self, p: Principal, form: dict[str, str]) -> None:
        current = self.s.executions.current_limits
        limits = Limits(
            max_running=_optional(form.get("max_running"), "max_running"),
            max_running_per_session=_optional(
                form.get("max_running_per_session"), "max_running_per_session"
            ),
            max_running_per_workflow=current.max_running_per_workflow,
            max_queued=_optional(form.get("max_queued"), "max_queued"),
            on_limit="reject" if form.get("on_limit") == "reject" else "queue",
        )
        await self.s.executions.set_limits(limits, principal=p)


def params_of_dict(region: Region, params: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in params.items() if k in region.params and v}


def _may(p: Principal, roles: tuple[str, ...]) -> bool:
    return not roles or p.has_any(*roles)


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    host = request.headers.get("host", "")
    return origin is None or origin in (f"http://{host}", f"https://{host}")


def _safe_next(raw: str | None) -> str:
    """Only a dashboard path of this server: never an open redirect."""
    if raw and raw.startswith("/ui") and not raw.startswith("//") and "\\" not in raw:
        return raw[:1000]
    return "/ui/"


async def _form(request: Request) -> dict[str, str]:
    raw = await read_body(request)
    try:
        fields = parse_qs(raw.decode("utf-8"), max_num_fields=MAX_FIELDS, keep_blank_values=True)
    except (UnicodeDecodeError, ValueError):
        raise BadValue("the form must be url-encoded UTF-8 with few fields") from None
    return {k: v[-1][:1000] for k, v in fields.items()}


def _number(raw: str | None, what: str) -> int:
    text = (raw or "").strip()
    if not text or len(text) > 20 or not text.lstrip("-").isdigit() or not text.isascii():
        raise BadValue(f"{what} must be a whole number")
    return int(text)


def _optional(raw: str | None, what: str) -> int | None:
    return None if raw is None or not raw.strip() else _number(raw, what)
