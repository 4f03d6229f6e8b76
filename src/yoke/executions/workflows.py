"""Workflows by name, as `@app.workflow` registers them: what an app defines, and no more.

Kept apart from `context` (which runs them against the store) so that defining an app, as an
executor process does when it imports one, loads none of the execution engine.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from yoke.errors import BadType, BadValue, NotFound

if TYPE_CHECKING:
    from yoke.executions.context import Context
    from yoke.executions.steps import Retry

Workflow = Callable[["Context", Any], Awaitable[Any]]


@dataclass(frozen=True, kw_only=True, slots=True)
class Options:
    """How a workflow runs: `retry`, the rule of its steps that name none; `timeout`, seconds
    from its grant after which it ends TIMED_OUT (None: never)."""

    retry: Retry | None = None
    timeout: float | None = None


NO_OPTIONS = Options()


class Registry:
    """Workflows by name (and name by function), as registered with `@app.workflow`."""

    def __init__(self) -> None:
        self._by_name: dict[str, Workflow] = {}
        self._by_fn: dict[Workflow, str] = {}
        self._options: dict[str, Options] = {}

    def register(
        self,
        fn: Workflow,
        name: str | None = None,
        *,
        retry: Retry | None = None,
        timeout: float | None = None,
    ) -> str:
        if not inspect.iscoroutinefunction(fn):
            raise BadType("a workflow must be an `async def wf(ctx, input)` function")
        name = name if name is not None else fn.__name__
        if not isinstance(name, str) or not name:
            raise BadType("a workflow name must be a non-empty str")
        if name in self._by_name and self._by_name[name] is not fn:
            raise BadValue(f"another workflow is already registered as {name!r}")
        if retry is not None or timeout is not None:
            # Checked here, where the mistake is made; `steps` is loaded only then.
            from yoke.executions.steps import check_retry, check_step_timeout

            options = Options(
                retry=check_retry(retry),
                timeout=check_step_timeout(timeout, "a workflow's timeout"),
            )
            self._options[name] = options
        else:
            self._options.pop(name, None)
        self._by_name[name] = fn
        self._by_fn[fn] = name
        return name

    def options(self, name: str) -> Options:
        return self._options.get(name, NO_OPTIONS)

    def name_of(self, workflow: str | Workflow) -> str:
        if isinstance(workflow, str):
            if workflow not in self._by_name:
                raise NotFound(f"no workflow named {workflow!r}")
            return workflow
        if callable(workflow):
            name = self._by_fn.get(workflow)
            if name is None:
                raise NotFound(f"{workflow!r} is not a registered workflow")
            return name
        raise BadType(
            f"workflow must be a name or a registered function, not {type(workflow).__name__}"
        )

    def get(self, name: str) -> Workflow:
        fn = self._by_name.get(name)
        if fn is None:
            raise NotFound(f"no workflow named {name!r}")
        return fn

    def names(self) -> list[str]:
        return sorted(self._by_name)
