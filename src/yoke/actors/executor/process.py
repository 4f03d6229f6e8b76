"""`ExecutorProcess`: one life of one tenant's executor process, seen from its worker.

States (`ExecutorState`, in `repr` and in `GET /v1/executors`): SPARE (a warm spare: started
ahead of need, bound to no tenant; `warm`, then `assign` and `bind` make it a tenant's),
STARTING (spawned or being bound, not yet ready), READY (its tenant's calls are sent to it),
DRAINING (asked to stop: nothing new is sent), STOPPED (ended as asked) and FAILED (boot
failed, crashed, broke the protocol, or ran a call past its deadline). A life never goes
back: a restart is a new `ExecutorProcess`.

Start: `python -I -m yoke.executor` by exec (`subprocess.Popen`: no fork of the worker's
state is kept), in a process group of its own, with one end of a socketpair, a scrubbed
environment and the tenant's directory as working directory; the bootstrap stamps each boot
phase on the monotonic clock, which the worker subtracts from its own stamps. A spare is
started the same way but as the worker's user, in a directory of the worker's, and takes its
tenant's directory and uid when bound (`child.bind`), before the app is imported; its boot as
the tenant saw it is the bind alone (`queue`, `app`, `handshake`), its own boot is `spare_ms`.
The exit is watched through a pidfd (no thread per child), the output is logged with the tenant.

Calls: `send` sends a call (batched with the others of the same loop turn) and calls its
`done` callback when it ended, from the reader, in the same turn for every result of a frame:
no future and no task wake-up per call (the drain's hot path); `dispatch` is the same with a
future to await. The executor's own calls (state, emit, schedule) are served by `calls.py`, only
for a call that is in flight. Death: EOF, an exit, a protocol error or a call past
`dispatch_timeout` kills the process group and fails every call in flight with
`ExecutorLost`; a call is charged (`charge=True`) when it ran past its deadline, or when it was
the only call in flight when the executor died on its own. A stop asked by the worker charges
nothing. This module must never touch the store but through the cells and host it is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import os
import signal
import socket
import subprocess
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from yoke.actors.ctx import CtxHost, Fenced, InstanceStateCell
from yoke.actors.definitions import Event
from yoke.actors.executor import sandbox
from yoke.actors.executor.calls import CallRefused, serve_call
from yoke.actors.executor.protocol import PROTOCOL, Outbox, ProtocolError, frame, read_frame
from yoke.actors.runner import Done, ExecutorLost, RemoteError
from yoke.clock import Clock

log = logging.getLogger("yoke.executor")

PHASES = (
    "queue",
    "spawn",
    "interpreter",
    "sandbox",
    "runtime",
    "app",
    "handshake",
    "first_dispatch",
)
KNOWN_STATES = 10_000  # instances whose state version is tracked per executor (LRU)
MAX_OUTSTANDING_CALLS = 4096  # ctx calls of one executor being served at once, at most
_OUTPUT_LINE = 2000  # characters of one output line kept in the log
_OUTPUT_LINES_PER_SEC = 50
_EXIT_WAIT = 2.0


class ExecutorState(Enum):
    SPARE = "SPARE"  # a warm spare: booted, bound to no tenant yet
    STARTING = "STARTING"
    READY = "READY"
    DRAINING = "DRAINING"
    STOPPED = "STOPPED"
    FAILED = "FAILED"


LIVE = (ExecutorState.SPARE, ExecutorState.STARTING, ExecutorState.READY, ExecutorState.DRAINING)


class BootFailed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, kw_only=True, slots=True)
class Launch:
    """How this worker starts its executors (the same for every tenant)."""

    python: str
    app: str  # module:attribute
    preload: tuple[str, ...]  # yoke's modules the app imports: a spare imports them unbound
    path: tuple[str, ...]  # the worker's import path, given to the executor
    env: tuple[tuple[str, str], ...]  # the variables an executor sees (no credentials)
    directory: Path  # parent of the tenants' working directories
    isolation: sandbox.Isolation
    max_frame: int
    boot_timeout: float
    dispatch_timeout: float


class _Call:
    __slots__ = ("call_id", "cell", "done", "event_id", "started")

    def __init__(
        self, call_id: int, cell: InstanceStateCell, event_id: int, done: Done, started: float
    ) -> None:
        self.call_id = call_id
        self.cell = cell
        self.event_id = event_id  # the queue row's id (`Event.id`)
        self.done: Done | None = done  # None once told (a call ends once)
        self.started = started

    def end(self, error: BaseException | None) -> None:
        done, self.done = self.done, None
        if done is not None:
            done(error)


def _settle(fut: asyncio.Future[None], error: BaseException | None) -> None:
    if fut.done():
        return
    if error is None:
        fut.set_result(None)
    else:
        fut.set_exception(error)


class ExecutorProcess:
    def __init__(
        self,
        *,
        tenant: str,
        launch: Launch,
        host: CtxHost,
        clock: Clock,
        spawn: Callable[[Coroutine[Any, Any, None]], object],
        on_exit: Callable[[ExecutorProcess], None],
        on_done: Callable[[ExecutorProcess], None],
        on_dying: Callable[[ExecutorProcess], None] = lambda ex: None,
    ) -> None:
        self.tenant = tenant
        self._launch = launch
        self._host = host
        self._clock = clock
        self._spawn = spawn
        self._on_exit = on_exit
        self._on_done = on_done  # a call ended (the pool's first_dispatch stamp, activity)
        self._on_dying = on_dying  # it is going: send it nothing more
        self.state = ExecutorState.STARTING
        self.pid: int | None = None
        self.started_at = clock.wall()
        self.created = clock.monotonic()
        self.spawned: float | None = None  # monotonic, once its boot left the queue
        self.boot_ms: float | None = None
        self.spare_ms: float | None = None  # a warm spare's own boot: its spawn -> its hello
        self.phases: dict[str, float] = {}
        self.dispatches = 0
        self.stop_reason: str | None = None
        self.crashed = False  # ended on its own (or was killed for it), not as asked
        self.ready_at: float | None = None  # monotonic
        # The events in flight when it died, the one blamed for it (if any), and whether it
        # ended by its own doing (an exit, a fault, a bad frame, an OOM kill of its cgroup)
        # rather than killed from outside (SIGKILL) or by the worker.
        self.lost: tuple[int, ...] = ()
        self.blamed: int | None = None
        self.self_inflicted = False
        self._calls: dict[int, _Call] = {}  # in dispatch order
        self._known: dict[tuple[str, str], int] = {}  # instance -> state version it holds
        self._ids = itertools.count(1)
        self._loop = asyncio.get_running_loop()
        self._serving = 0
        self._popen: subprocess.Popen[bytes] | None = None
        self._exited: asyncio.Future[int] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._out: Outbox | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._stopping = False
        self._asked = "stopped"  # the reason of a stop the worker asked for
        self._dead = False
        self._cgroup: Path | None = None
        self._stamps: dict[str, float] = {}
        self._reader: asyncio.StreamReader | None = None  # a spare's, until it is bound
        self._hello: dict[str, Any] = {}

    def __repr__(self) -> str:
        return (
            f"ExecutorProcess({self.tenant!r}, {self.state.value}, pid={self.pid}, "
            f"active={self.active}, dispatches={self.dispatches})"
        )

    @property
    def active(self) -> int:
        return len(self._calls)

    @property
    def live(self) -> bool:
        return self.state in LIVE

    # -- boot -------------------------------------------------------------------------------
    async def boot(self, queued: float) -> None:
        """Start the process and wait until it is READY; `BootFailed` otherwise (then FAILED,
        its process group killed)."""
        self.phases["queue"] = queued

        async def cold() -> None:
            reader = await self._start()
            async with asyncio.timeout(self._launch.boot_timeout):
                await self._handshake(reader)

        await self._booting(cold())

    async def warm(self, queued: float) -> None:
        """Start the process as a warm spare (no tenant yet) and wait for its hello: then SPARE,
        until `bind`. `BootFailed` otherwise."""
        self.state = ExecutorState.SPARE
        self.phases["queue"] = queued

        async def spare() -> None:
            reader = await self._start(bound=False)
            async with asyncio.timeout(self._launch.boot_timeout):
                self._hello = await self._read_hello(reader)
            received = self._clock.monotonic()
            self._stamp_phases(self._hello.get("stamps"), received, upto="runtime")
            self._reader = reader
            self.spare_ms = (received - self._stamps["spawned"]) * 1000

        await self._booting(spare())
        self._spawn(self._watch_unbound())

    async def _booting(self, steps: Coroutine[Any, Any, None]) -> None:
        """Run the steps of a boot; however they fail, the boot failed (`_fail_boot`)."""
        if self._dead:  # killed while it waited for a boot slot
            steps.close()
            raise BootFailed(self.stop_reason or "stopped before its boot")
        try:
            await steps
        except TimeoutError:
            await self._fail_boot(f"boot_timeout: not ready in {self._launch.boot_timeout:g}s")
        except asyncio.IncompleteReadError:
            await self._fail_boot(None)  # it ended during the boot: its exit says how
        except (ProtocolError, ConnectionError, OSError) as exc:
            await self._fail_boot(f"boot_error: {type(exc).__name__}: {exc}")
        except BootFailed as exc:
            await self._fail_boot(exc.reason)

    async def _watch_unbound(self) -> None:
        """A spare is read by no one until it is bound: its exit is what says it died."""
        code = await self._exit_code()
        if self.state is ExecutorState.SPARE and not self._dead:
            self.crashed = True
            await self._gone(f"spare lost: {_exit_text(code)}")

    @property
    def bindable(self) -> bool:
        """A warm spare, alive, bound to no tenant yet."""
        return self.state is ExecutorState.SPARE and self._reader is not None and not self._dead

    def assign(self, tenant: str) -> None:
        """Give this spare (`bindable`) to `tenant`: from now on it is that tenant's executor,
        STARTING until `bind` has made it READY."""
        assert self.bindable
        self.tenant, self.state = tenant, ExecutorState.STARTING
        self.started_at = self._clock.wall()
        self.created = self._clock.monotonic()

    async def bind(self, queued: float) -> None:
        """Make this assigned spare its tenant's executor: it takes the tenant's directory (and
        uid), imports the app and says ready; `BootFailed` otherwise. Its boot is what the
        tenant waited: `queue`, `app` and `handshake` (the spare's own phases were counted
        when it was warmed)."""
        reader = self._reader
        assert reader is not None
        self.phases = {"queue": queued}
        self._stamps = {"spawned": self._clock.monotonic()}

        async def bound() -> None:
            async with asyncio.timeout(self._launch.boot_timeout):
                await self._init(reader, self._hello)

        await self._booting(bound())

    async def _start(self, *, bound: bool = True) -> asyncio.StreamReader:
        launch = self._launch
        iso = launch.isolation
        # A spare runs as the worker's user in a directory of the worker's until it is bound
        # (`child.bind` then takes the tenant's directory and uid).
        uid = iso.uid_of(self.tenant) if bound else None
        cwd = self._directory(uid) if bound else self._spare_directory()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = {
            **dict(launch.env),
            "HOME": str(cwd),
            "TMPDIR": str(cwd),
            "YOKE_EXECUTOR_FD": str(theirs.fileno()),
            "YOKE_EXECUTOR_PARENT": str(os.getpid()),
            "YOKE_EXECUTOR_LIMITS": _json(iso.limits()),
            "YOKE_EXECUTOR_PRELOAD": ",".join(launch.preload),
        }
        spawned = self.spawned = self._clock.monotonic()
        try:
            # Exec, not fork: nothing of the worker's state is kept. Popen blocks the loop for
            # the vfork and exec only (about a millisecond); an asyncio subprocess would cost
            # a thread per child on Python 3.11 and differs under uvloop.
            self._popen = subprocess.Popen(  # noqa: ASYNC220
                [launch.python, "-I", "-m", "yoke.executor"],
                pass_fds=(theirs.fileno(),),
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                process_group=0,
                user=uid,
                group=uid,
                extra_groups=[] if uid is not None else None,
            )
        except OSError as exc:
            ours.close()
            raise BootFailed(f"boot_error: cannot start {launch.python}: {exc}") from None
        finally:
            theirs.close()
        self._stamps = {"spawned": spawned, "returned": self._clock.monotonic()}
        self.pid = self._popen.pid
        if iso.cgroup is not None:
            name = self.tenant if bound else "spare"
            self._cgroup = sandbox.place(iso.cgroup, name, self.pid, memory_mb=iso.memory_mb)
        self._watch_exit()
        assert self._popen.stdout is not None
        self._spawn(self._log_output(self._popen.stdout))
        reader, self._writer = await asyncio.open_unix_connection(sock=ours)
        return reader

    def _directory(self, uid: int | None) -> Path:
        base = self._base_directory()
        cwd = base / sandbox.tenant_dir_name(self.tenant)
        cwd.mkdir(mode=0o700, exist_ok=True)
        if uid is not None:
            os.chown(cwd, uid, uid)
        return cwd

    def _spare_directory(self) -> Path:
        # A name no tenant's directory has (theirs end in a hash); the worker's own, 0700.
        cwd = self._base_directory() / ".spares"
        cwd.mkdir(mode=0o700, exist_ok=True)
        return cwd

    def _base_directory(self) -> Path:
        base = self._launch.directory
        base.mkdir(parents=True, exist_ok=True)
        base.chmod(0o711)  # tenants reach their own directory by name, list nothing
        return base

    async def _handshake(self, reader: asyncio.StreamReader) -> None:
        await self._init(reader, await self._read_hello(reader))

    async def _read_hello(self, reader: asyncio.StreamReader) -> dict[str, Any]:
        hello = await read_frame(reader, self._launch.max_frame)
        if hello.get("t") != "hello" or hello.get("v") != PROTOCOL:
            raise BootFailed(f"boot_error: protocol mismatch (got {hello.get('t')!r})")
        return hello

    async def _init(self, reader: asyncio.StreamReader, hello: dict[str, Any]) -> None:
        """Tell the executor its tenant and app, and wait for its ready."""
        launch = self._launch
        uid = launch.isolation.uid_of(self.tenant)
        assert self._writer is not None
        init = {
            "t": "init",
            "v": PROTOCOL,
            "tenant": self.tenant,
            "app": launch.app,
            "path": list(launch.path),
            "max": launch.max_frame,
            "dir": str(self._directory(uid)),
            "uid": uid,
            "parent": os.getpid(),
        }
        self._writer.write(frame(init))
        msg = await read_frame(reader, launch.max_frame)
        if msg.get("t") == "failed":
            raise BootFailed(f"boot_error: {str(msg.get('error', ''))[-4000:]}")
        if msg.get("t") != "ready":
            raise BootFailed(f"boot_error: expected ready, got {msg.get('t')!r}")
        received = self._clock.monotonic()
        self._stamp_phases(msg.get("stamps"), received, upto="ready")
        self.state = ExecutorState.READY
        self.ready_at = received
        self._out = Outbox(self._writer)
        self._spawn(self._read_loop(reader))

    def _stamp_phases(self, stamps: Any, received: float, *, upto: str) -> None:
        """The phases of a boot from the executor's stamps: a cold boot's (`upto="ready"`), a
        spare's own (`"runtime"`: up to its hello), or a bound spare's (`"ready"` after a
        bind: the init and the app only, what the tenant waited)."""
        s = self._stamps
        keys = ("start", "sandbox", "runtime") if upto == "runtime" else ("start", "sandbox",
                "runtime", "init", "app", "ready")  # fmt: skip
        try:
            c = {k: float(stamps[k]) for k in keys}
        except (TypeError, KeyError, ValueError):
            raise BootFailed(f"boot_error: {upto} without its stamps") from None
        if upto == "runtime":
            self.phases.update(
                spawn=s["returned"] - s["spawned"],
                interpreter=c["start"] - s["returned"],
                sandbox=c["sandbox"] - c["start"],
                runtime=c["runtime"] - c["sandbox"],
            )
            return
        if "returned" not in s:  # a bound spare: from the bind to its ready
            self.phases.update(
                app=c["app"] - c["init"],
                handshake=(c["init"] - s["spawned"]) + (received - c["app"]),
            )
        else:
            self.phases.update(
                spawn=s["returned"] - s["spawned"],
                interpreter=c["start"] - s["returned"],
                sandbox=c["sandbox"] - c["start"],
                runtime=c["runtime"] - c["sandbox"],
                app=c["app"] - c["init"],
                handshake=(c["init"] - c["runtime"]) + (received - c["app"]),
            )
        self.boot_ms = (received - s["spawned"]) * 1000

    async def _fail_boot(self, reason: str | None) -> None:
        self.crashed = True
        await self._gone(reason, during_boot=True)
        raise BootFailed(self.stop_reason or "boot_error")

    # -- calls ------------------------------------------------------------------------------
    @property
    def sendable(self) -> bool:
        """Whether a call may be sent now (READY, and not dying)."""
        return self.state is ExecutorState.READY and self._out is not None and not self._dead

    def dispatch(self, actor: str, cell: InstanceStateCell, event: Event) -> asyncio.Future[None]:
        """`send` with a future that answers when the call ended: what process() raised there
        (`RemoteError`, `Fenced`), or `ExecutorLost`."""
        fut: asyncio.Future[None] = self._loop.create_future()
        self.send(actor, cell, event, functools.partial(_settle, fut))
        return fut

    def send(self, actor: str, cell: InstanceStateCell, event: Event, done: Done) -> None:
        """Send one call to the executor; `done` is called once when it ended, with None or
        what it raised (as `dispatch` says). `ExecutorLost` at once if it is not READY."""
        out = self._out
        if self.state is not ExecutorState.READY or out is None or self._dead:
            raise ExecutorLost(f"the executor of {self.tenant!r} is {self.state.value}")
        key = (actor, cell.ref.instance_id)
        known = self._known.get(key)
        if known is None and len(self._known) >= KNOWN_STATES:
            old = next(iter(self._known))  # the oldest entry: its state is sent again if needed
            del self._known[old]
            out.add("forget", list(old))
        state = None if known == cell.version else cell.state
        self._known[key] = cell.version
        call_id = next(self._ids)
        self._calls[call_id] = _Call(call_id, cell, event.id, done, self._clock.monotonic())
        if self._watchdog is None:
            self._arm(self._launch.dispatch_timeout)
        self.dispatches += 1
        out.add(
            "run",
            [
                call_id,
                actor,
                cell.ref.instance_id,
                [
                    event.id,
                    event.event_id,
                    event.stream,
                    event.data,
                    event.group_id,
                    event.attempt,
                    event.appended_at,
                ],
                cell.version,
                state,
            ],
        )

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        reason: str | None = None
        try:
            while True:
                msg = await read_frame(reader, self._launch.max_frame)
                if msg.get("t") != "io":
                    raise ProtocolError(f"unexpected {msg.get('t')!r} frame")
                self._on_frame(msg)
        except (asyncio.IncompleteReadError, ConnectionError):
            reason = None  # EOF (or a reset: it died): the exit status says why
        except (ProtocolError, CallRefused) as exc:
            reason = f"protocol_error: {exc}"
        except OSError as exc:
            reason = f"socket error: {exc}"
        except (TypeError, ValueError, KeyError) as exc:
            reason = f"protocol_error: malformed message ({type(exc).__name__}: {exc})"
        if not self._stopping:
            self.crashed = True
        await self._gone(reason)

    def _on_frame(self, msg: dict[str, Any]) -> None:
        done = msg.get("done")
        if done:
            # The whole frame is checked before any call is told: a bad item fails the
            # executor with every call of the frame still in flight (each told once, lost).
            calls = self._calls
            ended = [(call_id, _outcome(error)) for call_id, error in done]
            ids = {call_id for call_id, _ in ended}
            if len(ids) != len(ended) or not all(call_id in calls for call_id in ids):
                raise ProtocolError("a done for a call that is not in flight (or twice)")
            for call_id, error in ended:
                calls.pop(call_id).end(error)
            self._on_done(self)
        for req_id, call_id, op, args in msg.get("call", ()):
            call = self._calls.get(call_id)
            if call is None:
                raise ProtocolError(f"a ctx call of call {call_id!r}, which is not in flight")
            if self._serving >= MAX_OUTSTANDING_CALLS:
                raise ProtocolError(f"more than {MAX_OUTSTANDING_CALLS} ctx calls at once")
            if op not in ("cas", "emit", "schedule"):
                raise CallRefused(f"no call {op!r}")
            self._serving += 1
            self._spawn(self._serve(req_id, call, str(op), args))

    async def _serve(self, req_id: Any, call: _Call, op: str, args: Any) -> None:
        try:
            ok, value = await serve_call(self._host, self.tenant, call.cell, op, args)
        except CallRefused as exc:
            self.crashed = True
            await self._gone(f"protocol_error: {exc}")
            return
        finally:
            self._serving -= 1
        if op == "cas":
            self._known[(str(call.cell.ref.actor), call.cell.ref.instance_id)] = call.cell.version
        if self._out is not None and not self._dead:
            self._out.add("res", [req_id, ok, value])

    # -- deadlines ----------------------------------------------------------------------------
    def _arm(self, delay: float) -> None:
        self._watchdog = asyncio.get_running_loop().call_later(max(0.0, delay), self._overdue)

    def _overdue(self) -> None:
        self._watchdog = None
        if not self._calls or self._dead:
            return
        oldest = next(iter(self._calls.values()))
        late = self._clock.monotonic() - oldest.started - self._launch.dispatch_timeout
        if late < 0:
            self._arm(-late)
            return
        self.crashed = True
        timeout = self._launch.dispatch_timeout
        self._spawn(self._gone(f"dispatch_timeout: a call ran past {timeout:g}s", blame=oldest))

    # -- the end --------------------------------------------------------------------------------
    async def stop(self, grace: float, reason: str) -> None:
        """End as asked: no new call is sent, calls in flight finish (up to `grace`), then the
        process exits; killed if it has not after `grace`."""
        if self._dead:
            return
        self._stopping, self._asked = True, reason
        if self.state is ExecutorState.READY:
            self.state = ExecutorState.DRAINING
        if self._out is None:
            grace = 0.0  # still booting: nothing to finish
        else:
            self._out.add("stop", True)
            self._out.flush()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self._exit_code()
        await self._gone(reason)

    def kill(self, reason: str) -> None:
        """Kill now (the process group); its calls in flight are lost without a charge."""
        self._stopping, self._asked = True, reason
        self._spawn(self._gone(reason))

    async def _gone(
        self, reason: str | None, *, blame: _Call | None = None, during_boot: bool = False
    ) -> None:
        if self._dead:
            return
        # From here no call is sent to it (`dispatch` refuses, the pool counts its tenant as
        # not ready); the calls in flight now are the ones it took down. It stays live (its
        # state unchanged) until its exit is seen and accounted for, so that no second
        # executor of its tenant can start before its failure counts (backoff, suspects).
        self._dead = True
        self._on_dying(self)
        calls = list(self._calls.values())
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        self._killpg()
        code: int | None = None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_EXIT_WAIT):
                code = await self._exit_code()
        killed = code == -signal.SIGKILL
        if reason is None:
            if self._stopping:
                reason = self._asked
            elif during_boot:
                reason = f"boot_error: {_exit_text(code)} during the boot"
            else:
                reason = f"crash: {_exit_text(code)}"
        elif reason.startswith("protocol_error"):
            killed = False  # it broke the protocol: its own doing, though we killed it
        if self._cgroup is not None and sandbox.oom_killed(self._cgroup):
            reason, killed = "oom: the cgroup's memory limit was reached", False
        self.self_inflicted = self.crashed and not self._stopping and not killed
        self.stop_reason = reason
        self.state = ExecutorState.FAILED if self.crashed else ExecutorState.STOPPED
        if self._writer is not None:
            self._writer.close()
        calls += [c for c in self._calls.values() if c not in calls]
        self._calls.clear()
        if self.crashed and blame is None and len(calls) == 1:
            blame = calls[0]  # it ran alone: the crash is its doing
        self.lost = tuple(c.event_id for c in calls)
        self.blamed = None if blame is None else blame.event_id
        for call in calls:
            call.end(ExecutorLost(reason, charge=call is blame))
        if self.pid is not None:
            log.log(
                logging.WARNING if self.crashed else logging.INFO,
                "executor of tenant %r (pid %d) %s: %s; %d calls in flight",
                self.tenant or "(a spare)",
                self.pid,
                self.state.value,
                reason,
                len(calls),
            )
        self._on_exit(self)

    def _killpg(self) -> None:
        if self.pid is None or (self._exited is not None and self._exited.done()):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    async def _exit_code(self) -> int:
        if self._exited is None:
            return -1
        return await asyncio.shield(self._exited)

    def _watch_exit(self) -> None:
        popen = self._popen
        assert popen is not None
        loop = asyncio.get_running_loop()
        exited: asyncio.Future[int] = loop.create_future()
        self._exited = exited

        def reaped(code: int) -> None:
            if not exited.done():
                exited.set_result(code)

        try:
            pidfd = os.pidfd_open(popen.pid)
        except (AttributeError, OSError):  # not Linux >= 5.3: a thread waits instead
            self._spawn(_wait_in_thread(popen, reaped))
            return

        def readable() -> None:
            loop.remove_reader(pidfd)
            os.close(pidfd)
            reaped(popen.wait())

        loop.add_reader(pidfd, readable)

    async def _log_output(self, pipe: Any) -> None:
        """The executor's stdout and stderr, in the worker's log, line by line (bounded)."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=2**16)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
        budget, window = _OUTPUT_LINES_PER_SEC, self._clock.monotonic()
        rest = b""
        try:
            while chunk := await reader.read(2**16):
                *lines, rest = (rest + chunk).split(b"\n")
                rest = rest[-_OUTPUT_LINE:]
                now = self._clock.monotonic()
                if now - window >= 1.0:
                    budget, window = _OUTPUT_LINES_PER_SEC, now
                for line in lines[:budget]:
                    text = line[:_OUTPUT_LINE].decode(errors="replace")
                    log.info("[tenant %s pid %s] %s", self.tenant, self.pid, text)
                budget = max(0, budget - len(lines))
        finally:
            transport.close()


async def _wait_in_thread(popen: subprocess.Popen[bytes], done: Callable[[int], None]) -> None:
    done(await asyncio.to_thread(popen.wait))


def _outcome(error: Any) -> Exception | None:
    """A `done` item's error (None, or [kind, text]) as what the call raised."""
    if error is None:
        return None
    kind, text = error
    return Fenced(str(text)) if kind == "fenced" else RemoteError(str(text))


def _exit_text(code: int | None) -> str:
    if code is None:
        return "did not exit after SIGKILL"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _json(value: Any) -> str:
    import json

    return json.dumps(value, separators=(",", ":"))
