"""`AsyncClient`: the v1 API of a yoke server, as async methods that return yoke's values and
raise yoke's errors.

Every method builds a `Call` (calls.py), sends it through `_send` (which tries again as
`Retries` says, with the same Idempotency-Key) and decodes the answer into a typed value
(decode.py); an error answer is raised as the `YokeError` it names (problems.py). The base URL
and the token default to `YOKE_URL` (else http://127.0.0.1:8000, where `yoke serve` listens)
and `YOKE_TOKEN`.

The sync `Client` (sync.py) is generated from this file by `python src/yoke/client/unasync.py`
(a test fails when it is out of date): edit this file, never that one.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import httpx

from yoke.client.actors import ActorList, Executors, Instance, InstancePage, Workers
from yoke.client.calls import (
    DEFAULT_TIMEOUT,
    DEFAULT_URL,
    NO_BODY,
    Answer,
    Call,
    Retries,
    failure_of,
    new_key,
    segment,
)
from yoke.client.decode import decode
from yoke.client.problems import ServerUnreachable, error_of
from yoke.client.values import Appended, AuditPage, ExecutionSteps, Ha, Tenant, Why
from yoke.client.views import Fairness, Overview, QueueView, Scheduler, Series, Timer
from yoke.errors import Conflict, ShuttingDown
from yoke.executions import AuditEntry, Execution, Limits, Page, Start, StartStatus
from yoke.executions.schedules import Schedule

LONGEST_POLL = 60.0  # the server's bound on one `?wait=`
KEEP: Any = object()  # a tenant setting left as it is


class AsyncClient:
    """`async with AsyncClient() as yoke: start = await yoke.start("report", {...})`."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retries: Retries | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = (url or os.environ.get("YOKE_URL") or DEFAULT_URL).rstrip("/")
        token = token or os.environ.get("YOKE_TOKEN") or None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.retries = retries or Retries()
        self._timeout = timeout
        self._http = httpx.AsyncClient(base_url=self.url, headers=headers, transport=transport)

    def __repr__(self) -> str:
        return f"AsyncClient({self.url!r})"

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- sending ---------------------------------------------------------------------------
    async def _send(self, call: Call) -> Answer:
        """The answer to `call` (tried again as `self.retries` says); an error answer raised."""
        tries = 0
        while True:
            tries += 1
            try:
                response = await self._http.request(
                    call.method,
                    call.path,
                    params=call.query(),
                    headers=call.headers(),
                    content=call.content(),
                    timeout=call.timeout(self._timeout),
                )
            except httpx.TransportError as exc:
                pause = self.retries.after_failure(call, failure_of(exc), tries)
                if pause is None:
                    raise ServerUnreachable(
                        f"{call.method} {self.url}{call.path}: {str(exc) or type(exc).__name__}"
                    ) from exc
            else:
                answer = Answer(
                    status=response.status_code,
                    headers={k.lower(): v for k, v in response.headers.items()},
                    body=response.content,
                )
                pause = self.retries.after_answer(call, answer, tries)
                if pause is None:
                    if answer.status >= 400:
                        raise error_of(answer.status, answer.headers, answer.body)
                    return answer
            await asyncio.sleep(pause)

    async def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, Any]:
        """Any route (`body`: JSON, None for none), as its status and parsed JSON (or text),
        for what the typed methods do not cover. An `Idempotency-Key` among `headers` is sent
        on every try, and makes a POST one that is retried."""
        extra = {k: v for k, v in (headers or {}).items() if k.lower() != "idempotency-key"}
        key = next((v for k, v in (headers or {}).items() if k.lower() == "idempotency-key"), None)
        call = Call(
            method=method,
            path=path,
            params=params or {},
            body=NO_BODY if body is None else body,
            key=key,
            extra=extra,
        )
        answer = await self._send(call)
        try:
            return answer.status, answer.json()
        except ValueError:
            return answer.status, answer.body.decode("utf-8", "replace")

    # -- starts ----------------------------------------------------------------------------
    async def start(
        self,
        workflow: str,
        input: Any = None,
        *,
        session: str | None = None,
        priority: int = 0,
        wait: float | None = None,
        idempotency_key: str | None = None,
        at: float | None = None,
        delay: float | None = None,
    ) -> Start:
        """Ask for a slot: GRANTED (with its `execution_id`) or QUEUED (with its position);
        with `at` (epoch seconds) or `delay` (seconds), SCHEDULED until then. `wait`: seconds
        (at most 60) to wait for the grant. Retried with one Idempotency-Key
        (`idempotency_key`, else a fresh one), so it never starts twice."""
        body: dict[str, Any] = {"workflow": workflow, "input": input, "priority": priority}
        if session is not None:
            body["session"] = session
        if at is not None:
            body["at"] = at
        if delay is not None:
            body["delay"] = delay
        call = Call(
            method="POST",
            path="/v1/starts",
            params={"wait": wait},
            body=body,
            key=idempotency_key or new_key(),
            wait=wait,
        )
        return decode(Start, (await self._send(call)).json())

    async def get_start(self, start_id: str, *, wait: float | None = None) -> Start:
        """A start; `wait`: seconds (at most 60) to wait while it is QUEUED."""
        path = f"/v1/starts/{segment(start_id)}"
        call = Call(method="GET", path=path, params={"wait": wait}, wait=wait)
        return decode(Start, (await self._send(call)).json())

    async def wait_granted(self, start_id: str, *, timeout: float | None = None) -> Start:
        """The start once it is no longer QUEUED (granted, refused, cancelled), or as it is
        after `timeout` seconds (None: as long as it takes)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = _poll(deadline)
            start = await self.get_start(start_id, wait=wait)
            if start.status not in _UNDECIDED or wait == 0:
                return start

    async def set_priority(self, start_id: str, priority: int) -> Start:
        """Change a queued start's priority (OPERATOR; 409 once it is no longer queued)."""
        path = f"/v1/starts/{segment(start_id)}"
        call = Call(method="PATCH", path=path, body={"priority": priority})
        return decode(Start, (await self._send(call)).json())

    async def cancel_start(self, start_id: str) -> Start:
        """Cancel a queued or scheduled start."""
        call = Call(method="DELETE", path=f"/v1/starts/{segment(start_id)}")
        return decode(Start, (await self._send(call)).json())

    async def why(self, start_id: str) -> Why:
        """Why a start waits: the limit that holds it, how many go first, what would help."""
        call = Call(method="GET", path=f"/v1/starts/{segment(start_id)}/why")
        return decode(Why, (await self._send(call)).json())

    # -- executions ------------------------------------------------------------------------
    async def executions(
        self,
        *,
        status: str | None = None,
        session: str | None = None,
        workflow: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page:
        """A page of executions, newest first (`cursor`: the `next_cursor` of the page before)."""
        params = {
            "status": status,
            "session": session,
            "workflow": workflow,
            "limit": limit,
            "cursor": cursor,
        }
        call = Call(method="GET", path="/v1/executions", params=params)
        return decode(Page, (await self._send(call)).json())

    async def execution(self, execution_id: str, *, wait: float | None = None) -> Execution:
        """An execution; `wait`: seconds (at most 60) to wait while it runs."""
        path = f"/v1/executions/{segment(execution_id)}"
        call = Call(method="GET", path=path, params={"wait": wait}, wait=wait)
        return decode(Execution, (await self._send(call)).json())

    async def wait(self, execution_id: str, *, timeout: float | None = None) -> Execution:
        """The execution once it has ended, or as it is after `timeout` seconds (None: as long
        as it takes)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = _poll(deadline)
            execution = await self.execution(execution_id, wait=wait)
            if execution.status.finished or wait == 0:
                return execution

    async def run(
        self,
        workflow: str,
        input: Any = None,
        *,
        session: str | None = None,
        priority: int = 0,
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> Execution:
        """Start `workflow`, wait for its grant and for its end (within `timeout` seconds; None:
        as long as it takes) and return the execution as it is then. A start refused while
        queued raises `ShuttingDown`, one cancelled `Conflict`, one still queued at the
        timeout `TimeoutError`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        start = await self.start(
            workflow,
            input,
            session=session,
            priority=priority,
            wait=_poll(deadline),
            idempotency_key=idempotency_key,
        )
        if start.execution_id is None:
            start = await self.wait_granted(start.start_id, timeout=_left(deadline))
        if start.execution_id is None:
            raise _not_granted(start)
        return await self.wait(start.execution_id, timeout=_left(deadline))

    async def steps(
        self, execution_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> ExecutionSteps:
        """An execution with a page of its recorded steps, its children and its lineage."""
        path = f"/v1/executions/{segment(execution_id)}/steps"
        call = Call(method="GET", path=path, params={"limit": limit, "cursor": cursor})
        return decode(ExecutionSteps, (await self._send(call)).json())

    async def restart(
        self,
        execution_id: str,
        *,
        from_step: str | None = None,
        priority: int = 0,
        wait: float | None = None,
        idempotency_key: str | None = None,
    ) -> Start:
        """Restart an execution (whole, or from a step): a new start, answered like `start`."""
        body: dict[str, Any] = {"priority": priority}
        if from_step is not None:
            body["from_step"] = from_step
        call = Call(
            method="POST",
            path=f"/v1/executions/{segment(execution_id)}/restart",
            params={"wait": wait},
            body=body,
            key=idempotency_key or new_key(),
            wait=wait,
        )
        return decode(Start, (await self._send(call)).json())

    async def resume(
        self,
        execution_id: str,
        *,
        priority: int = 0,
        wait: float | None = None,
        idempotency_key: str | None = None,
    ) -> Start:
        """Resume a failed, cancelled or aborted execution, re-using the steps it recorded."""
        call = Call(
            method="POST",
            path=f"/v1/executions/{segment(execution_id)}/resume",
            params={"wait": wait},
            body={"priority": priority},
            key=idempotency_key or new_key(),
            wait=wait,
        )
        return decode(Start, (await self._send(call)).json())

    async def cancel(self, execution_id: str) -> Execution:
        """Cancel a running execution."""
        call = Call(method="POST", path=f"/v1/executions/{segment(execution_id)}/cancel")
        return decode(Execution, (await self._send(call)).json())

    async def signal(
        self,
        execution_id: str,
        name: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
    ) -> Execution:
        """Send the signal `name` to an execution: its wait for it ends, or it is kept, in
        order, for the next. Retried with one Idempotency-Key, so it is sent once."""
        path = f"/v1/executions/{segment(execution_id)}/signals/{segment(name)}"
        call = Call(
            method="POST", path=path, body={"payload": payload}, key=idempotency_key or new_key()
        )
        return decode(Execution, (await self._send(call)).json())

    # -- control ---------------------------------------------------------------------------
    async def limits(self) -> Limits:
        return decode(Limits, (await self._send(Call(method="GET", path="/v1/limits"))).json())

    async def set_limits(self, limits: Limits) -> Limits:
        """Replace the limits (ADMIN): a limit that is None is off."""
        call = Call(method="PUT", path="/v1/limits", body=limits.to_json())
        return decode(Limits, (await self._send(call)).json())

    async def tenants(self) -> tuple[Tenant, ...]:
        """The tenants with stored settings (a tenant's token sees its own)."""
        answer = (await self._send(Call(method="GET", path="/v1/tenants"))).json()
        return decode(tuple[Tenant, ...], answer["items"])

    async def set_tenant(
        self,
        tenant: str,
        *,
        weight: float | None = KEEP,
        executions: Mapping[str, Any] | None = None,
        actors: Mapping[str, Any] | None = None,
    ) -> Tenant:
        """Change the fields given of a tenant's settings (ADMIN; `*`: every tenant's
        defaults): `weight`, and any of `executions` (`max_running`, `max_queued`, `rate`,
        `burst`) and `actors` (`max_running`, `append_rate`, `append_burst`, `max_instances`,
        `max_timers`); None clears a field (the tenant then follows `*`); the rest stay."""
        body: dict[str, Any] = {}
        if weight is not KEEP:
            body["weight"] = weight
        if executions:
            body["executions"] = dict(executions)
        if actors:
            body["actors"] = dict(actors)
        call = Call(method="PUT", path=f"/v1/tenants/{segment(tenant)}", body=body)
        return decode(Tenant, (await self._send(call)).json())

    # -- schedules -------------------------------------------------------------------------
    async def schedules(
        self, *, tenant: str | None = None, limit: int | None = None
    ) -> tuple[Schedule, ...]:
        """Schedules by tenant and name, with their next and last runs (a tenant's token sees
        its own; OPERATOR or ADMIN every tenant's, or `tenant`'s)."""
        call = Call(method="GET", path="/v1/schedules", params={"tenant": tenant, "limit": limit})
        return decode(tuple[Schedule, ...], (await self._send(call)).json()["items"])

    async def schedule(self, name: str, *, tenant: str | None = None) -> Schedule:
        call = Call(method="GET", path=f"/v1/schedules/{segment(name)}", params={"tenant": tenant})
        return decode(Schedule, (await self._send(call)).json())

    async def set_schedule(
        self,
        name: str,
        *,
        workflow: str,
        input: Any = None,
        session: str | None = None,
        cron: str | None = None,
        every: float | None = None,
        timezone: str = "UTC",
        catch_up: str = "one",
        tenant: str | None = None,
    ) -> Schedule:
        """Make or replace the schedule `name`: `workflow` started with `input` in `session`
        at each tick of `cron` (five fields, in `timezone`) or `every` seconds; ticks missed
        while no server ran: `catch_up` "one" (one start for them all) or "skip"."""
        body: dict[str, Any] = {"workflow": workflow, "input": input, "timezone": timezone}
        body["catch_up"] = catch_up
        for key, value in (("session", session), ("cron", cron), ("every", every)):
            if value is not None:
                body[key] = float(value) if key == "every" else value
        path = f"/v1/schedules/{segment(name)}"
        call = Call(method="PUT", path=path, params={"tenant": tenant}, body=body)
        return decode(Schedule, (await self._send(call)).json())

    async def delete_schedule(self, name: str, *, tenant: str | None = None) -> Schedule:
        """Delete a schedule; answers it as it was."""
        path = f"/v1/schedules/{segment(name)}"
        call = Call(method="DELETE", path=path, params={"tenant": tenant})
        return decode(Schedule, (await self._send(call)).json())

    async def scheduler(self) -> Scheduler:
        """Slots in use, the queue by session, the next picks."""
        call = Call(method="GET", path="/v1/scheduler")
        return decode(Scheduler, (await self._send(call)).json())

    async def audit(
        self, *, limit: int | None = None, offset: int | None = None
    ) -> tuple[AuditEntry, ...]:
        """Control-log entries, oldest first (ADMIN)."""
        call = Call(method="GET", path="/v1/audit", params={"limit": limit, "offset": offset})
        return decode(tuple[AuditEntry, ...], (await self._send(call)).json()["items"])

    async def recent_audit(
        self, *, limit: int | None = None, before: int | None = None
    ) -> AuditPage:
        """Control-log entries, newest first (ADMIN)."""
        params = {"limit": limit, "before": before}
        call = Call(method="GET", path="/v1/audit/recent", params=params)
        return decode(AuditPage, (await self._send(call)).json())

    async def ha(self) -> Ha:
        """This server's role in its high-availability pair and the current leader."""
        return decode(Ha, (await self._send(Call(method="GET", path="/v1/ha"))).json())

    async def metrics(self) -> str:
        """The Prometheus text of `/metrics` (a METRICS, OPERATOR or ADMIN token)."""
        answer = await self._send(Call(method="GET", path="/metrics"))
        return answer.body.decode()

    # -- the dashboard's reads -------------------------------------------------------------
    async def overview(self) -> Overview:
        call = Call(method="GET", path="/v1/overview")
        return decode(Overview, (await self._send(call)).json())

    async def queue(self, *, limit: int | None = None, q: str | None = None) -> QueueView:
        """Queued starts in predicted pick order (the first `limit`), and the limits."""
        call = Call(method="GET", path="/v1/queue", params={"limit": limit, "q": q})
        return decode(QueueView, (await self._send(call)).json())

    async def fairness(
        self, *, window: int | None = None, limit: int | None = None, q: str | None = None
    ) -> Fairness:
        """Per session over `window` seconds: shares of starts and slots, waits."""
        params = {"window": window, "limit": limit, "q": q}
        call = Call(method="GET", path="/v1/fairness", params=params)
        return decode(Fairness, (await self._send(call)).json())

    async def series(self, *, seconds: int | None = None) -> Series:
        call = Call(method="GET", path="/v1/series", params={"seconds": seconds})
        return decode(Series, (await self._send(call)).json())

    async def timers(self, *, limit: int | None = None) -> tuple[Timer, ...]:
        """The next timers due."""
        call = Call(method="GET", path="/v1/timers", params={"limit": limit})
        return decode(tuple[Timer, ...], (await self._send(call)).json()["items"])

    # -- events and actors -----------------------------------------------------------------
    async def append(
        self,
        stream: str,
        event: Mapping[str, Any],
        *,
        tenant: str | None = None,
        idempotency_key: str | None = None,
    ) -> Appended:
        """Append an event to a stream, in the caller's tenant or (OPERATOR or ADMIN) in
        `tenant`. Retried with one Idempotency-Key, so it is appended once."""
        call = Call(
            method="POST",
            path=f"/v1/streams/{segment(stream)}/events",
            params={"tenant": tenant},
            body=dict(event),
            key=idempotency_key or new_key(),
        )
        return decode(Appended, (await self._send(call)).json())

    async def actors(self, *, tenant: str | None = None) -> ActorList:
        call = Call(method="GET", path="/v1/actors", params={"tenant": tenant})
        return decode(ActorList, (await self._send(call)).json())

    async def instances(
        self,
        actor: str,
        *,
        tenant: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> InstancePage:
        params = {"tenant": tenant, "limit": limit, "cursor": cursor}
        call = Call(method="GET", path=f"/v1/actors/{segment(actor)}/instances", params=params)
        return decode(InstancePage, (await self._send(call)).json())

    async def instance(
        self, actor: str, instance_id: str, *, tenant: str | None = None
    ) -> Instance:
        path = f"/v1/actors/{segment(actor)}/instances/{segment(instance_id)}"
        call = Call(method="GET", path=path, params={"tenant": tenant})
        return decode(Instance, (await self._send(call)).json())

    async def workers(self) -> Workers:
        """The actor workers: live, stale or stopped, and what each owns (OPERATOR)."""
        call = Call(method="GET", path="/v1/workers")
        return decode(Workers, (await self._send(call)).json())

    async def executors(self, *, tenant: str | None = None, limit: int | None = None) -> Executors:
        """The tenants' executor processes, as their workers recorded them (OPERATOR)."""
        params = {"tenant": tenant, "limit": limit}
        call = Call(method="GET", path="/v1/executors", params=params)
        return decode(Executors, (await self._send(call)).json())


_UNDECIDED = (StartStatus.QUEUED, StartStatus.SCHEDULED)


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _poll(deadline: float | None) -> float:
    """The next long-poll's `wait`: what is left, at most the server's bound."""
    left = _left(deadline)
    return LONGEST_POLL if left is None else min(left, LONGEST_POLL)


def _not_granted(start: Start) -> Exception:
    """What a start that ended its wait without an execution stands for (as the server
    answers a start whose wait ends so)."""
    if start.status is StartStatus.QUEUED:
        return TimeoutError(f"start {start.start_id} is still queued")
    if start.status is StartStatus.CANCELLED:
        return Conflict(f"start {start.start_id} was cancelled while waiting")
    return ShuttingDown(f"start {start.start_id} was refused: {start.reason or 'refused'}")
