"""`/v1/starts`: ask for a slot (201 granted, 202 queued, 429, 503), follow, re-prioritise,
cancel, and ask why a start waits.

`POST /v1/starts` and the restarts in `routes_executions` share `start_answer`, so every way to
ask for a slot answers alike. Idempotency-Key requests go through the replayer, which keeps the
first successful answer. This module must never decide admission: `app.executions` does.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import Response

from yoke.errors import Conflict, ShuttingDown, YokeError
from yoke.executions import Principal, Start, StartStatus
from yoke.retry import within
from yoke.server.auth import (
    check_priority,
    check_session,
    check_visible,
    principal_of,
    tenant_of,
)
from yoke.server.calls import Incoming
from yoke.server.explain import RATE_WINDOW, explain
from yoke.server.metrics import Outcome
from yoke.server.models import PriorityIn, StartIn, start_json
from yoke.server.state import ServerState, json_response, parse, query_float, read_body
from yoke.store.text import check_text

log = logging.getLogger("yoke.server")
UNDECIDED = (StartStatus.QUEUED, StartStatus.SCHEDULED)  # what `?wait=` waits out
T = TypeVar("T")


class StartsRoutes:
    def __init__(self, state: ServerState) -> None:
        self.s = state

    # -- shared with restart and resume ----------------------------------------------------
    def wait_of(self, request: Incoming) -> float | None:
        return query_float(request, "wait", low=0.0, high=self.s.max_wait)

    async def bounded(self, what: str, aw: Awaitable[T]) -> T:
        """A store read of a start, restart or resume, answered 503 (with Retry-After) past
        `YOKE_READY_TIMEOUT` instead of waiting for a store that does not answer."""
        return await within(self.s.app.settings.ready_timeout, what, aw)

    def polling(
        self, request: Incoming, wait: float | None
    ) -> contextlib.AbstractContextManager[None]:
        """One of the caller's tenant's long-polls while a request may wait (429 past the cap),
        taken before the request writes anything, so a refused one has changed nothing."""
        if not wait:
            return contextlib.nullcontext()
        return self.s.long_polls.hold(tenant_of(principal_of(request)))

    async def start_answer(self, start: Start, wait: float | None) -> Response:
        if start.status in UNDECIDED and wait:
            start = await self.s.executions.wait_granted(start.start_id, timeout=wait)
        return self.answer_of(start)

    def answer_of(self, start: Start) -> Response:
        """201 granted, 202 queued or scheduled (with its Location); 409 cancelled, 503
        refused."""
        if start.status is StartStatus.GRANTED:  # its wait was timed when it was granted
            self.s.metrics.count(Outcome.GRANTED)
            return json_response(start_json(start), 201)
        if start.status in (StartStatus.QUEUED, StartStatus.SCHEDULED):
            self.s.metrics.count(Outcome.QUEUED)
            return json_response(
                start_json(start), 202, headers={"Location": f"/v1/starts/{start.start_id}"}
            )
        if start.status is StartStatus.CANCELLED:
            raise Conflict(f"start {start.start_id} was cancelled while waiting")
        raise ShuttingDown(f"start {start.start_id} was refused: {start.reason or 'refused'}")

    async def counted(
        self, request: Incoming, answer: Callable[[], Awaitable[Response]]
    ) -> Response:
        """Run `answer` under the Idempotency-Key replayer (if a key was sent) and count it."""
        try:
            response, replayed = await self.s.idempotent(request, answer)
            if replayed:
                self.s.metrics.count(Outcome.REPLAYED)
            return response
        except YokeError as exc:
            self.refused(exc)
            raise

    def refused(self, exc: YokeError) -> None:
        self.s.metrics.count(
            Outcome.REJECTED
            if exc.status == 429
            else Outcome.REFUSED
            if exc.status == 503
            else Outcome.INVALID
        )

    # -- routes ------------------------------------------------------------------------------
    async def create(self, request: Incoming) -> Response:
        """The hot route (a lean row). Without an Idempotency-Key there is nothing to replay:
        the start is answered in this one frame, with no replayer, no closure, and no
        long-poll slot unless `?wait=` asks for one."""
        if "idempotency-key" in request.headers:
            return await self.counted(request, lambda: self._create(request))
        try:
            return await self._create(request)
        except YokeError as exc:
            self.refused(exc)
            raise

    async def _create(self, request: Incoming) -> Response:
        p = principal_of(request)
        wait = self.wait_of(request) if request.scope["query_string"] else None
        body = parse(StartIn, await read_body(request))
        check_priority(request, body.priority)
        session = body.session  # None: the service's default (`default_session`)
        if session is not None:
            check_session(p, session)
        if wait:
            with self.polling(request, wait):
                start = await self._start(request, body, session, p)
                return await self.start_answer(start, wait)
        return self.answer_of(await self._start(request, body, session, p))

    def _start(
        self, request: Incoming, body: StartIn, session: str | None, p: Principal
    ) -> Awaitable[Start]:
        return self.s.executions.start(
            body.workflow,
            body.input,
            session=session,
            priority=body.priority,
            idempotency_key=request.headers.get("idempotency-key"),
            principal=p,
            at=body.at,
            delay=body.delay,
        )

    async def _visible(self, request: Request) -> Start:
        start_id = check_text(request.path_params["start_id"], "start_id")
        start = await self.s.executions.get(start_id)
        check_visible(principal_of(request), start.tenant, f"start {start_id}")
        return start

    async def show(self, request: Request) -> Response:
        wait = self.wait_of(request)
        start = await self._visible(request)
        if start.status in UNDECIDED and wait:
            with self.polling(request, wait):
                start = await self.s.executions.wait_granted(start.start_id, timeout=wait)
        return json_response(start_json(start))

    async def reprioritize(self, request: Request) -> Response:
        p = principal_of(request)
        start_id = check_text(request.path_params["start_id"], "start_id")
        body = parse(PriorityIn, await read_body(request))
        check_priority(request, body.priority)
        start = await self.s.executions.set_priority(start_id, body.priority, principal=p)
        return json_response(start_json(start))

    async def cancel(self, request: Request) -> Response:
        start = await self._visible(request)
        return json_response(start_json(await self.s.executions.cancel_start(start.start_id)))

    async def why(self, request: Request) -> Response:
        start = await self._visible(request)
        ledger = await self.s.store().ledger()
        granted, _ = self.s.recorder.totals(RATE_WINDOW)
        return json_response(
            explain(
                self.s.executions,
                start,
                ledger,
                principal=principal_of(request),
                grants_per_second=granted / RATE_WINDOW if granted else None,
            )
        )
