"""A leader frozen inside a fenced write cannot hold a takeover back past its term.

A fenced write pipelines BEGIN, the fence and its statement, reads the answer, then sends the
COMMIT. A process stopped between the two (SIGSTOP here; a VM paused, or a network that stopped
forwarding, in the chaos suite) leaves its session `active` in mid-pipeline, holding the
fence's SHARED lock: idle_in_transaction_session_timeout never ends it, and the takeover's
EXCLUSIVE gate waits for it (and gives up after its lock timeout) until the process runs
again. So a take first ends the sessions of a holder whose term is over on the database's
clock. Without that, the standby below is refused at every try while the holder stays frozen.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from tests.ha.frozen_holder import TTL
from yoke.app import upgrade
from yoke.errors import YokeError
from yoke.executions.leadership import ADMISSION
from yoke.store.leaseverbs import HA_SESSION_PREFIX, Lease
from yoke.store.postgres import PostgresStore
from yoke.store.sqlfiles import queries

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]

# Advisory locks held by the frozen holder's sessions and what they are doing.
HELD = """
SELECT a.state, a.wait_event, l.mode FROM pg_stat_activity a
JOIN pg_locks l ON l.pid = a.pid AND l.locktype = 'advisory' AND l.granted
WHERE a.application_name = %s
"""


@contextlib.contextmanager
def frozen_holder(url: str, holder: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """The frozen leader, stopped inside its fenced write: the process and its term's epoch."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.ha.frozen_holder", url, holder],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().split()
        assert line[:1] == ["frozen"], line
        yield process, int(line[1])
    finally:
        process.send_signal(signal.SIGCONT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(10)
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


async def take(store: PostgresStore, holder: str, within: float) -> tuple[Lease | None, float]:
    """Try to take the admission lease about every 0.5 s for `within` seconds (a standby's
    poll): the lease, and the seconds it took."""
    began = time.monotonic()
    while time.monotonic() - began < within:
        with contextlib.suppress(YokeError):  # the gate's lock timeout
            lease = await store.actors.leases.acquire_lease(ADMISSION, holder=holder, ttl=10)
            if lease is not None:
                return lease, time.monotonic() - began
        await asyncio.sleep(0.5)
    return None, time.monotonic() - began


@pytest.mark.timeout(90)
async def test_a_standby_takes_over_from_a_leader_frozen_inside_a_fenced_write(
    pg_databases: Callable[[], str],
) -> None:
    url = pg_databases()
    await upgrade(url)
    standby = PostgresStore(url, max_size=2, application_name="yoke-ha:standby")
    await standby.open()
    try:
        with frozen_holder(url, "frozen") as (process, epoch):
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                cur = await conn.execute(HELD, ("yoke-ha:frozen",))
                held = await cur.fetchall()
            # The frozen write holds the gate SHARED, in a state no idle timeout ends.
            assert ("active", "ClientRead", "ShareLock") in held, held
            lease, took = await take(standby, "standby", within=TTL + 3 + 10)
            assert lease is not None, "no takeover while the former leader stayed frozen"
            assert lease.epoch == epoch + 1
            assert took <= TTL + 3, took
            process.send_signal(signal.SIGCONT)
            assert process.stdout is not None
            # Its write can never commit under the term it was made in.
            assert process.stdout.readline().startswith("refused"), "a stale write committed"
    finally:
        await standby.close()


@pytest.mark.timeout(60)
async def test_a_standby_poll_never_waits_at_the_gate_for_a_running_term(
    pg_databases: Callable[[], str],
) -> None:
    """A take while another term runs would fail: it returns at once instead of queueing an
    exclusive lock behind the leader's fenced write in flight (and ahead of its next ones),
    and instead of failing after the gate's lock timeout."""
    url = pg_databases()
    await upgrade(url)
    leader = PostgresStore(url, max_size=2, application_name="yoke-ha:leader")
    standby = PostgresStore(url, max_size=2, application_name="yoke-ha:standby")
    await leader.open()
    await standby.open()
    try:
        lease = await leader.actors.leases.acquire_lease(ADMISSION, holder="leader", ttl=10)
        assert lease is not None
        async with leader.fenced() as tx:  # a fenced write in flight: the gate held SHARED
            await tx.run("check_fence", {"name": ADMISSION, "epoch": lease.epoch})
            began = time.monotonic()
            taken = await standby.actors.leases.acquire_lease(ADMISSION, holder="standby", ttl=10)
            waited = time.monotonic() - began
        assert taken is None
        assert waited < 1.0, waited  # the gate's lock timeout is 2 s
    finally:
        await standby.close()
        await leader.close()


@pytest.mark.timeout(60)
async def test_a_take_by_another_role_leaves_the_sessions_it_may_not_end(
    pg_databases: Callable[[], str],
) -> None:
    """Servers of a pair that log in as two roles: a take does not fail on a permission error
    for the former holder's sessions; it leaves them (and waits at the gate as before)."""
    url = pg_databases()
    await upgrade(url)
    suffix = uuid.uuid4().hex[:8]
    old_role, new_role = f"yoke_test_old_{suffix}", f"yoke_test_new_{suffix}"
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        for role in (old_role, new_role):
            await admin.execute(f'CREATE ROLE "{role}" LOGIN'.encode())
            await admin.execute(f'GRANT SELECT ON yoke_leases TO "{role}"'.encode())
        await admin.execute(
            "INSERT INTO yoke_leases (name, holder, epoch, expires_at, acquired_at)"
            " VALUES (%s, 'old', 1, 0, 0)",
            (ADMISSION,),
        )
    try:
        old = await psycopg.AsyncConnection.connect(
            url, user=old_role, application_name="yoke-ha:old", autocommit=True
        )
        async with (
            old,
            await psycopg.AsyncConnection.connect(url, user=new_role, autocommit=True) as new,
        ):
            params = {
                "name": ADMISSION,
                "holder": "new",
                "force": False,
                "session_prefix": HA_SESSION_PREFIX,
            }
            cur = await new.execute(queries("postgres")["end_lapsed_holder"], params)
            assert await cur.fetchone() == (0,)
            await old.execute("SELECT 1")  # still there
    finally:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
            for role in (old_role, new_role):
                await admin.execute(f'DROP OWNED BY "{role}"'.encode())
                await admin.execute(f'DROP ROLE "{role}"'.encode())
