"""The executor process's runtime: it imports the app, then runs the `process()` calls its
worker sends, each with a `ctx` whose state, emits and timers are served by the worker.

Started by `yoke/executor.py` once the limits are applied. It holds no database URL and no
token: every effect of tenant code goes back over the socket (`protocol.py`) and the worker
does it, in the tenant's name only. `ctx.state.update(fn)` runs `fn` here, on the state as
this process last saw it, and offers the result to the worker as a compare-and-set on the
state's version; if the worker's copy moved on, it answers with the current state and `fn`
runs again, so no update is lost (updates of one instance are serialised here by a lock, so
they conflict only with writers elsewhere). The worker sends an instance's state with a call
only when this process's copy is older. A dispatch is one asyncio task; what finishes in one
turn of the loop goes back as one frame.

On EOF (the worker died, or closed the socket) the process exits at once. This module must
never import a store backend or the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import importlib
import itertools
import json
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import yoke.errors as errors
from yoke.actors.ctx import ActorCtx, Fenced, StateHandle
from yoke.actors.definitions import ActorRegistry, Event, encode
from yoke.actors.executor import eager
from yoke.actors.executor.protocol import PROTOCOL, Outbox, ProtocolError, frame, read_frame

MAX_CALL_BYTES = 4 * 1024 * 1024  # one emit, schedule or state write, encoded, at most
_TRACEBACK_CHARS = 8192
_EXIT_BOOT_FAILED = 3


def run(stamps: dict[str, float], arm_parent_death: Callable[[], None]) -> None:
    """`arm_parent_death()`: the bootstrap's, set again after a change of uid."""
    asyncio.run(_main(stamps, arm_parent_death))


async def _main(stamps: dict[str, float], arm_parent_death: Callable[[], None]) -> None:
    fd = int(os.environ.pop("YOKE_EXECUTOR_FD"))
    preload = [m for m in os.environ.pop("YOKE_EXECUTOR_PRELOAD", "").split(",") if m]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=fd)
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    for module in preload:  # yoke's own modules that the app imports (`launch.preload_of`)
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    stamps["runtime"] = time.monotonic()
    writer.write(frame({"t": "hello", "v": PROTOCOL, "pid": os.getpid(), "stamps": stamps}))
    try:
        init = await read_frame(reader, None)
    except asyncio.IncompleteReadError:
        os._exit(0)
    stamps["init"] = time.monotonic()
    try:
        bind(init, arm_parent_death)
        registry = load_registry(str(init["app"]), [str(p) for p in init.get("path", ())])
    except BaseException:
        text = traceback.format_exc()[-_TRACEBACK_CHARS:]
        writer.write(frame({"t": "failed", "error": text}))
        with contextlib.suppress(OSError):
            await writer.drain()
        os._exit(_EXIT_BOOT_FAILED)
    stamps["app"] = time.monotonic()
    if hasattr(asyncio, "eager_task_factory"):  # Python 3.12+: a call that ends at once
        asyncio.get_running_loop().set_task_factory(asyncio.eager_task_factory)  # needs no step
    executor = ChildExecutor(str(init["tenant"]), registry, Outbox(writer, limit=init.get("max")))
    stamps["ready"] = time.monotonic()
    writer.write(frame({"t": "ready", "stamps": stamps, "actors": registry.names()}))
    await executor.serve(reader)
    await writer.drain()
    writer.close()


def bind(init: dict[str, Any], arm_parent_death: Callable[[], None]) -> None:
    """Become the executor of `init`'s tenant, before any of the app is imported: its uid
    (when the worker runs as root and gives one), then its working directory, HOME and TMPDIR.

    Every executor starts as the worker's user and runs only yoke's code until here (a warm
    spare before its tenant is known). The uid comes first: the directory is the tenant's,
    mode 0700, and in the namespace tier root holds no capability to enter it. A change of uid
    clears the parent-death signal, so it is set again (and if the parent died meanwhile,
    this exits); from then on no capability is left."""
    uid = init.get("uid")
    if uid is not None and os.geteuid() != uid:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        arm_parent_death()
    directory = init.get("dir")
    if directory:
        os.chdir(directory)
        os.environ["HOME"] = os.environ["TMPDIR"] = str(directory)


def load_registry(spec: str, path: list[str]) -> ActorRegistry:
    """The actor definitions of `module:attribute` (an App, an ActorRuntime or a registry)."""
    for entry in path:
        if entry not in sys.path:
            sys.path.append(entry)
    module_name, _, attr = spec.partition(":")
    target = getattr(importlib.import_module(module_name), attr)
    if isinstance(target, ActorRegistry):
        return target
    # An App's definitions first: its `actors` is its runtime, built (and its engines
    # imported) on first use, which an executor never needs.
    for name in ("actor_registry", "actors", "registry"):
        candidate = getattr(target, name, None)
        if isinstance(candidate, ActorRegistry):
            return candidate
        registry = getattr(candidate, "registry", None)
        if isinstance(registry, ActorRegistry):
            return registry
    raise TypeError(f"{spec} holds no actor definitions (an App, ActorRuntime or ActorRegistry)")


class ChildExecutor:
    def __init__(self, tenant: str, registry: ActorRegistry, outbox: Outbox) -> None:
        self.tenant = tenant
        self._registry = registry
        self._out = outbox
        self._states: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._waiting: dict[int, asyncio.Future[tuple[bool, Any]]] = {}
        self._ids = itertools.count(1)
        self._tasks: dict[int, asyncio.Task[None]] = {}  # the calls that waited, by call id

    async def serve(self, reader: asyncio.StreamReader) -> None:
        """Run what the worker sends until it says stop (then finish what runs) or goes."""
        while True:
            try:
                msg = await read_frame(reader, None)
            except (asyncio.IncompleteReadError, ProtocolError, ConnectionError):
                os._exit(0)  # the worker is gone: nothing here is worth finishing
            for req_id, ok, value in msg.get("res", ()):
                fut = self._waiting.pop(req_id, None)
                if fut is not None and not fut.done():
                    fut.set_result((ok, value))
            for actor, instance_id in msg.get("forget", ()):
                self._states.pop((actor, instance_id), None)
                self._locks.pop((actor, instance_id), None)
            for call in msg.get("run", ()):
                self._start(*call)
            if msg.get("stop"):
                while self._tasks:
                    await asyncio.wait(list(self._tasks.values()))
                self._out.flush()
                return

    def _start(
        self,
        call_id: int,
        actor_name: str,
        instance_id: str,
        ev: list[Any],
        version: int,
        state: dict[str, Any] | None,
    ) -> None:
        key = (actor_name, instance_id)
        if state is not None:
            self._states[key] = (version, state)
        event = Event(
            id=ev[0],
            event_id=ev[1],
            stream=ev[2],
            tenant=self.tenant,
            data=ev[3],
            group_id=ev[4],
            attempt=ev[5],
            appended_at=ev[6],
        )
        # Started eagerly (`eager.py`): a call that never waits ends here, with no task; one
        # that waits goes on as a task of its own (so calls run concurrently), which drops its
        # own reference by its call id when it ends (cheaper than a done-callback: one loop
        # handle less; and than `current_task()`, which a call that never waited would pay).
        task = eager.start(self._run(call_id, actor_name, key, event))
        if task is not None:
            self._tasks[call_id] = task

    async def _run(self, call_id: int, actor_name: str, key: tuple[str, str], event: Event) -> None:
        error: list[str] | None = None
        try:
            actor = self._registry.get(actor_name)
            if actor is None:
                raise LookupError(f"the app defines no actor {actor_name!r} here")
            ctx = ActorCtx(
                host=RemoteHost(self, call_id),
                actor=actor.name,
                instance_id=key[1],
                tenant=self.tenant,
                state=RemoteState(self, key, call_id),
            )
            await actor.process(ctx, event)
        except Fenced as exc:
            error = ["fenced", str(exc)]
        except Exception as exc:
            error = ["error", f"{type(exc).__name__}: {exc}"]
        self._out.add("done", [call_id, error])
        self._tasks.pop(call_id, None)

    # -- what a ctx asks of the worker ---------------------------------------------------------
    async def call(self, call_id: int, op: str, args: list[Any]) -> Any:
        if len(encode(args)) > MAX_CALL_BYTES:
            raise errors.BadValue(f"{op}: more than {MAX_CALL_BYTES} bytes of JSON")
        req_id = next(self._ids)
        fut: asyncio.Future[tuple[bool, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[req_id] = fut
        self._out.add("call", [req_id, call_id, op, args])
        ok, value = await fut
        if ok:
            return value
        kind, message = value
        if kind == "Fenced":
            raise Fenced(message)
        cls = getattr(errors, kind, None)
        if isinstance(cls, type) and issubclass(cls, errors.YokeError):
            raise cls(message)
        raise errors.YokeError(f"{kind}: {message}")

    def state(self, key: tuple[str, str]) -> tuple[int, dict[str, Any]]:
        return self._states.get(key, (0, {}))

    async def update(
        self,
        call_id: int,
        key: tuple[str, str],
        fn: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> dict[str, Any]:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        async with lock:
            while True:
                version, current = self.state(key)
                new = fn(copy.deepcopy(current))
                if not isinstance(new, dict):
                    raise errors.BadType(
                        f"state.update's function must return a dict, not {type(new).__name__}"
                    )
                value = json.loads(encode(new))  # what the store keeps: checked and copied
                ok, now_version, now_state = await self.call(call_id, "cas", [version, value])
                if ok:
                    self._states[key] = (now_version, value)
                    return copy.deepcopy(value)
                self._states[key] = (now_version, now_state)


class RemoteState(StateHandle):
    """`ctx.state` in an executor: as in the worker, its writes offered to the worker."""

    __slots__ = ("_call_id", "_ex", "_key")

    def __init__(self, ex: ChildExecutor, key: tuple[str, str], call_id: int) -> None:
        self._ex = ex
        self._key = key
        self._call_id = call_id

    def get(self) -> dict[str, Any]:
        return copy.deepcopy(self._ex.state(self._key)[1])

    async def update(self, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        if not callable(fn):
            raise errors.BadType("state.update needs a function state -> new state")
        return await self._ex.update(self._call_id, self._key, fn)

    def __repr__(self) -> str:
        return f"RemoteState(version={self._ex.state(self._key)[0]})"


class RemoteHost:
    """The `CtxHost` of a ctx in an executor: emits and timers are done by the worker, in the
    executor's tenant whatever is asked."""

    __slots__ = ("_call_id", "_ex")

    def __init__(self, ex: ChildExecutor, call_id: int) -> None:
        self._ex = ex
        self._call_id = call_id

    async def append(self, stream: str, data: Any, *, tenant: str) -> int:
        got: int = await self._ex.call(self._call_id, "emit", [stream, data])
        return got

    async def schedule(self, stream: str, data: Any, *, tenant: str, fire_at: float) -> int:
        got: int = await self._ex.call(self._call_id, "schedule", [stream, data, fire_at, None])
        return got

    def wall(self) -> float:
        return time.time()  # the host's clock, as the worker's
