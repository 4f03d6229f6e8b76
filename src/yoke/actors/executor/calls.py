"""What an executor's `ctx` asks of its worker, served in the worker: the only way tenant code
running in an executor touches the store.

Each call belongs to a dispatch (`call_id`) of the executor's own tenant, and is done in that
tenant's name whatever its arguments say: an executor can write the state of the instance it
was given, and append or schedule events of its own tenant, nothing else. Arguments come from
an untrusted process, so each is checked here as the public API checks them (`BadValue`,
`BadType`); the error goes back to the executor as its class name and message and is raised
there. This module must never decide anything about the executor's life.
"""

from __future__ import annotations

from typing import Any

from yoke.actors.ctx import CtxHost, Fenced, InstanceStateCell, fire_time
from yoke.errors import BadType, YokeError


class CallRefused(Exception):
    """A call the protocol does not know: the executor is broken, not just the call."""


async def serve_call(
    host: CtxHost, tenant: str, cell: InstanceStateCell, op: str, args: Any
) -> tuple[bool, Any]:
    """(True, value) or (False, [error class, message]); `CallRefused` for an unknown op."""
    if not isinstance(args, list):
        raise CallRefused(f"the arguments of {op!r} are not a list")
    try:
        return True, await _do(host, tenant, cell, op, args)
    except Fenced as exc:
        return False, ["Fenced", str(exc)]
    except YokeError as exc:
        return False, [type(exc).__name__, str(exc)]


async def _do(host: CtxHost, tenant: str, cell: InstanceStateCell, op: str, args: list[Any]) -> Any:
    if op == "cas" and len(args) == 2:
        expected, new = args
        if isinstance(expected, bool) or not isinstance(expected, int):
            raise BadType("cas: the version must be an int")
        if not isinstance(new, dict):
            raise BadType(f"state.update's function must return a dict, not {type(new).__name__}")
        if await cell.offer(expected, new):
            return [True, cell.version, None]
        return [False, cell.version, cell.state]
    if op == "emit" and len(args) == 2:
        stream, data = args
        return await host.append(_stream(stream), data, tenant=tenant)
    if op == "schedule" and len(args) == 4:
        stream, data, at, delay = args
        for name, value in (("at", at), ("delay", delay)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float)
            ):
                raise BadType(f"schedule: {name} must be a number of seconds")
        when = fire_time(host.wall(), at, delay)
        return await host.schedule(_stream(stream), data, tenant=tenant, fire_at=when)
    raise CallRefused(f"no call {op!r} with {len(args)} arguments")


def _stream(stream: Any) -> str:
    if not isinstance(stream, str) or not stream:
        raise BadType("stream must be a non-empty str")
    return stream
