"""The chaos harness's processes: `Proc` (a `yoke serve` or `yoke worker` child, its log, the
signals it gets) and `ProxyProcess` (a fault proxy, tests/ha/proxyproc.py, in a process of its
own, driven over its stdin). Neither knows what the harness does with them.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode, urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[2]


class ProxyProcess:
    """A fault proxy (tests/ha/proxyproc.py) in a process of its own, driven over its stdin."""

    def __init__(self, upstream_url: str, log: Path) -> None:
        self._upstream = urlsplit(upstream_url)
        self._log = log
        self._process: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self.port = 0

    def __repr__(self) -> str:
        return f"ProxyProcess(port={self.port})"

    @property
    def url(self) -> str:
        """The upstream URL, with its host and port replaced by the proxy's."""
        p = self._upstream
        user = p.netloc.rpartition("@")[0]
        netloc = f"{user}@127.0.0.1:{self.port}" if user else f"127.0.0.1:{self.port}"
        return urlunsplit(p._replace(netloc=netloc))

    async def __aenter__(self) -> ProxyProcess:
        with self._log.open("ab") as err:
            self._process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.ha.proxyproc",
                urlunsplit(self._upstream),
                cwd=ROOT,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
            )
        first = await self._line()
        if not first.startswith("port "):
            raise AssertionError(f"the proxy did not start: {first!r}")
        self.port = int(first.split()[1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        assert process.stdin is not None
        process.stdin.close()  # the end of its stdin stops it
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()

    async def _line(self) -> str:
        assert self._process is not None and self._process.stdout is not None
        line = await asyncio.wait_for(self._process.stdout.readline(), 30)
        return line.decode().strip()

    async def _command(self, command: str) -> str:
        async with self._lock:
            assert self._process is not None and self._process.stdin is not None
            self._process.stdin.write(command.encode() + b"\n")
            await self._process.stdin.drain()
            answer = await self._line()
        if answer.startswith("error") or not answer:
            raise AssertionError(f"proxy command {command!r}: {answer!r}")
        return answer

    async def blackhole(self) -> None:
        await self._command("blackhole")

    async def restore(self) -> None:
        await self._command("restore")

    async def reset(self) -> None:
        await self._command("reset")

    async def drop_upstream(self) -> None:
        await self._command("drop_upstream")

    async def upstream_ports(self) -> set[int]:
        return {int(p) for p in (await self._command("ports")).split()[1:]}


def with_params(url: str, **params: str) -> str:
    parts = urlsplit(url)
    query = "&".join(q for q in (parts.query, urlencode(params)) if q)
    return urlunsplit(parts._replace(query=query))


class Proc:
    """One child process (`yoke serve` or `yoke worker`), its log, and the signals it gets."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.argv, self.env, self.log = name, argv, env, log
        self.process: subprocess.Popen[bytes] | None = None
        self.stopped = False  # SIGSTOPped

    def __repr__(self) -> str:
        state = "none" if self.process is None else f"pid={self.process.pid}"
        return f"Proc({self.name}, {state}, stopped={self.stopped})"

    def spawn(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.alive():
            assert self.process is not None
            self.process.send_signal(sig)
            self.stopped = sig is signal.SIGSTOP

    async def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while self.process is not None and self.process.poll() is None:
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(0.05)
        return None if self.process is None else self.process.returncode

    async def end(self, timeout: float = 15.0) -> None:
        """SIGTERM (SIGCONT first if stopped), then SIGKILL if it does not stop in time."""
        if not self.alive():
            return
        if self.stopped:
            self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        if await self.wait(timeout) is None:
            self.signal(signal.SIGKILL)
            await self.wait(5)

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


@dataclass
class Server:
    index: int
    port: int
    proxy: ProxyProcess
    proc: Proc

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"
