"""`ExecutorProcess`: one life of one tenant's executor process, seen from its worker.

States (`states.py`: `ExecutorState`, in `repr` and in `GET /v1/executors`): SPARE (a warm
spare: started ahead of need, bound to no tenant; `warm`, then `assign` and `bind` make it a
tenant's), STARTING, READY, DRAINING (asked to stop), DYING (its end decided, its exit not yet
seen), STOPPED and FAILED. Only this object's methods move its state, each move checked
against the life's `MOVES` (`_move`); why it ended is its `ending`, decided with the move
that starts its end. A life never goes back: a restart is a new `ExecutorProcess`.

Start: `python -I -m yoke.executor` by exec (`spawned.py`: no fork of the worker's state is
kept), in bubblewrap in the namespace tier, with one end of a socketpair, a scrubbed
environment and the tenant's directory as working directory; the handshake and the phases of
its boot are `boot.py`'s. Every executor starts as the worker's user and takes its tenant's
directory and uid when told its tenant (`child.bind`), before the app is imported. A spare is
started before its tenant is known, in a directory of the worker's; its boot as the tenant saw
it is the bind alone (`queue`, `app`, `handshake`), its own boot is `spare_ms`.

Calls: `send` sends a call (batched with the others of the same loop turn) and calls its
`done` callback when it ended, from the reader, in the same turn for every result of a frame:
no future and no task wake-up per call (the drain's hot path); `dispatch` is the same with a
future to await. The executor's own calls (state, emit, schedule) are served by `calls.py`, only
for a call that is in flight. Death: EOF, an exit, a protocol error or a call past
`dispatch_timeout` makes it DYING at once (nothing more is sent), kills its tree and fails
every call in flight with `ExecutorLost`; a call is charged (`charge=True`) when it ran past its
deadline, or when it was the only call in flight when the executor died on its own. A stop
asked by the worker charges nothing. Every way it ends kills the whole tree it started
(`_end_tree`), `setsid` or not. This module must never touch the store but through the
cells and host it is given.

Parts, held by reference: `boot.py`, `spawned.py` (`Spawned`: the OS process, its exit, its
output) and `inflight.py` (`InFlight`: the calls in flight, their deadline, the state versions
the executor holds). This module keeps the life: its states, and what a death means for its
calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
from collections.abc import Callable, Coroutine
from typing import Any

from yoke.actors.ctx import CtxHost, InstanceStateCell
from yoke.actors.definitions import Event
from yoke.actors.executor import boot, sandbox, spawned
from yoke.actors.executor.boot import PHASES, BootFailed, Launch
from yoke.actors.executor.calls import CallRefused, serve_call
from yoke.actors.executor.inflight import Call, InFlight, settle
from yoke.actors.executor.protocol import Outbox, ProtocolError, read_frame
from yoke.actors.executor.states import (
    GOING,
    LIVE,
    Ending,
    ExecutorState,
    IllegalTransition,
    moved,
)
from yoke.actors.runner import Done, ExecutorLost
from yoke.clock import Clock

log = logging.getLogger("yoke.executor")

__all__ = [
    "LIVE",
    "PHASES",
    "BootFailed",
    "Ending",
    "ExecutorProcess",
    "ExecutorState",
    "IllegalTransition",
    "Launch",
]

_EXIT_WAIT = 2.0
_END_WAIT = 3 * _EXIT_WAIT  # an end decided elsewhere is awaited this long at most


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
        spare: bool = False,
    ) -> None:
        self.tenant = tenant
        self._launch = launch
        self._host = host
        self._clock = clock
        self._spawn = spawn
        self._on_exit = on_exit
        self._on_done = on_done  # a call ended (the pool's first_dispatch stamp, activity)
        self._on_dying = on_dying  # it is going: send it nothing more
        # A warm spare (`warm`) is SPARE from its birth; a cold executor (`boot`) STARTING.
        self._state = ExecutorState.SPARE if spare else ExecutorState.STARTING
        self.ending: Ending | None = None  # why it ends: set with the move that starts its end
        self.pid: int | None = None
        self.started_at = clock.wall()
        self.created = clock.monotonic()
        self.spawned: float | None = None  # monotonic, once its boot left the queue
        self.boot_ms: float | None = None
        self.spare_ms: float | None = None  # a warm spare's own boot: its spawn -> its hello
        self.phases: dict[str, float] = {}
        self.dispatches = 0
        self.stop_reason: str | None = None
        self.ready_at: float | None = None  # monotonic
        # The events in flight when it died, and the one blamed for it (if any).
        self.lost: tuple[int, ...] = ()
        self.blamed: int | None = None
        self._calls = InFlight(clock=clock, timeout=launch.dispatch_timeout, overdue=self._overdue)
        self._loop = asyncio.get_running_loop()
        self._child: spawned.Spawned | None = None  # once started
        self._writer: asyncio.StreamWriter | None = None
        self._out: Outbox | None = None
        self._asked = "stopped"  # the reason of a stop the worker asked for
        self._ended = asyncio.Event()  # its end, once decided, is done (STOPPED or FAILED)
        self._stamps: dict[str, float] = {}
        self._reader: asyncio.StreamReader | None = None  # a spare's, until it is bound
        self._hello: dict[str, Any] = {}

    def __repr__(self) -> str:
        return (
            f"ExecutorProcess({self.tenant!r}, {self.state.value}, pid={self.pid}, "
            f"active={self.active}, dispatches={self.dispatches})"
        )

    @property
    def state(self) -> ExecutorState:
        """Where it is in its life; moved only by its own methods (`_move`)."""
        return self._state

    def _move(self, to: ExecutorState) -> None:
        self._state = moved(self._state, to, repr(self))

    @property
    def active(self) -> int:
        return len(self._calls)

    @property
    def live(self) -> bool:
        """Not yet ended (DYING is live: its tenant gets no second executor until its end
        is accounted for)."""
        return self._state in LIVE

    @property
    def crashed(self) -> bool:
        """It ends, or ended, otherwise than as asked: FAILED."""
        return self.ending is not None and self.ending is not Ending.ASKED

    @property
    def self_inflicted(self) -> bool:
        """It ended by its own doing (an exit, a fault, a bad frame, an OOM kill of its
        cgroup), not killed from outside (SIGKILL) nor by the worker: one of the calls it took
        down may have done it."""
        return self._state is ExecutorState.FAILED and self.ending is Ending.FAULT

    # -- boot -------------------------------------------------------------------------------
    async def boot(self, queued: float) -> None:
        """Start the process and wait until it is READY; `BootFailed` otherwise (then FAILED,
        its process group killed)."""
        if self._state is ExecutorState.SPARE:
            raise IllegalTransition(f"{self!r}: a warm spare is bound (`bind`), not booted")
        self.phases["queue"] = queued

        async def cold() -> None:
            reader = await self._start()
            async with asyncio.timeout(self._launch.boot_timeout):
                await self._handshake(reader)

        await self._booting(cold())

    async def warm(self, queued: float) -> None:
        """Start the process as a warm spare (no tenant yet) and wait for its hello: then SPARE,
        until `bind`. `BootFailed` otherwise."""
        if self._state is not ExecutorState.SPARE and self._state not in GOING:
            raise IllegalTransition(f"{self!r}: only an executor born a spare is warmed")
        self.phases["queue"] = queued

        async def spare() -> None:
            reader = await self._start(bound=False)
            async with asyncio.timeout(self._launch.boot_timeout):
                self._hello = await boot.read_hello(reader, self._launch.max_frame)
            received = self._clock.monotonic()
            self._stamp_phases(self._hello.get("stamps"), received, upto="runtime")
            self._reader = reader
            self.spare_ms = (received - self._stamps["spawned"]) * 1000

        await self._booting(spare())
        self._spawn(self._watch_unbound())

    async def _booting(self, steps: Coroutine[Any, Any, None]) -> None:
        """Run the steps of a boot; however they fail, the boot failed (`_fail_boot`)."""
        if self._state in GOING:  # stopped or killed while it waited for a boot slot
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
        if self._state is ExecutorState.SPARE:
            await self._gone(Ending.FAULT, f"spare lost: {spawned.exit_text(code)}")

    @property
    def bindable(self) -> bool:
        """A warm spare, alive, bound to no tenant yet."""
        return self._state is ExecutorState.SPARE and self._reader is not None

    def assign(self, tenant: str) -> None:
        """Give this spare (`bindable`) to `tenant`: from now on it is that tenant's executor,
        STARTING until `bind` has made it READY."""
        if not self.bindable:
            raise IllegalTransition(f"{self!r} is not a warm spare to bind")
        self._move(ExecutorState.STARTING)
        self.tenant = tenant
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
        # A spare runs in a directory of the worker's until it is bound; in the namespace
        # tier it sees the tenants' parent directory (0711: each tenant's own is 0700, and
        # with a uid per tenant owned by that uid), since its tenant is not known yet.
        # Every executor takes its tenant's directory and uid when bound (`child.bind`).
        if bound:
            uid = iso.uid_of(self.tenant)
            cwd = writable = spawned.tenant_directory(launch.directory, self.tenant, uid)
        else:
            cwd, writable = spawned.spare_directory(launch.directory), launch.directory
        leaf = None
        if iso.cgroup is not None:
            name = f"{sandbox.tenant_dir_name(self.tenant) if bound else 'spare'}-{id(self):x}"
            leaf = sandbox.make_leaf(
                iso.cgroup, name, memory_mb=iso.memory_mb, limits=iso.cgroup_limits
            )
        argv = spawned.command(launch, writable=writable, leaf=leaf)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = spawned.environment(launch, cwd, theirs.fileno())
        started = self.spawned = self._clock.monotonic()
        try:
            popen = spawned.popen_executor(argv, sock=theirs, env=env, cwd=cwd)
        except OSError as exc:
            ours.close()
            if leaf is not None:
                sandbox.remove_leaf(leaf)  # nothing ever ran in it
            raise BootFailed(f"boot_error: cannot start {argv[0]}: {exc}") from None
        finally:
            theirs.close()
        self._stamps = {"spawned": started, "returned": self._clock.monotonic()}
        child = self._child = spawned.Spawned(
            popen, spawn=self._spawn, reaper=iso.reaper, cgroup=leaf
        )
        self.pid = child.pid
        child.watch()
        self._spawn(child.log_output(lambda: self.tenant, self._clock.monotonic))
        reader, self._writer = await asyncio.open_unix_connection(sock=ours)
        return reader

    async def _handshake(self, reader: asyncio.StreamReader) -> None:
        await self._init(reader, await boot.read_hello(reader, self._launch.max_frame))

    async def _init(self, reader: asyncio.StreamReader, hello: dict[str, Any]) -> None:
        """Tell the executor its tenant and app, and wait for its ready."""
        launch = self._launch
        uid = launch.isolation.uid_of(self.tenant)
        assert self._writer is not None
        msg = await boot.init(
            reader,
            self._writer,
            launch=launch,
            tenant=self.tenant,
            directory=spawned.tenant_directory(launch.directory, self.tenant, uid),
            uid=uid,
        )
        received = self._clock.monotonic()
        if self._state is not ExecutorState.STARTING:  # stopped or killed during the handshake
            raise BootFailed(self.stop_reason or "stopped during its boot")
        self._stamp_phases(msg.get("stamps"), received, upto="ready")
        self._move(ExecutorState.READY)
        self.ready_at = received
        self._out = Outbox(self._writer)
        self._spawn(self._read_loop(reader))

    def _stamp_phases(self, stamps: Any, received: float, *, upto: str) -> None:
        """The phases of this boot (`boot.boot_phases`); its `boot_ms` once it is ready."""
        self.phases.update(boot.boot_phases(stamps, self._stamps, received, upto=upto))
        if upto != "runtime":
            self.boot_ms = (received - self._stamps["spawned"]) * 1000

    async def _fail_boot(self, reason: str | None) -> None:
        await self._gone(Ending.FAULT, reason, during_boot=True)
        raise BootFailed(self.stop_reason or "boot_error")

    # -- calls ------------------------------------------------------------------------------
    @property
    def sendable(self) -> bool:
        """Whether a call may be sent now (READY)."""
        return self._state is ExecutorState.READY and self._out is not None

    def dispatch(self, actor: str, cell: InstanceStateCell, event: Event) -> asyncio.Future[None]:
        """`send` with a future that answers when the call ended: what process() raised there
        (`RemoteError`, `Fenced`), or `ExecutorLost`."""
        fut: asyncio.Future[None] = self._loop.create_future()
        self.send(actor, cell, event, functools.partial(settle, fut))
        return fut

    def send(self, actor: str, cell: InstanceStateCell, event: Event, done: Done) -> None:
        """Send one call to the executor; `done` is called once when it ended, with None or
        what it raised (as `dispatch` says). `ExecutorLost` at once if it is not READY."""
        out = self._out
        if self._state is not ExecutorState.READY or out is None:
            raise ExecutorLost(f"the executor of {self.tenant!r} is {self._state.value}")
        self._calls.send(out, actor, cell, event, done)
        self.dispatches += 1

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
        # Its end while it drains is the stop asked for; before, its own doing.
        asked = self._state is ExecutorState.DRAINING
        await self._gone(Ending.ASKED if asked else Ending.FAULT, reason)

    def _on_frame(self, msg: dict[str, Any]) -> None:
        done = msg.get("done")
        if done:
            self._calls.ended(done)
            self._on_done(self)
        for req_id, call, op, args in self._calls.requests(msg.get("call", ())):
            self._spawn(self._serve(req_id, call, op, args))

    async def _serve(self, req_id: Any, call: Call, op: str, args: Any) -> None:
        try:
            ok, value = await serve_call(self._host, self.tenant, call.cell, op, args)
        except CallRefused as exc:
            await self._gone(Ending.FAULT, f"protocol_error: {exc}")
            return
        finally:
            self._calls.served()
        if op == "cas":
            self._calls.holds(call)
        if self._out is not None and self._state not in GOING:
            self._out.add("res", [req_id, ok, value])

    # -- deadlines ----------------------------------------------------------------------------
    def _overdue(self, oldest: Call) -> None:
        timeout = self._launch.dispatch_timeout
        end = self._dying(
            Ending.FAULT, f"dispatch_timeout: a call ran past {timeout:g}s", blame=oldest
        )
        if end is not None:
            self._spawn(end)

    # -- the end --------------------------------------------------------------------------------
    def stop(self, grace: float, reason: str) -> Coroutine[Any, Any, None]:
        """End as asked. The state moves now, with no await: a READY executor is DRAINING
        (nothing new is sent, it is told to stop), one still booting or a spare is DYING.
        What is returned, awaited, lets the calls in flight finish (up to `grace`), then the
        process exit; killed if it has not after `grace`."""
        if self._state is ExecutorState.READY:
            self._move(ExecutorState.DRAINING)
        if self._state is ExecutorState.DRAINING:
            self._asked = reason
            assert self._out is not None  # READY had it
            self._out.add("stop", True)
            self._out.flush()
            return self._drain(grace, reason)
        return self._dying(Ending.ASKED, reason) or self._end_done()

    async def _end_done(self) -> None:
        """Wait for the end decided already (by another path) to be done: bounded, since its
        own waits are (`_end_tree`), and its task may never run (its pool stopped first)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_END_WAIT):
                await self._ended.wait()

    async def _drain(self, grace: float, reason: str) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self._exit_code()
        await self._gone(Ending.ASKED, reason)

    def kill(self, reason: str) -> None:
        """Kill it now (its tree), as a failure: DYING at once; its calls in flight are lost
        without a charge unless one ran alone."""
        end = self._dying(Ending.KILLED, reason)
        if end is not None:
            self._spawn(end)

    async def _gone(
        self,
        ending: Ending,
        reason: str | None,
        *,
        blame: Call | None = None,
        during_boot: bool = False,
    ) -> None:
        """End it (`_dying`), or wait for the end already decided to be done."""
        end = self._dying(ending, reason, blame=blame, during_boot=during_boot)
        await (end or self._end_done())

    def _dying(
        self,
        ending: Ending,
        reason: str | None,
        *,
        blame: Call | None = None,
        during_boot: bool = False,
    ) -> Coroutine[Any, Any, None] | None:
        """Decide its end now, with no await: DYING, `ending` set, no call sent to it any more
        (`send` refuses, the pool counts its tenant as not ready); the calls in flight now are
        the ones it took down. What is returned ends it (`_end`); None if its end was decided
        already. It stays live until its exit is seen and accounted for, so that no second
        executor of its tenant can start before its failure counts (backoff, suspects)."""
        if self._state in GOING:
            return None
        self._move(ExecutorState.DYING)
        self.ending = ending
        self._on_dying(self)
        return self._end(reason, self._calls.close(), blame=blame, during_boot=during_boot)

    async def _end(
        self, reason: str | None, calls: list[Call], *, blame: Call | None, during_boot: bool
    ) -> None:
        """Kill its tree, learn how it exited, then end its life and tell its calls."""
        try:
            await self._bury(reason, calls, blame=blame, during_boot=during_boot)
        finally:
            self._ended.set()

    async def _bury(
        self, reason: str | None, calls: list[Call], *, blame: Call | None, during_boot: bool
    ) -> None:
        fault = self.ending is Ending.FAULT
        code = await self._end_tree(natural=reason is None and fault)
        reason, killed = spawned.ending(
            reason,
            code,
            asked=None if fault else self._asked,
            during_boot=during_boot,
            oom=self._child is not None and self._child.oom_killed(),
        )
        if self._child is not None and code is not None:
            await self._child.forget()
        if fault and killed:
            self.ending = Ending.OUTSIDE
        self.stop_reason = reason
        self._move(ExecutorState.FAILED if self.crashed else ExecutorState.STOPPED)
        if self._writer is not None:
            self._writer.close()
        calls, blame = self._calls.lose(calls, blame=blame, crashed=self.crashed)
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
                self._state.value,
                reason,
                len(calls),
            )
        self._on_exit(self)

    async def _end_tree(self, *, natural: bool) -> int | None:
        """Kill every process of this executor (whether or not its exit was seen); its exit
        status, None if it did not exit even after SIGKILL. After an EOF (`natural`) the top
        process is given a moment to exit on its own first: the executor's end is seen on its
        socket before bubblewrap or the reaper, above it, has passed on its exit status."""
        child = self._child
        if child is None:
            return -1
        code: int | None = None
        if natural:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_EXIT_WAIT / 4):
                    code = await self._exit_code()
        child.kill_tree()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_EXIT_WAIT / 2):
                code = await self._exit_code()
        if code is None:  # the reaper did not end in time (stopped, traced): kill it too
            child.kill_group()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_EXIT_WAIT / 2):
                    code = await self._exit_code()
        return code

    async def _exit_code(self) -> int:
        return -1 if self._child is None else await self._child.exit_code()
