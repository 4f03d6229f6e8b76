"""`Spawned`: the operating-system side of one executor process, apart from its protocol.

It owns what the kernel hands back for a start: the `Popen` (exec, never fork: nothing of the
worker's state is kept), its process group, its cgroup, its exit seen through a pidfd (no
thread per child) and its output copied to the worker's log, bounded. The process started is
the top of the executor's tree: bubblewrap in the namespace tier (its death ends the pid
namespace, and every process in it), otherwise the executor's reaper (`yoke/executor.py`),
which kills every process below it before it exits; `kill_tree` ends the whole tree on every
path, and a cgroup, when there is one, is killed as a whole as well. `ExecutorProcess`
(`process.py`) holds one per life and speaks the protocol over the socket it was given. This
module also says what an executor sees of the environment and names how one ended; it knows
nothing of calls, events or the store, and never blocks the loop but for a start's vfork and
exec.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from yoke.actors.executor import sandbox
from yoke.actors.executor.boot import Launch

log = logging.getLogger("yoke.executor")

_OUTPUT_LINE = 2000  # characters of one output line kept in the log
_OUTPUT_LINES_PER_SEC = 50
_LEAF_TRIES = 40


class Spawned:
    """One started executor process: its pid, its exit, its process group, its output."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        *,
        spawn: Callable[[Coroutine[Any, Any, None]], object],
        reaper: bool,
        cgroup: Path | None = None,
    ) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.cgroup = cgroup
        self.reaper = reaper  # the top process is the executor's reaper (else bubblewrap)
        self._spawn = spawn
        self.exited: asyncio.Future[int] | None = None  # once `watch` was called

    def __repr__(self) -> str:
        exited = self.exited is not None and self.exited.done()
        return f"Spawned(pid={self.pid}, exited={exited})"

    def watch(self) -> None:
        """Watch for its exit from now on (through a pidfd: no thread per child)."""
        self.exited = self._watch_exit()

    def kill_tree(self) -> None:
        """End every process of the executor, whatever it did (`setsid` included): its cgroup
        at once if it has one; then, unless the top process was seen to exit (which ends the
        tree), the reaper is asked (SIGTERM: it kills everything below, then exits) or
        bubblewrap is killed (SIGKILL: its pid namespace ends with it)."""
        if self.cgroup is not None:
            sandbox.kill_leaf(self.cgroup)
        if self.exited is not None and self.exited.done():
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.reaper:
                os.kill(self.pid, signal.SIGTERM)
            else:
                os.killpg(self.pid, signal.SIGKILL)

    def kill_group(self) -> None:
        """SIGKILL the top process's group: what is left if the reaper did not end in time."""
        if self.exited is not None and self.exited.done():
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    async def forget(self) -> None:
        """After its exit: remove its cgroup, once the kernel has emptied it (a process is in
        it until it is reaped; a few tries, then it is left behind, reported)."""
        leaf = self.cgroup
        if leaf is None:
            return
        for _ in range(_LEAF_TRIES):
            sandbox.kill_leaf(leaf)
            if sandbox.remove_leaf(leaf):
                return
            await asyncio.sleep(0.05)
        log.warning("could not remove the cgroup %s of executor pid %d", leaf, self.pid)

    async def exit_code(self) -> int:
        """Its exit status once it exited; -1 at once if its exit is not watched."""
        if self.exited is None:
            return -1
        return await asyncio.shield(self.exited)

    def oom_killed(self) -> bool:
        return self.cgroup is not None and sandbox.oom_killed(self.cgroup)

    def _watch_exit(self) -> asyncio.Future[int]:
        popen = self.popen
        loop = asyncio.get_running_loop()
        exited: asyncio.Future[int] = loop.create_future()

        def reaped(code: int) -> None:
            if not exited.done():
                exited.set_result(code)

        try:
            pidfd = os.pidfd_open(popen.pid)
        except (AttributeError, OSError):  # not Linux >= 5.3: a thread waits instead
            self._spawn(_wait_in_thread(popen, lambda code: reaped(self._status(code))))
            return exited

        def readable() -> None:
            loop.remove_reader(pidfd)
            os.close(pidfd)
            reaped(self._status(popen.wait()))

        loop.add_reader(pidfd, readable)
        return exited

    def _status(self, code: int) -> int:
        """The executor's exit status: bubblewrap exits 128 + N when its command died of
        signal N, which is said here as Popen says it (-N)."""
        if not self.reaper and 128 < code < 128 + 65:
            return 128 - code
        return code

    async def log_output(self, tenant: Callable[[], str], monotonic: Callable[[], float]) -> None:
        """Its stdout and stderr, in the worker's log, line by line (bounded); `tenant` is
        asked per line, as a spare takes its tenant when it is bound."""
        pipe = self.popen.stdout
        assert pipe is not None
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=2**16)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
        budget, window = _OUTPUT_LINES_PER_SEC, monotonic()
        rest = b""
        try:
            while chunk := await reader.read(2**16):
                *lines, rest = (rest + chunk).split(b"\n")
                rest = rest[-_OUTPUT_LINE:]
                now = monotonic()
                if now - window >= 1.0:
                    budget, window = _OUTPUT_LINES_PER_SEC, now
                for line in lines[:budget]:
                    text = line[:_OUTPUT_LINE].decode(errors="replace")
                    log.info("[tenant %s pid %s] %s", tenant(), self.pid, text)
                budget = max(0, budget - len(lines))
        finally:
            transport.close()


def command(launch: Launch, *, writable: Path, leaf: Path | None) -> list[str]:
    """The command line of one executor: `python -I -m yoke.executor`, in bubblewrap in the
    namespace tier (`writable` its only writable directory), joining its cgroup `leaf` first
    (a shell writes its own pid there, then execs: nothing starts outside the cgroup)."""
    ns = launch.isolation.namespaces
    if ns is not None:
        argv = ns.command(launch.python, writable=writable)
    else:
        argv = [launch.python, "-I", "-m", "yoke.executor"]
    if leaf is not None:
        argv = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(leaf / "cgroup.procs"), *argv]
    return argv


def popen_executor(
    argv: list[str], *, sock: socket.socket, env: dict[str, str], cwd: Path
) -> subprocess.Popen[bytes]:
    """Exec `argv` in a process group of its own, `sock` its end of the socketpair. It starts
    as the worker's user: the executor takes its tenant's uid itself (`child.bind`). Popen
    blocks the loop for the vfork and exec only (about a millisecond); an asyncio subprocess
    would cost a thread per child on Python 3.11 and differs under uvloop."""
    return subprocess.Popen(
        argv,
        pass_fds=(sock.fileno(),),
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        process_group=0,
    )


def tenant_directory(base: Path, tenant: str, uid: int | None) -> Path:
    """The tenant's working directory under `base`, 0700, owned by its uid if it has one."""
    cwd = prepared(base) / sandbox.tenant_dir_name(tenant)
    cwd.mkdir(mode=0o700, exist_ok=True)
    if uid is not None:
        os.chown(cwd, uid, uid)
    return cwd


def spare_directory(base: Path) -> Path:
    """Where spares run until bound: a name no tenant's directory has (theirs end in a hash);
    the worker's own, 0700."""
    cwd = prepared(base) / ".spares"
    cwd.mkdir(mode=0o700, exist_ok=True)
    return cwd


def prepared(base: Path) -> Path:
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o711)  # tenants reach their own directory by name, list nothing
    return base


def environment(launch: Launch, cwd: Path, fd: int) -> dict[str, str]:
    """All an executor sees of the environment: the launch's variables (no credentials), its
    directory as HOME and TMPDIR, its end of the socketpair, its limits, what a spare preloads,
    and whether its bootstrap is its reaper. Its parent is the worker, unless bubblewrap's
    namespace init stands between them (then nobody's pid is to be checked)."""
    iso = launch.isolation
    return {
        **dict(launch.env),
        "HOME": str(cwd),
        "TMPDIR": str(cwd),
        "YOKE_EXECUTOR_FD": str(fd),
        "YOKE_EXECUTOR_PARENT": str(os.getpid() if iso.reaper else 0),
        "YOKE_EXECUTOR_LIMITS": compact_json(iso.limits()),
        "YOKE_EXECUTOR_PRELOAD": ",".join(launch.preload),
        "YOKE_EXECUTOR_REAPER": "1" if iso.reaper else "0",
    }


def ending(
    reason: str | None, code: int | None, *, asked: str | None, during_boot: bool, oom: bool
) -> tuple[str, bool]:
    """Why an executor ended (`reason`, if one is known already; else from its exit `code`,
    or the reason of a stop the worker `asked`), and whether it was killed from outside (a
    SIGKILL that is not its own doing)."""
    killed = code == -signal.SIGKILL
    if reason is None:
        if asked is not None:
            reason = asked
        elif during_boot:
            reason = f"boot_error: {exit_text(code)} during the boot"
        else:
            reason = f"crash: {exit_text(code)}"
    elif reason.startswith("protocol_error"):
        killed = False  # it broke the protocol: its own doing, though we killed it
    if oom:
        reason, killed = "oom: the cgroup's memory limit was reached", False
    return reason, killed


def exit_text(code: int | None) -> str:
    if code is None:
        return "did not exit after SIGKILL"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


async def _wait_in_thread(popen: subprocess.Popen[bytes], done: Callable[[int], None]) -> None:
    done(await asyncio.to_thread(popen.wait))
