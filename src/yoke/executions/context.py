"""Workflows and the `ctx` an execution runs with: recorded steps and child workflows.

A workflow is an `async def wf(ctx, input)` registered by name. `ctx.step(name, fn, *args)`
records each step's JSON result at its position in the execution log; an execution that was
resumed or restarted from a step starts with the earlier execution's steps copied in, so a
replay returns them without running `fn` again, and a replay that asks for another step name at
a recorded position raises `ReplayMismatch`. `ctx.child` runs a child workflow inline, on the
parent's slot (no admission), and is itself a step, so a resumed parent does not run it twice.

This module must never decide admission or name a store backend.
"""

from __future__ import annotations

import inspect
import json
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from yoke.errors import BadType, ReplayMismatch
from yoke.executions.model import encode_json
from yoke.executions.workflows import Registry, Workflow
from yoke.store.records import ExecutionStatus, NewExecution

if TYPE_CHECKING:  # an app's module names `yoke.Context` in annotations: keep it light
    from yoke.clock import Clock
    from yoke.store import StepRow, Store


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
    ) -> None:
        self._store = store
        self._registry = registry
        self._clock = clock
        self._instance_id = instance_id
        self.execution_id = execution_id
        self.workflow = workflow
        self.session = session
        self.tenant = tenant
        self._recorded = list(recorded)
        self._position = 0
        # What a cancelled child is recorded as; the runner says ABORTED during shutdown.
        self.cancel_status: Callable[[], ExecutionStatus] = lambda: ExecutionStatus.CANCELLED

    def __repr__(self) -> str:
        return (
            f"Context(execution_id={self.execution_id!r}, workflow={self.workflow!r}, "
            f"position={self._position}, recorded={len(self._recorded)})"
        )

    async def step(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run `fn(*args)` (awaited if it returns an awaitable) once; record its JSON result."""
        if not isinstance(name, str) or not name:
            raise BadType("a step name must be a non-empty str")
        position = self._position
        self._position += 1
        if position < len(self._recorded):
            done = self._recorded[position]
            if done.name != name:
                raise ReplayMismatch(
                    f"step {position} of execution {self.execution_id} was recorded as "
                    f"{done.name!r}, the replay asked for {name!r}"
                )
            return json.loads(done.result)
        result = fn(*args)
        if inspect.isawaitable(result):
            result = await result
        text = encode_json(result, f"the result of step {name!r}")
        await self._store.record_step(
            self.execution_id, position, name, text, now=self._clock.wall()
        )
        # Give back what a replay would give, so the first run and a resume see the same value.
        return json.loads(text)

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
        )
        ctx.cancel_status = self.cancel_status
        try:
            status, output, error = await run_workflow(fn, ctx, payload)
        except BaseException:
            await self._store.finish_execution(
                row.execution_id,
                self.cancel_status(),
                output=None,
                error="cancelled with its parent",
                now=self._clock.wall(),
            )
            raise
        await self._store.finish_execution(
            row.execution_id, status, output=output, error=error, now=self._clock.wall()
        )
        if status is not ExecutionStatus.SUCCEEDED:
            raise ChildFailed(row.execution_id, error)
        return None if output is None else json.loads(output)


class ChildFailed(Exception):
    """A child workflow failed; its parent fails too unless it catches this."""

    def __init__(self, execution_id: str, error: str | None) -> None:
        super().__init__(f"child execution {execution_id} failed: {error}")
        self.execution_id = execution_id
        self.error = error


async def run_workflow(
    fn: Workflow, ctx: Context, payload: str
) -> tuple[ExecutionStatus, str | None, str | None]:
    """Run one workflow body; return (status, output JSON, error). CancelledError propagates."""
    try:
        result = await fn(ctx, None if payload == "null" else json.loads(payload))
        return ExecutionStatus.SUCCEEDED, encode_json(result, "workflow output"), None
    except Exception as exc:  # the workflow's failure is data, recorded on the execution
        return ExecutionStatus.FAILED, None, f"{type(exc).__name__}: {exc}"
