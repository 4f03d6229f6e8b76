"""`Spawned`: the operating-system side of one executor process, apart from its protocol.

It owns what the kernel hands back for a start: the `Popen` (exec, never fork: nothing of the
worker's state is kept), its process group, its cgroup, its exit seen through a pidfd (no
thread per child) and its output copied to the worker's log, bounded. `ExecutorProcess`
(`process.py`) holds one per life and speaks the protocol over the socket it was given; this
module knows nothing of calls, tenants' events or the store, and never blocks the loop but for
the vfork and exec of a start.
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

log = logging.getLogger("yoke.executor")

_OUTPUT_LINE = 2000  # characters of one output line kept in the log
_OUTPUT_LINES_PER_SEC = 50


class Spawned:
    """One started executor process: its pid, its exit, its process group, its output."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        *,
        cgroup: Path | None,
        spawn: Callable[[Coroutine[Any, Any, None]], object],
    ) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.cgroup = cgroup
        self._spawn = spawn
        self.exited = self._watch_exit()

    def __repr__(self) -> str:
        return f"Spawned(pid={self.pid}, exited={self.exited.done()})"

    def kill_group(self) -> None:
        """SIGKILL its process group, unless its exit was seen already."""
        if self.exited.done():
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    async def exit_code(self) -> int:
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
            self._spawn(_wait_in_thread(popen, reaped))
            return exited

        def readable() -> None:
            loop.remove_reader(pidfd)
            os.close(pidfd)
            reaped(popen.wait())

        loop.add_reader(pidfd, readable)
        return exited

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


def popen_executor(
    python: str, *, sock: socket.socket, env: dict[str, str], cwd: Path, uid: int | None
) -> subprocess.Popen[bytes]:
    """Exec `python -I -m yoke.executor` in a process group of its own, `sock` its end of the
    socketpair. Popen blocks the loop for the vfork and exec only (about a millisecond); an
    asyncio subprocess would cost a thread per child on Python 3.11 and differs under uvloop."""
    return subprocess.Popen(
        [python, "-I", "-m", "yoke.executor"],
        pass_fds=(sock.fileno(),),
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
