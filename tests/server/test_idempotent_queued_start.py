"""Over HTTP: a key reused with another body while its start is queued is 422, even once the
server's kept answer is gone.

The server keeps the first answer per key for its retention and refuses another body against
it; past the retention the request reaches the starts service, whose own record of the key
(the start still queued) must refuse it the same way, not hand back the queued start.
"""

from __future__ import annotations

import asyncio

from tests.server.conftest import Serve
from yoke.executions import Limits

RETENTION = 0.05  # seconds the server keeps an answer


async def test_a_queued_start_s_key_with_another_body_is_422_after_the_kept_answer_expired(
    serve: Serve,
) -> None:
    server, client = await serve(Limits(max_running=1), retention=RETENTION)
    acme = client("acme")
    held = await acme.post("/v1/starts", json={"workflow": "hold", "input": 1})
    assert held.status_code == 201, held.text
    key = {"Idempotency-Key": "k-queued"}
    first = await acme.post("/v1/starts", json={"workflow": "hold", "input": 2}, headers=key)
    assert first.status_code == 202, first.text
    start_id = first.json()["start_id"]

    # Let the server's kept answer expire.
    clock = server.app.clock
    expired = clock.wall() + RETENTION
    while clock.wall() <= expired:  # noqa: ASYNC110 (waiting for the clock, not for an event)
        await asyncio.sleep(RETENTION / 5)

    other = await acme.post("/v1/starts", json={"workflow": "hold", "input": 3}, headers=key)
    assert other.status_code == 422, other.text
    assert other.headers["content-type"].startswith("application/problem+json")
    assert "Idempotency-Replayed" not in other.headers
    # The same body again is the first start, still queued; nothing else was started.
    again = await acme.post("/v1/starts", json={"workflow": "hold", "input": 2}, headers=key)
    assert again.status_code == 202 and again.json()["start_id"] == start_id
    ex = server.app.executions
    assert (ex.kernel.running, ex.kernel.queued) == (1, 1)
