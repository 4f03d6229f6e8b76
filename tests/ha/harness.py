"""The chaos harness: two real `yoke serve` processes, each reaching PostgreSQL through a fault
proxy of its own, two `yoke worker`s, a load of starts and events over HTTP, and the faults.

Shared by the CI profile (tests/ha) and the long one (`python -m bench.chaos`); both drive it
the same way:

    async with Cluster(db_url, profile, tmp) as c:      # servers, workers, proxies, slot log
        async with c.load():                             # starts and events, retried
            await c.fault("kill")                        # the leader, then it comes back
        await c.settle()                                 # queue drained, events processed
        report = await c.check()                         # the checker's counts and timings

What the load records is what a client saw: every answer (server, status, when the request
was sent and answered) and every acknowledged start (201 or 202, with its key, start id and
execution id) or event (202). A request that fails (503, a reset, a timeout) is sent again
with the same Idempotency-Key to the other server, after a short pause, until acknowledged.
The checker (tests/ha/checker.py) compares that with what the store holds afterwards.

The parts: tests/ha/procs.py (child processes and fault proxies), load.py (the clients),
faults.py (the faults and what followed), records.py (what the database records, read
afterwards), profile.py.

Without `--ha` the two servers are both active: the "leader" is server 0, a fault hits it,
and the timings say when the other one served again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import psycopg

from tests.ha.checker import History, Report, check
from tests.ha.faults import Fault, FaultRecord, inject, terminate_sessions
from tests.ha.load import Clients, Load
from tests.ha.procs import Proc, ProxyProcess, Server, with_params
from tests.ha.profile import Profile
from tests.ha.records import SLOT_LOG, history, settle
from tests.server.e2e import free_port


class Cluster:
    def __init__(self, database_url: str, profile: Profile, tmp: Path) -> None:
        self.database_url = database_url
        self.profile = profile
        self.tmp = tmp
        self.servers: list[Server] = []
        self.workers: list[Proc] = []
        self.load_log = Load()
        self.faults: list[FaultRecord] = []
        self._stack = contextlib.AsyncExitStack()
        self._http: httpx.AsyncClient | None = None
        self._run = uuid.uuid4().hex[:6]
        self._clients: Clients | None = None

    def __repr__(self) -> str:
        return (
            f"Cluster(servers={[s.proc for s in self.servers]}, workers={self.workers}, "
            f"acks={len(self.load_log.acks)}, events={len(self.load_log.events)})"
        )

    # -- lifetime ---------------------------------------------------------------------------
    async def __aenter__(self) -> Cluster:
        try:
            await self._open()
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def _open(self) -> None:
        from yoke.app import upgrade

        await upgrade(self.database_url)
        async with await psycopg.AsyncConnection.connect(
            self.database_url, autocommit=True
        ) as conn:
            await conn.execute(SLOT_LOG.encode())
        self._http = await self._stack.enter_async_context(
            httpx.AsyncClient(timeout=self.profile.request_timeout)
        )
        self._clients = Clients(self._http, self.servers, self.profile, self.load_log)
        self._stack.push_async_callback(self._end_all)
        env = {**os.environ, **self.profile.env()}
        for i in range(2):
            proxy = await self._stack.enter_async_context(
                ProxyProcess(self.database_url, self.tmp / f"proxy-{i}.log")
            )
            port = free_port()
            url = with_params(proxy.url, application_name=f"yoke-chaos-{self._run}-s{i}")
            argv = [
                sys.executable,
                "-m",
                "yoke",
                "serve",
                "--app",
                "tests.ha.chaos_app:server_app",
                "--port",
                str(port),
                "--database-url",
                url,
                "--log-level",
                "warning",
                *(["--ha"] if self.profile.ha else []),
            ]
            log = self.tmp / f"server-{i}.log"
            self.servers.append(Server(i, port, proxy, Proc(f"server-{i}", argv, env, log)))
        for i in range(2):
            argv = [
                sys.executable,
                "-m",
                "yoke",
                "worker",
                "--app",
                "tests.ha.chaos_app:worker_app",
                "--database-url",
                with_params(self.database_url, application_name=f"yoke-chaos-w{i}"),
                "--log-level",
                "warning",
            ]
            wenv = {**env, "YOKE_WORKER_ID": f"chaos-worker-{i}"}
            self.workers.append(Proc(f"worker-{i}", argv, wenv, self.tmp / f"worker-{i}.log"))
        for s in self.servers:
            s.proc.spawn()
        for w in self.workers:
            w.spawn()
        for s in self.servers:
            await self.wait_up(s)
        leader = self.servers[await self.wait_leader()]
        assert self._http is not None
        r = await self._http.put(
            leader.url + "/v1/limits", json={"max_running": self.profile.max_running}
        )
        if r.status_code != 200:
            raise AssertionError(f"setting the limits: {r.status_code} {r.text}")

    async def _end_all(self) -> None:
        await asyncio.gather(
            *(s.proc.end() for s in self.servers), *(w.end() for w in self.workers)
        )

    async def wait_up(self, s: Server, timeout: float = 30.0) -> None:
        """Until the server answers /healthz (a standby is healthy, not ready)."""
        assert self._http is not None
        deadline = time.monotonic() + timeout
        while True:
            if not s.proc.alive():
                raise AssertionError(f"{s.proc.name} exited:\n{s.proc.tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if (await self._http.get(s.url + "/healthz", timeout=1)).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"{s.proc.name} did not come up:\n{s.proc.tail()}")
            await asyncio.sleep(0.05)

    async def role(self, s: Server) -> str | None:
        """`leader` or `standby` by GET /v1/ha; every server is a leader without --ha."""
        if not self.profile.ha:
            return "leader" if s.proc.alive() else None
        assert self._http is not None
        try:
            r = await self._http.get(s.url + "/v1/ha", timeout=1)
        except httpx.HTTPError:
            return None
        role = r.json().get("role") if r.status_code == 200 else None
        return role if isinstance(role, str) else None

    async def leader(self) -> int:
        """The index of the server that leads (server 0 when both are active)."""
        for s in self.servers:
            if await self.role(s) == "leader":
                return s.index
        raise AssertionError("no server leads")

    async def wait_leader(self, timeout: float = 60.0) -> int:
        """The index of the server that leads, once one does (a look at /v1/ha may find none
        for a moment: a request timed out on a loaded machine, or a term changing hands)."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(AssertionError):
                return await self.leader()
            if time.monotonic() > deadline:
                raise AssertionError("no leader was elected:\n" + self.servers[0].proc.tail())
            await asyncio.sleep(0.1)

    # -- load ---------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def load(self) -> AsyncIterator[Load]:
        """Offer starts and events at the profile's rates while the body runs; on exit stop
        offering and give what is in flight time to be acknowledged."""
        assert self._clients is not None
        async with self._clients.offering() as log:
            yield log

    # -- faults ---------------------------------------------------------------------------
    async def fault(self, fault: Fault) -> FaultRecord:
        """`fault` on the leader, then heal it (`faults.inject`)."""
        return await inject(self, fault)

    async def terminate_sessions(self, s: Server) -> int:
        return await terminate_sessions(self.database_url, s)

    # -- afterwards -------------------------------------------------------------------------
    async def settle(self) -> None:
        await settle(
            self.database_url,
            events=len(self.load_log.events),
            timeout=self.profile.settle_timeout,
        )

    async def history(self) -> History:
        return await history(
            self.database_url,
            max_running=self.profile.max_running,
            ha=self.profile.ha,
            load=self.load_log,
        )

    async def check(self) -> Report:
        return check(await self.history())
