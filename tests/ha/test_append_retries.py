"""A defect the chaos suite found: an event appended over HTTP with an Idempotency-Key, retried
on the other server while the first request is still in flight (a client's timeout during a
failover), is appended twice.

The replayer (yoke/server/idempotency.py) looks the key up, runs the append, then keeps the
answer, each in its own transaction; inside one process a per-key lock serialises retries, but
two servers both found no answer and both appended. As starts keep one start per key in the
start row itself, an append now claims its key in its own transaction (`append_event_once`,
table yoke_event_keys): the second claim waits for the first and answers with its event.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.server.e2e import yoke_serve

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
KEYS = 20


async def test_one_key_sent_to_two_servers_at_once_appends_one_event(
    pg_databases: Callable[[], str], tmp_path: Path
) -> None:
    url = pg_databases()
    app = "tests.ha.chaos_app:server_app"
    with yoke_serve(url, tmp_path, app=app) as a, yoke_serve(url, tmp_path, app=app) as b:
        async with httpx.AsyncClient(timeout=30) as client:

            async def both(n: int) -> list[int]:
                body = {"k": "i0", "n": n}
                headers = {"Idempotency-Key": f"ev-{n}"}
                answers = await asyncio.gather(
                    *(
                        client.post(s.url + "/v1/streams/counts/events", json=body, headers=headers)
                        for s in (a, b)
                    )
                )
                return [r.status_code for r in answers]

            statuses = await asyncio.gather(*(both(n) for n in range(KEYS)))
    assert all(s == [202, 202] for s in statuses), statuses
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT data::jsonb->>'n', count(*) FROM stream_events GROUP BY 1 HAVING count(*) > 1"
        ).fetchall()
    assert rows == []  # one event per key
