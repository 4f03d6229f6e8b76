"""The chaos harness's clients: starts and events offered at a steady rate over HTTP, each
retried with its Idempotency-Key on the other server until acknowledged, and what they saw
(`Load`): every answer and every acknowledgement. This module never reads the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.ha.checker import Ack, Answer, EventAck
from tests.ha.procs import Server
from tests.ha.profile import Profile


@dataclass
class Load:
    """What the clients saw; appended to by the load's tasks only."""

    answers: list[Answer] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)
    events: list[EventAck] = field(default_factory=list)
    unacked_starts: int = 0
    unacked_events: int = 0
    unexpected: list[str] = field(default_factory=list)  # 4xx answers a retry cannot help


class Clients:
    """The load's clients over `http`, sending to `servers`, recording into `load_log`."""

    def __init__(
        self, http: httpx.AsyncClient, servers: list[Server], profile: Profile, load_log: Load
    ) -> None:
        self._http = http
        self.servers = servers
        self.profile = profile
        self.load_log = load_log
        self._last_good = 0  # the server that acknowledged the latest start

    def __repr__(self) -> str:
        return f"Clients(acks={len(self.load_log.acks)}, events={len(self.load_log.events)})"

    @contextlib.asynccontextmanager
    async def offering(self) -> AsyncIterator[Load]:
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
