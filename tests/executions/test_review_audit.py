"""A runtime change must not land without its control-log entry: here the log's write fails
(the store drops the connection) after the priority change itself was stored."""

from __future__ import annotations

from typing import Any

import pytest

import yoke
from yoke.errors import StoreUnavailable
from yoke.executions import Limits, StartStatus

from .helpers import Gates, make_app

OPERATOR = yoke.Principal("op", ["OPERATOR"])


@pytest.mark.xfail(
    strict=True,
    reason="set_priority stores the new priority, then appends the audit entry in another "
    "transaction: if the append fails the change stays, with no audit trail",
)
async def test_a_priority_change_whose_audit_fails_changes_nothing(database_url: str) -> None:
    gates = Gates()
    app = make_app(database_url, gates, limits=Limits(max_running=1))
    async with app.running():
        store = app.store
        assert store is not None
        ex = app.executions
        await ex.start("hold", {"gate": "a"})
        queued = await ex.start("hold", {"gate": "b"})
        assert queued.status is StartStatus.QUEUED
        real = store.append_control

        async def down(**kw: Any) -> Any:
            store.append_control = real  # type: ignore[method-assign]
            raise StoreUnavailable("the database is down")

        store.append_control = down  # type: ignore[method-assign]
        try:
            with pytest.raises(StoreUnavailable):
                await ex.set_priority(queued.start_id, 7, principal=OPERATOR)
            row = await store.get_start(queued.start_id)
            assert row is not None
            audited = [e for e in await ex.audit() if e.kind == "priority"]
            # Either both happened or neither: a change without its audit entry is the defect.
            assert (row.priority == 7) == bool(audited)
        finally:
            gates.open("a")
            gates.open("b")
