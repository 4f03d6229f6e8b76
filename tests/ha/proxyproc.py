"""A fault proxy in a process of its own: `python -m tests.ha.proxyproc UPSTREAM_URL`.

The chaos harness runs one per server, so that the latency it adds to every round trip of that
server's sessions does not depend on how busy the harness's own loop is (its load generator, its
bookkeeping): a starved relay would look like a slow network to PostgreSQL, which then ends
sessions idle in a transaction. It prints `port N` once listening, then reads one command a line
on stdin (`blackhole`, `restore`, `reset`, `drop_upstream`, `ports`) and answers each with one
line (`ok`, `ports P1 P2 ...`, or `error ...`). It stops, closing every connection, at the end
of stdin: when the harness goes, so does its proxy.
"""

from __future__ import annotations

import asyncio
import sys

import uvloop

from tests.actors.pgproxy import PgProxy

COMMANDS = ("blackhole", "restore", "reset", "drop_upstream")


async def main(url: str) -> None:
    async with PgProxy(url) as proxy:
        print(f"port {proxy.port}", flush=True)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := await reader.readline():
            command = line.decode().strip()
            if command == "ports":
                print("ports", *sorted(proxy.upstream_ports()), flush=True)
            elif command in COMMANDS:
                getattr(proxy, command)()
                print("ok", flush=True)
            else:
                print(f"error: unknown command {command!r}", flush=True)


if __name__ == "__main__":
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main(sys.argv[1]))
