"""Workflows and the `ctx` an execution runs with: recorded steps and child workflows.

A workflow is an `async def wf(ctx, input)` registered by name. `ctx.step(name, fn, *args,
retry=, timeout=)` runs `fn(*args)` and records the step at its position in the execution log:
its JSON result once it succeeds; each failed attempt before the pause to the next (RETRYING,
with its error and when the next is due); its last error once it gives up (FAILED, and the
exception is raised in the workflow). The attempts are `steps.Attempts`; `timeout` bounds an
attempt of an async step (`StepTimeout`).

An execution that was resumed or restarted from a step starts with the earlier execution's
steps copied in: a replay returns a SUCCEEDED step's result without running `fn` again, runs a
RETRYING one when its next attempt is due (counting on), and runs again one that gave up; a
replay that asks for another step name at a recorded position raises `ReplayMismatch`.
`ctx.child` runs a child workflow inline, on the parent's slot (no admission), bounded by the
child workflow's own timeout, and is itself a step, so a resumed parent does not run it twice.

A failed execution's error is a `Failure`: the exception's type, message and traceback, and the
step and attempt it came out of (the step that gave up, when the workflow's exception is that
step's or was raised from it; the step running, when the execution was stopped).

This module must never decide admission or name a store backend.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from yoke.errors import TRANSIENT, BadType, BadValue, Conflict, ReplayMismatch, StoreUnavailable
from yoke.executions.failures import failure_of, log_failed
from yoke.executions.model import Failure, check_seconds, encode_json
from yoke.executions.steps import (
    ONCE,
    Attempts,
    Retry,
    StepTimeout,
    check_retry,
    check_step_timeout,
)
from yoke.executions.waits import Suspended, sleep_until, wait_for
from yoke.executions.workflows import Registry, Workflow
from yoke.retry import RetryPolicy, until_done
from yoke.store.records import ExecutionStatus, NewExecution, StepRecord, StepStatus

if TYPE_CHECKING:  # an app's module names `yoke.Context` in annotations: keep it light
    from yoke.clock import Clock
    from yoke.store import StepRow, Store

__all__ = ["ChildFailed", "Context", "Suspended", "run_bounded", "run_workflow", "stopped_failure"]

log = logging.getLogger("yoke.executions")
Outcome = tuple[ExecutionStatus, str | None, Failure | None]
# Writes one step's record and answers once it is committed: whether it was written (False:
# the step SUCCEEDED already with another result, or has another name).
WriteStep = Callable[[StepRecord], Awaitable[bool]]


class Context:
    """What a running workflow sees. One per execution (children get their own)."""

    def __init__(
        self,
        *,
        store: Store,
        registry: Registry,
        clock: Clock,
        instance_id: str,
        execution_id: str,
        workflow: str,
        session: str,
        tenant: str,
        recorded: Sequence[StepRow] = (),
        retry: RetryPolicy | None = None,
        stopping: Callable[[], bool] = lambda: False,
        write_step: WriteStep | None = None,
        priority: int = 0,
        on_wait: Callable[[], None] | None = None,
    ) -> None:
        self._store = store
        # The executions' group commit of steps (`service`), or one transaction per record.
        self._write_step = write_step or self._write_alone
        # A top-level run may give its slot back to wait (`waits.py`); a child runs on its
        # parent's slot and may not. `on_wait`: a wake-up was scheduled (the timer loop looks).
        self._priority = priority
        self._on_wait = on_wait
        # How a step's record waits out a store that does not answer: a step done while the
        # store is down is recorded once it is back, never lost (stopping: given up).
        self._store_retry = retry or RetryPolicy()
        self._stopping = stopping
        self._registry = registry
        self._clock = clock
        self._instance_id = instance_id
        self.execution_id = execution_id
        self.workflow = workflow
        self.session = session
        self.tenant = tenant
        self._recorded = {row.position: row for row in recorded}
        self._position = 0
        options = registry.options(workflow)
        self._retry = options.retry  # the rule of its steps that name none
        self.timeout = options.timeout
        # What a cancelled child is recorded as; the runner says ABORTED during shutdown.
        self.cancel_status: Callable[[], ExecutionStatus] = lambda: ExecutionStatus.CANCELLED
        self.running: tuple[str, int] | None = None  # the step and attempt under way
        self.gave_up: tuple[BaseException, str, int] | None = None  # the last step that did

    def __repr__(self) -> str:
        return (
            f"Context(execution_id={self.execution_id!r}, workflow={self.workflow!r}, "
            f"position={self._position}, recorded={len(self._recorded)})"
        )

    async def sleep(self, seconds: float) -> None:
        """Sleep `seconds`, holding no slot: the execution is WAITING until then, and is then
        admitted again through the queue (its recorded steps replayed). Durable: the wake time
        is recorded, so a restart or recovery ends the sleep at the same time."""
        wake = self._clock.wall() + check_seconds(seconds, "seconds")
        await sleep_until(self, wake)

    async def sleep_until(self, epoch_seconds: float) -> None:
        """Sleep until `epoch_seconds` (wall clock), as `sleep`."""
        if isinstance(epoch_seconds, bool) or not isinstance(epoch_seconds, int | float):
            raise BadType("sleep_until takes epoch seconds (a number)")
        await sleep_until(self, float(epoch_seconds))

    async def wait_for(self, name: str, timeout: float | None = None) -> Any:
        """Wait, holding no slot, for the signal `name` (`app.executions.signal`) and return
        its payload; signals sent before the wait are kept, in order, for it. Past `timeout`
        seconds with none, raise `yoke.WaitTimeout`."""
        return await wait_for(self, name, timeout)

    def next_position(self, name: str) -> tuple[int, StepRow | None]:
        """The next position in the execution's log, and what is recorded there (checked to
        be a step named `name`)."""
        position = self._position
        self._position += 1
        done = self._recorded.get(position)
        if done is not None and done.name != name:
            raise ReplayMismatch(
                f"step {position} of execution {self.execution_id} was recorded as "
                f"{done.name!r}, the replay asked for {name!r}"
            )
        return position, done

    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: Retry | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Run `fn(*args)` (awaited if it returns an awaitable) until it succeeds or its retry
        rule gives up; record each failed attempt and the JSON result."""
        if not isinstance(name, str) or not name:
            raise BadType("a step name must be a non-empty str")
        rule = check_retry(retry) or self._retry or ONCE
        limit = check_step_timeout(timeout)
        position = self._position
        self._position += 1
        done = self._recorded.get(position)
        if done is not None:
            if done.name != name:
                raise ReplayMismatch(
                    f"step {position} of execution {self.execution_id} was recorded as "
                    f"{done.name!r}, the replay asked for {name!r}"
                )
            if done.status is StepStatus.SUCCEEDED:
                return json.loads(done.result)
        attempts = Attempts(rule, done)
        try:
            if attempts.due is not None:  # recorded between two attempts: wait out the pause
                self.running = (name, attempts.made)
                await asyncio.sleep(max(0.0, attempts.due - self._clock.wall()))
            while True:
                attempt = attempts.begin()
                self.running = (name, attempt)
                try:
                    value = await _attempt(name, fn, args, limit)
                except Exception as exc:
                    failure = failure_of(exc, step=name, attempt=attempt)
                    pause = attempts.failed(exc)
                    if pause is None:
                        await self._gave_up(position, name, attempts, exc, failure)
                        raise
                    due = self._clock.wall() + pause
                    await self._record(position, name, StepStatus.RETRYING, attempts, failure, due)
                    await asyncio.sleep(pause)  # the slot stays held meanwhile
                    continue
                try:
                    text = encode_json(value, f"step {name!r}'s result")
                except BadValue as exc:  # the same value would come back: no retry
                    await self._gave_up(position, name, attempts, exc, failure_of(exc))
                    raise
                await self._record(position, name, StepStatus.SUCCEEDED, attempts, result=text)
                self.running = None
                # Give back what a replay would give, so the first run and a resume agree.
                return json.loads(text)
        except Exception:  # a cancel (stopped, timed out) leaves `running` naming its step
            self.running = None
            raise

    async def _gave_up(
        self, position: int, name: str, attempts: Attempts, exc: BaseException, failure: Failure
    ) -> None:
        failure = Failure(
            type=failure.type,
            message=failure.message,
            traceback=failure.traceback,
            step=name,
            attempt=attempts.made,
        )
        await self._record(position, name, StepStatus.FAILED, attempts, failure)
        self.gave_up = (exc, name, attempts.made)

    async def _record(
        self,
        position: int,
        name: str,
        status: StepStatus,
        attempts: Attempts,
        failure: Failure | None = None,
        retry_at: float | None = None,
        *,
        result: str = "null",
    ) -> None:
        record = StepRecord(
            execution_id=self.execution_id,
            position=position,
            name=name,
            status=status,
            result=result,
            error=None if failure is None else failure.encoded(),
            attempts=attempts.made,
            first_attempt=attempts.first,
            retry_at=retry_at,
        )
        write = self._write_step
        try:
            written: bool | None = await write(record)
        except TRANSIENT:  # waited out by the one retry rule (most writes need none)
            again = await until_done(
                lambda: write(record),
                policy=self._store_retry,
                what=f"recording step {name!r} of {self.execution_id}",
                stopping=self._stopping,
                log=log,
            )
            if again is None:
                raise StoreUnavailable(
                    f"step {name!r} of {self.execution_id} was not recorded"
                ) from None
            written = again[0]
        if not written:
            raise Conflict(
                f"step {position} of {self.execution_id} was recorded as done already "
                "(or by another name)"
            )

    async def _write_alone(self, record: StepRecord) -> bool:
        (written,) = await self._store.write_steps([record], now=self._clock.wall())
        return written

    def blame(self, exc: BaseException) -> tuple[str | None, int | None]:
        """The step (and attempt) the workflow's exception `exc` came out of: the last step
        that gave up, if `exc` is its exception or was raised from (or while handling) it."""
        if self.gave_up is None:
            return None, None
        cause, name, attempt = self.gave_up
        seen: BaseException | None = exc
        for _ in range(32):  # a chain is short; a cycle must not hang us
            if seen is None:
                break
            if seen is cause:
                return name, attempt
            seen = seen.__cause__ or seen.__context__
        return None, None

    async def child(self, workflow: str | Workflow, input: Any = None) -> Any:
        """Run a child workflow on this execution's slot and return its output."""
        name = self._registry.name_of(workflow)
        payload = encode_json(input, "child input")
        return await self.step(f"child:{name}", self._run_child, name, payload)

    async def _run_child(self, name: str, payload: str) -> Any:
        fn = self._registry.get(name)
        row = await self._store.create_child(
            NewExecution(
                execution_id=str(uuid.uuid4()),
                start_id=None,
                workflow=name,
                session=self.session,
                tenant=self.tenant,
                input=payload,
                parent_id=self.execution_id,
                restarted_from=None,
                resumed_from=None,
                instance_id=self._instance_id,
                created_at=self._clock.wall(),
            )
        )
        ctx = Context(
            store=self._store,
            registry=self._registry,
            clock=self._clock,
            instance_id=self._instance_id,
            execution_id=row.execution_id,
            workflow=name,
            session=self.session,
            tenant=self.tenant,
            retry=self._store_retry,
            stopping=self._stopping,
            write_step=self._write_step,
        )
        ctx.cancel_status = self.cancel_status
        try:
            status, output, error = await run_bounded(fn, ctx, payload)
        except BaseException:
            stopped = stopped_failure(ctx, "stopped with its parent")
            await self._store.finish_execution(
                row.execution_id,
                self.cancel_status(),
                output=None,
                error=stopped.encoded(),
                now=self._clock.wall(),
            )
            raise
        await self._store.finish_execution(
            row.execution_id,
            status,
            output=output,
            error=None if error is None else error.encoded(),
            now=self._clock.wall(),
        )
        if status is not ExecutionStatus.SUCCEEDED:
            raise ChildFailed(row.execution_id, error)
        return None if output is None else json.loads(output)


async def _attempt(
    name: str, fn: Callable[..., Any], args: Sequence[Any], limit: float | None
) -> Any:
    """One attempt: `fn(*args)`, awaited if it returns an awaitable, within `limit` seconds."""
    result = fn(*args)
    if not inspect.isawaitable(result):
        return result
    if limit is None:
        return await result
    try:
        async with asyncio.timeout(limit) as scope:
            return await result
    except TimeoutError:
        if scope.expired():
            raise StepTimeout(name, limit) from None
        raise


class ChildFailed(Exception):
    """A child workflow failed; its parent fails too unless it catches this."""

    def __init__(self, execution_id: str, error: Failure | None) -> None:
        super().__init__(f"child execution {execution_id} failed: {error}")
        self.execution_id = execution_id
        self.error = error


def stopped_failure(ctx: Context, message: str, kind: str = "Cancelled") -> Failure:
    """The error of an execution stopped from outside: the step it was in, if any."""
    step, attempt = ctx.running if ctx.running is not None else (None, None)
    return Failure(type=kind, message=message, step=step, attempt=attempt)


async def run_workflow(fn: Workflow, ctx: Context, payload: str) -> Outcome:
    """Run one workflow body; return (status, output JSON, error). CancelledError propagates."""
    try:
        result = await fn(ctx, None if payload == "null" else json.loads(payload))
        return ExecutionStatus.SUCCEEDED, encode_json(result, "workflow output"), None
    except Exception as exc:  # the workflow's failure is data, recorded on the execution
        step, attempt = ctx.blame(exc)
        failure = failure_of(exc, step=step, attempt=attempt)
        log_failed(ctx.workflow, ctx.execution_id, ExecutionStatus.FAILED.value, failure)
        return ExecutionStatus.FAILED, None, failure


async def run_bounded(fn: Workflow, ctx: Context, payload: str) -> Outcome:
    """`run_workflow` within the workflow's timeout: past it, the body is stopped (its children
    with it) and the execution is TIMED_OUT. A cancel from outside propagates."""
    limit = ctx.timeout
    if limit is None:
        return await run_workflow(fn, ctx, payload)
    try:
        async with asyncio.timeout(limit) as scope:
            return await run_workflow(fn, ctx, payload)
    except TimeoutError:
        if not scope.expired():
            raise
    failure = stopped_failure(ctx, f"ran past its timeout of {limit:g} s", "TimedOut")
    log_failed(ctx.workflow, ctx.execution_id, ExecutionStatus.TIMED_OUT.value, failure)
    return ExecutionStatus.TIMED_OUT, None, failure
