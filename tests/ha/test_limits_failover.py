"""A defect the chaos suite found (bench.chaos, round 1: 20 running under max_running 4): a
new leader granted under the limits it last followed, not the newest recorded ones.

Limits reach a standby only at its heartbeat (`_follow_limits`, every
YOKE_HEARTBEAT_INTERVAL); a takeover (`Leadership._adopt`) now reads the control log after its
fenced adoption and applies the newest limits before it admits. Without that read, limits set
less than one heartbeat before a failover are not in force on the new leader, and it grants the
adopted queue with no cap (this test then sees an overshoot).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ha.harness import Cluster
from tests.ha.profile import Profile

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

# A heartbeat every 12 s (stale after 60 s), so the standby has not followed the limits set at
# the start when the leader is stopped 1 s later; runs of 2 s at 10 starts a second, so a queue
# waits behind max_running 4 and is adopted by the new leader.
PROFILE = Profile(
    ha=True,
    ttl=3.0,
    stale_after=60.0,
    run_seconds=2.0,
    start_rate=10.0,
    event_rate=0.0,
    warmup=1.0,
)


@pytest.mark.timeout(180)
async def test_limits_set_just_before_a_failover_hold_on_the_new_leader(
    pg_databases: Callable[[], str], tmp_path: Path
) -> None:
    async with Cluster(pg_databases(), PROFILE, tmp_path) as c:
        async with c.load():
            record = await c.fault("sigterm")
        await c.settle()
        report = await c.check()
    assert record.failover_after is not None, record
    assert report.acked_starts > 10, report
    assert (report.overshoot, report.peak_running) == (0, PROFILE.max_running), report
