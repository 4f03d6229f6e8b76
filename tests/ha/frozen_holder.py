"""A leader that freezes inside a fenced write: `python -m tests.ha.frozen_holder URL HOLDER`.

It opens the store as a server of an HA pair does (sessions named `yoke-ha:HOLDER`, idle
transactions bounded), takes the `admission` lease for a short term, fences the store to it,
and opens a fenced write shaped like every one of them (`ExecutionVerbs._decides`: the fence
and the statement in one pipelined round trip, the COMMIT in a second). Between the two it
prints `frozen EPOCH` and stops itself (SIGSTOP), as a process paused by a debugger, a VM
migration or a long GC does. Its session then waits for the COMMIT in mid-pipeline, `active`
(ClientRead) with the fence's SHARED lock held, which no idle-in-transaction timeout ends. When
it is continued it tries to commit and prints `committed` or `refused: ...`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from yoke.app import HA_IDLE_IN_TRANSACTION
from yoke.errors import YokeError
from yoke.executions.leadership import ADMISSION
from yoke.store.leaseverbs import Fence, ha_session_name
from yoke.store.postgres import PostgresStore

TTL = 2.0


async def main(url: str, holder: str) -> None:
    store = PostgresStore(
        url,
        max_size=2,
        application_name=ha_session_name(holder),
        idle_in_transaction_timeout=HA_IDLE_IN_TRANSACTION,
    )
    await store.open()
    try:
        lease = await store.actors.leases.acquire_lease(ADMISSION, holder=holder, ttl=TTL)
        assert lease is not None, "the lease was not free"
        fence = Fence(name=ADMISSION, epoch=lease.epoch)
        try:
            async with store.fenced() as tx:
                await tx.run("check_fence", {"name": fence.name, "epoch": fence.epoch})
                await tx.one("get_lease", {"name": ADMISSION})  # the statement's answer
                print(f"frozen {lease.epoch}", flush=True)
                os.kill(os.getpid(), signal.SIGSTOP)
            print("committed", flush=True)
        except YokeError as exc:
            print(f"refused: {type(exc).__name__}", flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
