"""An execution's end that the store refuses for good (not an outage) is not retried forever:
written alone, and refused alone, the execution ends FAILED with the refusal as its error, and
its slot is freed (`Executions._finish_refused`, `errors.TRANSIENT`). The refusal is the
database's own: a trigger refuses an output carrying a marker, on both backends."""

from __future__ import annotations

from typing import Any

from tests.refusals import Refusal, refusing
from yoke.executions import Context, ExecutionStatus, Limits

from .helpers import make_app

REFUSE_OUTPUT = Refusal(
    name="test_refuse_output",
    table="yoke_executions",
    op="UPDATE",
    when="NEW.output LIKE '%refuse-me%'",
    message="this output is refused",
)


async def test_a_refused_end_is_recorded_failed_and_frees_the_slot(database_url: str) -> None:
    app = make_app(database_url, limits=Limits(max_running=1))

    @app.workflow()
    async def echo(ctx: Context, input: Any) -> Any:
        return input

    async with app.running():
        with refusing(database_url, REFUSE_OUTPUT):  # the schema is there now
            refused = await app.executions.start("echo", input="refuse-me")
            after = await app.executions.start("echo", input="fine")
            assert refused.execution_id is not None
            first = await app.executions.wait(refused.execution_id, 8)
            granted = await app.executions.wait_granted(after.start_id, timeout=8)  # slot freed
            assert granted.execution_id is not None
            second = await app.executions.wait(granted.execution_id, 8)
    assert first.status is ExecutionStatus.FAILED and first.error is not None, first
    assert "this output is refused" in first.error.message, first.error
    assert second.status is ExecutionStatus.SUCCEEDED and second.output == "fine", second
