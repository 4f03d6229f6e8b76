"""Idempotency on a start that must queue: a key names one request, whatever path it took.

A start that fits is logged and granted in one transaction; one that must wait is logged first
and queued. Both paths find a key already taken and must then compare the request: the same
one gets the first start back, another one is refused (`IdempotencyConflict`) and changes
nothing. The path that fits is pinned elsewhere; this is the queued one, on both stores.
"""

from __future__ import annotations

from typing import Any

import pytest

from yoke.errors import IdempotencyConflict
from yoke.executions import ExecutionStatus, Limits, StartStatus

from .helpers import Gates, count_rows, make_app


@pytest.mark.parametrize(
    ("other_input", "other_session"),
    [
        ({"gate": "x"}, None),  # another input
        ({"gate": "q"}, "elsewhere"),  # the same input, another session
    ],
)
async def test_a_key_reused_with_another_request_while_its_start_queues_is_refused(
    database_url: str, other_input: Any, other_session: str | None
) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=1))
    async with app.running():
        ex = app.executions
        held = await ex.start("hold", {"gate": "h"})
        assert held.status is StartStatus.GRANTED and held.execution_id is not None
        first = await ex.start("hold", {"gate": "q"}, idempotency_key="k")
        assert first.status is StartStatus.QUEUED

        with pytest.raises(IdempotencyConflict):
            await ex.start("hold", other_input, session=other_session, idempotency_key="k")
        # Refused with nothing written: still one queued start, and only the held one runs.
        assert count_rows(database_url, "yoke_starts") == 2
        assert (ex.kernel.running, ex.kernel.queued) == (1, 1)
        # The same request again is the first start, still queued.
        assert await ex.start("hold", {"gate": "q"}, idempotency_key="k") == first

        gates.open("h")
        await ex.wait(held.execution_id, timeout=10)
        granted = await ex.wait_granted(first.start_id, timeout=10)
        assert granted.execution_id is not None
        gates.open("q")
        done = await ex.wait(granted.execution_id, timeout=10)
    assert done.status is ExecutionStatus.SUCCEEDED and done.input == {"gate": "q"}
    assert gates.started == ["h", "q"]  # the refused request never ran
    assert count_rows(database_url, "yoke_executions") == 2
