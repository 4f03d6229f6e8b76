"""The loops that hold nothing and try again at their own pace (the tenants' settings, the
fleet's hand-overs and balance, the executors' rows, leases) tell an outage from a refusal:
a transient error is a WARNING (it passes by itself), a permanent one an ERROR (someone must
look). Shown on the tenants' settings poll over the in-package memory store."""

from __future__ import annotations

import asyncio
import logging

import pytest

from yoke.actors.tenant_rules import TenantRules
from yoke.clock import SystemClock
from yoke.errors import BadValue, StoreUnavailable, YokeError
from yoke.retry import RetryPolicy
from yoke.testing import MemoryActorStore


@pytest.mark.parametrize(
    ("error", "level"), [(StoreUnavailable("down"), "WARNING"), (BadValue("refused"), "ERROR")]
)
async def test_a_refused_read_is_an_error_an_outage_a_warning(
    error: YokeError, level: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryActorStore()

    async def refused(*, limit: int) -> list[object]:
        raise error

    store.tenants.tenant_settings = refused  # type: ignore[method-assign,assignment]
    rules = TenantRules(
        store=store,
        worker_id="w1",
        clock=SystemClock(),
        poll=60.0,
        stale_after=10.0,
        retry=RetryPolicy(),
        stopping=lambda: False,
        changed=lambda weights, caps: None,
    )
    with caplog.at_level(logging.WARNING, logger="yoke"):
        task = asyncio.create_task(rules.run())
        await asyncio.wait_for(rules.ready.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    [record] = [r for r in caplog.records if "tenants' settings" in r.getMessage()]
    assert record.levelname == level
