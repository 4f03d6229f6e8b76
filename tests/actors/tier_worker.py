"""A worker that boots one executor and prints what it got, for the tests that run a worker
as another user: `python -m tests.actors.tier_worker DB NAMESPACES`. Prints one JSON line:
the isolation in force, the warnings logged at start, and what the `probe` actor saw."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys

from tests.actors import exec_app
from tests.actors.executors import running, state, until


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(record.getMessage())


async def main(db: str, namespaces: str) -> None:
    warnings = _Warnings()
    logging.getLogger("yoke").addHandler(warnings)
    async with running(f"sqlite:///{db}", namespaces=namespaces, warm_spares=0) as (rt, store):
        await rt.append("probes", {"k": "p"}, tenant="acme")

        async def probed() -> bool:
            return "seen" in await state(store, "acme", "probe", "p")

        await until(probed)
        seen = (await state(store, "acme", "probe", "p"))["seen"]
        pool = rt.pool
        assert pool is not None
        out = {
            "isolation": pool.isolation,
            "warnings": warnings.seen,
            "seen": seen,
            "worker": {"uid": os.getuid(), "pidns": os.readlink("/proc/self/ns/pid")},
        }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    assert exec_app.SPEC
    asyncio.run(main(sys.argv[1], sys.argv[2]))
