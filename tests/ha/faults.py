"""The chaos harness's faults, each on the leader of a `Cluster`: SIGTERM, kill -9, SIGSTOP
past the TTL, a blackhole of its PostgreSQL link, `pg_terminate_backend` of its sessions; and
what followed each (`FaultRecord`), as the clients saw it.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import psycopg

from tests.ha.checker import Answer
from tests.ha.procs import Server
from tests.ha.records import stuck_snapshot

if TYPE_CHECKING:
    from tests.ha.harness import Cluster

Fault = Literal["sigterm", "kill", "stop", "blackhole", "terminate"]
FAULTS: tuple[Fault, ...] = ("sigterm", "kill", "stop", "blackhole", "terminate")


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


async def inject(c: Cluster, fault: Fault) -> FaultRecord:
    """Warm up, hit the leader of `c` with `fault`, wait (for a failover: until the other server
    acknowledges a start), heal (start it again, SIGCONT, restore its proxy), and wait
    until both are up and one leads."""
    p = c.profile
    await asyncio.sleep(p.warmup)
    victim = c.servers[await c.wait_leader()]
    survivor = c.servers[1 - victim.index]
    at = time.monotonic()
    watch = asyncio.create_task(snapshot_if_stuck(c, fault, survivor, at))
    try:
        if fault == "sigterm":
            victim.proc.signal(signal.SIGTERM)
            await first_ack(c.load_log.answers, survivor, at)
            if await victim.proc.wait(30) is None:
                raise AssertionError(f"{victim.proc.name} ignored SIGTERM:\n{victim.proc.tail()}")
        elif fault == "kill":
            victim.proc.signal(signal.SIGKILL)
            await victim.proc.wait(10)
            await first_ack(c.load_log.answers, survivor, at)
        elif fault == "stop":
            victim.proc.signal(signal.SIGSTOP)
            await asyncio.sleep(p.stop_for * p.ttl)
            victim.proc.signal(signal.SIGCONT)
        elif fault == "blackhole":
            await victim.proxy.blackhole()
            await asyncio.sleep(p.blackhole_for * p.ttl)
            await victim.proxy.restore()
        elif fault == "terminate":
            await terminate_sessions(c.database_url, victim)
        healed = time.monotonic()
        if not victim.proc.alive():
            victim.proc.spawn()
        await c.wait_up(victim)
        await c.wait_leader()
        served = await first_ack(c.load_log.answers, None, at)
        failover = await first_ack(
            c.load_log.answers, survivor, at, timeout=0 if fault == "terminate" else 60
        )
        await asyncio.sleep(p.warmup)  # the old leader's chance to misbehave
        old = replays = 0
        if failover is not None:
            for a in c.load_log.answers:
                if (
                    a.server == victim.index
                    and a.sent_at >= at + failover
                    and 200 <= a.status < 300
                    and a.is_start
                ):
                    replays += a.replayed
                    old += not a.replayed
        record = FaultRecord(fault, victim.index, at, healed, failover, served, old, replays)
        c.faults.append(record)
        return record
    finally:
        watch.cancel()


async def snapshot_if_stuck(c: Cluster, fault: Fault, survivor: Server, at: float) -> None:
    """If the survivor has acknowledged no start TTL + 3 s after the fault (a failover past
    its target), write who holds and waits for which lock to `stuck-<fault>-<at>.txt` in
    the round's directory (and stderr): the evidence a hung takeover leaves."""
    late = c.profile.ttl + 3
    if await first_ack(c.load_log.answers, survivor, at, timeout=late) is not None:
        return
    text = f"{fault} at {at:.1f}: no failover after {late:g} s; " + await stuck_snapshot(
        c.database_url
    )
    (c.tmp / f"stuck-{fault}-{at:.0f}.txt").write_text(text)
    print(text, file=sys.stderr, flush=True)


async def first_ack(
    answers: list[Answer], server: Server | None, since: float, timeout: float = 60.0
) -> float | None:
    """Seconds from `since` to the first start `server` (None: any) acknowledged of those
    sent after `since`, waiting for one up to `timeout`."""
    deadline = time.monotonic() + timeout
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


async def terminate_sessions(database_url: str, s: Server) -> int:
    """`pg_terminate_backend` of every session the server holds through its proxy (found by
    their client ports), as an operator or a pooler cutting them would."""
    ports = sorted(await s.proxy.upstream_ports())
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE client_port = ANY(%s) AND datname = current_database()",
            (ports,),
        )
        row = await cur.fetchone()
    return int(row[0]) if row else 0
