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

Start and end of each execution's slot are recorded by the database itself: a deferred
constraint trigger, installed in the test database only, logs `clock_timestamp()` when a
transaction that creates a RUNNING execution, or moves one out of RUNNING, commits. It runs
while that transaction still holds the ledger rows it locked, so a grant that waited for a
finish is always logged after it; yoke's own `created_at` / `finished_at` are taken before
the lock wait and can order two such transactions the wrong way. With `--ha` the trigger also
notes the admission lease's epoch when each grant committed, beside the epoch the grant was
made under (`leader_epoch`): a grant committed under an older epoch than the lease's is a
grant under a stale term, which the fence must make impossible (the fence holds its shared
lock until commit, so the takeover cannot commit between the trigger's read and the grant's
commit). A grant that commits after its leader resigned but before anyone took over (the
lease held by nobody, its epoch unchanged) is not one: the takeover waits for it, and the new
leader's recovery sees it.

Without `--ha` the two servers are both active: the "leader" is server 0, a fault hits it,
and the timings say when the other one served again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlencode, urlsplit, urlunsplit

import httpx
import psycopg

from tests.ha.checker import (
    Ack,
    Answer,
    EventAck,
    History,
    Report,
    SlotChange,
    StartRow,
    check,
)
from tests.server.e2e import free_port

ROOT = Path(__file__).resolve().parents[2]
Fault = Literal["sigterm", "kill", "stop", "blackhole", "terminate"]
FAULTS: tuple[Fault, ...] = ("sigterm", "kill", "stop", "blackhole", "terminate")

SLOT_LOG = """
CREATE TABLE IF NOT EXISTS chaos_slot_log (
    execution_id TEXT NOT NULL,
    delta INTEGER NOT NULL,
    at DOUBLE PRECISION NOT NULL,
    granted_by TEXT,
    grant_epoch BIGINT,
    lease_holder TEXT,
    lease_epoch BIGINT
);
CREATE OR REPLACE FUNCTION chaos_log_slot() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' AND NEW.status = 'RUNNING' THEN
        -- A fresh snapshot of the lease, taken at commit under the grant's fence.
        INSERT INTO chaos_slot_log
        SELECT NEW.execution_id, 1, extract(epoch FROM clock_timestamp()), NEW.instance_id,
            NEW.leader_epoch, l.holder, l.epoch
        FROM (SELECT 1) AS one LEFT JOIN yoke_leases l ON l.name = 'admission';
    ELSIF TG_OP = 'UPDATE' AND OLD.status = 'RUNNING' AND NEW.status <> 'RUNNING' THEN
        INSERT INTO chaos_slot_log (execution_id, delta, at) VALUES
            (NEW.execution_id, -1, extract(epoch FROM clock_timestamp()));
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS chaos_log_slot ON yoke_executions;
CREATE CONSTRAINT TRIGGER chaos_log_slot AFTER INSERT OR UPDATE ON yoke_executions
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION chaos_log_slot();
"""


# (grants committed under an older epoch than the lease's, grants committed while nobody
# held the lease)
GRANTS_BY_TERM = """
SELECT count(*) FILTER (WHERE lease_epoch <> grant_epoch),
    count(*) FILTER (WHERE lease_holder IS NULL)
FROM chaos_slot_log WHERE delta = 1
"""

# Who holds or waits for what: every session of the test database with its advisory locks
# and the locks it waits for.
STUCK_SNAPSHOT = """
SELECT a.pid, a.application_name, a.state, a.wait_event_type, a.wait_event,
    round(extract(epoch FROM clock_timestamp() - a.xact_start)::numeric, 1) AS xact_secs,
    l.locktype, l.mode, l.granted, l.classid, l.objid, left(a.query, 100) AS query
FROM pg_stat_activity a LEFT JOIN pg_locks l
    ON l.pid = a.pid AND (l.locktype = 'advisory' OR NOT l.granted)
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
ORDER BY a.application_name, a.pid
"""
LEASE_NOW = """
SELECT holder, epoch, round((expires_at - extract(epoch FROM clock_timestamp()))::numeric, 1)
FROM yoke_leases WHERE name = 'admission'
"""


@dataclass(frozen=True)
class Profile:
    """How hard and how long: the CI profile is the defaults; bench/chaos.py a longer one."""

    ttl: float = 2.0  # YOKE_HA_LEASE_TTL_SECS
    stale_after: float = 10.0  # YOKE_INSTANCE_STALE_AFTER: a peer dead after this long
    ha: bool = False  # `yoke serve --ha` (the HA pair); else two active servers
    liveness_lock: bool = True  # YOKE_HA_LIVENESS_LOCK
    max_running: int = 4
    run_seconds: float = 0.2  # each execution's run time
    start_rate: float = 5.0  # starts offered per second
    event_rate: float = 3.0  # events appended per second
    instances: int = 8  # counter instances the events spread over
    request_timeout: float = 5.0  # a request not answered by then is sent to the other server
    retry_pause: float = 0.05
    warmup: float = 2.0  # load before each fault
    stop_for: float = 2.5  # SIGSTOP for stop_for x ttl
    blackhole_for: float = 3.0  # blackhole for blackhole_for x ttl (the long profile: 30 s)
    settle_timeout: float = 60.0
    pool_max: int = 10

    def env(self) -> dict[str, str]:
        return {
            "YOKE_HA_LEASE_TTL_SECS": f"{self.ttl:g}",
            "YOKE_HA_LIVENESS_LOCK": "1" if self.liveness_lock else "0",
            "YOKE_HEARTBEAT_INTERVAL": f"{self.stale_after / 5:g}",
            "YOKE_INSTANCE_STALE_AFTER": f"{self.stale_after:g}",
            "YOKE_SLOT_POLL_INTERVAL": "0.5",
            "YOKE_EXECUTION_SHUTDOWN_TIMEOUT": "5",
            "YOKE_PG_POOL_MAX": str(self.pool_max),
            "YOKE_PG_CONNECT_TIMEOUT": "5",
            "YOKE_RETRY_MAX_PAUSE": "0.5",
            "YOKE_WORKER_HEARTBEAT_SECS": "1",
            "YOKE_WORKER_STALE_SECS": "4",
            "YOKE_NOTIFY_POLL_BACKUP_SECS": "2",
        }


@dataclass(frozen=True)
class FaultRecord:
    """One injected fault: what, on which server, when (monotonic), and what followed.

    `failover_after`: seconds from the fault to the first start the other server acknowledged
    (201 or 202) of those sent after the fault; None if it acknowledged none (no failover: a
    `terminate` may leave the leader leading). `served_after`: the same from any server.
    `old_acks_after_takeover`: starts the faulted server acknowledged of those sent after the
    failover, until the end of the fault's phase (with --ha it must stay a standby), not
    counting `old_replays_after_takeover`: those it answered with the answer kept in the store
    for their Idempotency-Key (a retry of a start the new leader had already answered, which
    a standby serves as a read).
    """

    fault: Fault
    server: int
    at: float
    healed_at: float  # SIGCONT / proxy restored / server started again
    failover_after: float | None
    served_after: float | None
    old_acks_after_takeover: int
    old_replays_after_takeover: int = 0


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


def _with_params(url: str, **params: str) -> str:
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


@dataclass
class Load:
    """What the clients saw; appended to by the load's tasks only."""

    answers: list[Answer] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)
    events: list[EventAck] = field(default_factory=list)
    unacked_starts: int = 0
    unacked_events: int = 0
    unexpected: list[str] = field(default_factory=list)  # 4xx answers a retry cannot help


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
        self._last_good = 0  # the server that acknowledged the latest start

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
        self._stack.push_async_callback(self._end_all)
        env = {**os.environ, **self.profile.env()}
        for i in range(2):
            proxy = await self._stack.enter_async_context(
                ProxyProcess(self.database_url, self.tmp / f"proxy-{i}.log")
            )
            port = free_port()
            url = _with_params(proxy.url, application_name=f"yoke-chaos-{self._run}-s{i}")
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
                _with_params(self.database_url, application_name=f"yoke-chaos-w{i}"),
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
            await self._wait_up(s)
        await self._wait_leader()
        leader = self.servers[await self.leader()]
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

    async def _wait_up(self, s: Server, timeout: float = 30.0) -> None:
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

    async def _wait_leader(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(AssertionError):
                await self.leader()
                return
            if time.monotonic() > deadline:
                raise AssertionError("no leader was elected:\n" + self.servers[0].proc.tail())
            await asyncio.sleep(0.1)

    # -- load -------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def load(self) -> AsyncIterator[Load]:
        """Offer starts and events at the profile's rates while the body runs; on exit stop
        offering and give what is in flight time to be acknowledged."""
        stop = asyncio.Event()
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._offer(stop, self.profile.start_rate, self._start_one))
            tg.create_task(self._offer(stop, self.profile.event_rate, self._append_one))
            try:
                yield self.load_log
            finally:
                stop.set()

    async def _offer(self, stop: asyncio.Event, rate: float, one: Any) -> None:
        """One task per request at `rate` a second; at most 64 in flight (then the offer waits,
        as a client with a bounded pool would)."""
        if rate <= 0:
            return
        gate = asyncio.Semaphore(64)
        counter = itertools.count()
        async with asyncio.TaskGroup() as tg:
            next_at = time.monotonic()
            while not stop.is_set():
                await gate.acquire()
                n = next(counter)
                task = tg.create_task(one(n, stop))
                task.add_done_callback(lambda _: gate.release())
                next_at += 1 / rate
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.monotonic()))

    async def _send(
        self, n: int, stop: asyncio.Event, path: str, body: dict[str, Any], key: str
    ) -> tuple[int, httpx.Response] | None:
        """POST until a server acknowledges it (2xx), alternating servers on a failure; gives
        up on a 4xx other than 409 and 429 (kept in `unexpected`: the checks fail on it) or
        10 s after the load stopped."""
        assert self._http is not None
        log = self.load_log
        # Both active: spread the load. A pair: the server that last acknowledged (the leader).
        target = self._last_good if self.profile.ha else n % 2
        give_up: float | None = None
        pause = self.profile.retry_pause
        while True:
            s = self.servers[target]
            sent = time.monotonic()
            status = 0
            try:
                r = await self._http.post(s.url + path, json=body, headers={"Idempotency-Key": key})
                status = r.status_code
            except httpx.HTTPError:
                r = None
            replayed = r is not None and r.headers.get("idempotent-replayed") == "true"
            log.answers.append(Answer(s.index, key, status, sent, time.monotonic(), replayed))
            if r is not None and 200 <= status < 300:
                return s.index, r
            if r is not None and 400 <= status < 500 and status not in (409, 429):
                log.unexpected.append(f"{path} {key} on server {s.index}: {status} {r.text}")
                return None
            if stop.is_set():
                give_up = give_up or time.monotonic() + 10
                if time.monotonic() > give_up:
                    return None
            target = 1 - target
            await asyncio.sleep(pause)
            pause = min(pause * 1.5, 0.5)  # a retry storm would only slow the harness down

    async def _start_one(self, n: int, stop: asyncio.Event) -> None:
        key = f"start-{n}"
        body = {"workflow": "work", "input": {"key": key, "seconds": self.profile.run_seconds}}
        got = await self._send(n, stop, "/v1/starts", body, key)
        if got is None:
            self.load_log.unacked_starts += 1
            return
        server, r = got
        self._last_good = server
        data = r.json()
        self.load_log.acks.append(
            Ack(
                key=key,
                server=server,
                status=r.status_code,
                start_id=data["start_id"],
                execution_id=data.get("execution_id"),
                answered_at=time.monotonic(),
            )
        )

    async def _append_one(self, n: int, stop: asyncio.Event) -> None:
        k = f"i{n % self.profile.instances}"
        got = await self._send(n, stop, "/v1/streams/counts/events", {"k": k, "n": n}, f"ev-{n}")
        if got is None:
            self.load_log.unacked_events += 1
            return
        self.load_log.events.append(EventAck(instance=k, n=n))

    # -- faults -----------------------------------------------------------------------------
    async def fault(self, fault: Fault) -> FaultRecord:
        """Warm up, hit the leader with `fault`, wait (for a failover: until the other server
        acknowledges a start), heal (start it again, SIGCONT, restore its proxy), and wait
        until both are up and one leads."""
        p = self.profile
        await asyncio.sleep(p.warmup)
        victim = self.servers[await self.leader()]
        survivor = self.servers[1 - victim.index]
        at = time.monotonic()
        watch = asyncio.create_task(self._snapshot_if_stuck(fault, survivor, at))
        if fault == "sigterm":
            victim.proc.signal(signal.SIGTERM)
            await self._first_ack(survivor, at)
            if await victim.proc.wait(30) is None:
                raise AssertionError(f"{victim.proc.name} ignored SIGTERM:\n{victim.proc.tail()}")
        elif fault == "kill":
            victim.proc.signal(signal.SIGKILL)
            await victim.proc.wait(10)
            await self._first_ack(survivor, at)
        elif fault == "stop":
            victim.proc.signal(signal.SIGSTOP)
            await asyncio.sleep(p.stop_for * p.ttl)
            victim.proc.signal(signal.SIGCONT)
        elif fault == "blackhole":
            await victim.proxy.blackhole()
            await asyncio.sleep(p.blackhole_for * p.ttl)
            await victim.proxy.restore()
        elif fault == "terminate":
            await self.terminate_sessions(victim)
        healed = time.monotonic()
        if not victim.proc.alive():
            victim.proc.spawn()
        await self._wait_up(victim)
        await self._wait_leader()
        served = await self._first_ack(None, at)
        failover = await self._first_ack(survivor, at, timeout=0 if fault == "terminate" else 60)
        await asyncio.sleep(p.warmup)  # the old leader's chance to misbehave
        old = replays = 0
        if failover is not None:
            for a in self.load_log.answers:
                if (
                    a.server == victim.index
                    and a.sent_at >= at + failover
                    and 200 <= a.status < 300
                    and a.is_start
                ):
                    replays += a.replayed
                    old += not a.replayed
        watch.cancel()
        record = FaultRecord(fault, victim.index, at, healed, failover, served, old, replays)
        self.faults.append(record)
        return record

    async def _snapshot_if_stuck(self, fault: Fault, survivor: Server, at: float) -> None:
        """If the survivor has acknowledged no start TTL + 3 s after the fault (a failover past
        its target), write who holds and waits for which lock to `stuck-<fault>-<at>.txt` in
        the round's directory (and stderr): the evidence a hung takeover leaves."""
        late = self.profile.ttl + 3
        if await self._first_ack(survivor, at, timeout=late) is not None:
            return
        async with await psycopg.AsyncConnection.connect(
            self.database_url, autocommit=True
        ) as conn:
            cur = await conn.execute(STUCK_SNAPSHOT)
            rows = await cur.fetchall()
            lease = await (await conn.execute(LEASE_NOW)).fetchone()
        text = f"{fault} at {at:.1f}: no failover after {late:g} s; lease {lease}\n" + "".join(
            " | ".join(str(v) for v in row) + "\n" for row in rows
        )
        (self.tmp / f"stuck-{fault}-{at:.0f}.txt").write_text(text)
        print(text, file=sys.stderr, flush=True)

    async def _first_ack(
        self, server: Server | None, since: float, timeout: float = 60.0
    ) -> float | None:
        """Seconds from `since` to the first start `server` (None: any) acknowledged of those
        sent after `since`, waiting for one up to `timeout`."""
        deadline = time.monotonic() + timeout
        answers = self.load_log.answers
        seen = 0
        while True:
            for i in range(seen, len(answers)):  # answers are only appended: read each once
                a = answers[i]
                if (
                    (server is None or a.server == server.index)
                    and a.sent_at >= since
                    and 200 <= a.status < 300
                    and a.is_start
                ):
                    return a.answered_at - since
            seen = len(answers)
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(0.02)

    async def terminate_sessions(self, s: Server) -> int:
        """`pg_terminate_backend` of every session the server holds through its proxy (found by
        their client ports), as an operator or a pooler cutting them would."""
        ports = sorted(await s.proxy.upstream_ports())
        async with await psycopg.AsyncConnection.connect(
            self.database_url, autocommit=True
        ) as conn:
            cur = await conn.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE client_port = ANY(%s) AND datname = current_database()",
                (ports,),
            )
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    # -- afterwards -------------------------------------------------------------------------
    async def settle(self) -> None:
        """Until no start is queued, no execution runs and every acknowledged event has been
        processed (or the profile's settle timeout passes: the checker then counts what is
        missing)."""
        deadline = time.monotonic() + self.profile.settle_timeout
        want = len(self.load_log.events)
        async with await psycopg.AsyncConnection.connect(
            self.database_url, autocommit=True
        ) as conn:
            while time.monotonic() < deadline:
                cur = await conn.execute(
                    "SELECT (SELECT count(*) FROM yoke_starts WHERE status = 'QUEUED'),"
                    " (SELECT count(*) FROM yoke_executions WHERE status = 'RUNNING'),"
                    " (SELECT coalesce(sum((state::jsonb->>'count')::int), 0)"
                    "  FROM actor_instances WHERE actor = 'counter')"
                )
                row = await cur.fetchone()
                assert row is not None
                queued, running, counted = row
                if queued == 0 and running == 0 and counted >= want:
                    return
                await asyncio.sleep(0.2)

    async def history(self) -> History:
        async with await psycopg.AsyncConnection.connect(
            self.database_url, autocommit=True
        ) as conn:
            slots = [
                SlotChange(e, d, at)
                for e, d, at in await (
                    await conn.execute("SELECT execution_id, delta, at FROM chaos_slot_log")
                ).fetchall()
            ]
            stale: int | None = None
            unheld: int | None = None
            if self.profile.ha:
                cur = await conn.execute(GRANTS_BY_TERM)
                row = await cur.fetchone()
                assert row is not None
                stale, unheld = int(row[0]), int(row[1])
            starts = {
                sid: StartRow(sid, status, eid)
                for sid, status, eid in await (
                    await conn.execute("SELECT start_id, status, execution_id FROM yoke_starts")
                ).fetchall()
            }
            by_key: dict[str, list[str]] = {}
            for eid, key in await (
                await conn.execute(
                    "SELECT execution_id, input::jsonb->>'key' FROM yoke_executions"
                    " WHERE workflow = 'work'"
                )
            ).fetchall():
                by_key.setdefault(key, []).append(eid)
            seen: dict[str, list[int]] = {}
            counts: dict[str, int] = {}
            for k, listed, count in await (
                await conn.execute(
                    "SELECT instance_id, state::jsonb->'seen', state::jsonb->'count'"
                    " FROM actor_instances WHERE actor = 'counter'"
                )
            ).fetchall():
                seen[k] = [int(n) for n in listed or []]
                counts[k] = int(count or 0)
            appended = {
                int(n): c
                for n, c in await (
                    await conn.execute(
                        "SELECT data::jsonb->>'n', count(*) FROM stream_events"
                        " WHERE stream = 'counts' GROUP BY 1"
                    )
                ).fetchall()
            }
        return History(
            max_running=self.profile.max_running,
            slots=slots,
            starts=starts,
            executions_by_key=by_key,
            acks=list(self.load_log.acks),
            events=list(self.load_log.events),
            seen=seen,
            counts=counts,
            appended=appended,
            stale_epoch_commits=stale,  # not measurable between two active servers
            grants_unheld=unheld,
        )

    async def check(self) -> Report:
        return check(await self.history())
