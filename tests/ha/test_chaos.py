"""The chaos suite's short profile (CI): two real `yoke serve --ha` through their own fault
proxies, two `yoke worker`s, a keyed load of starts and events, each fault once, then the
checker's counts must all be 0 and the failovers must happen within generous bounds.

Lease TTL 3 s; SIGSTOP for 7.5 s, blackhole for 9 s. (At 2 s, on this shared 2-core machine
under a load average of 9, a leader starved of CPU missed its renewals and the lease flapped
between the servers; 3 s keeps the run about a fault, not about the machine.) The time
bounds are several times the targets (docs/BENCHMARKS.md has the measured medians,
from `python -m bench.chaos`); what must hold exactly is the counts.

Two known defects are pinned apart (strict xfails). Limits set
less than one heartbeat before a failover are not in force on the new leader
(tests/ha/test_limits_failover.py; this profile's heartbeat of 2 s comes before its first
fault, so it does not meet it). And the same Idempotency-Key retried on the other server while
the first append is still in flight appends the event twice (`events_appended_twice`, left
out of the counts asserted here; pinned by tests/ha/test_append_retries.py). The actor work
done for each appended event is still checked exactly (`events_twice`: applied more often
than appended).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ha.faults import Fault, FaultRecord
from tests.ha.harness import Cluster
from tests.ha.profile import Profile

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

PROFILE = Profile(ha=True, ttl=3.0)
KNOWN = {"events_appended_twice"}


async def run(faults: tuple[Fault, ...], url: str, tmp: Path) -> tuple[list[FaultRecord], Cluster]:
    async with Cluster(url, PROFILE, tmp) as c:
        async with c.load():
            records = [await c.fault(f) for f in faults]
        await c.settle()
        report = await c.check()
    assert c.load_log.unexpected == []  # no start or event refused with a 4xx
    violations = {k: v for k, v in report.violations.items() if k not in KNOWN}
    assert violations == {}, f"{report}\n{records}"
    assert report.stale_epoch_commits == 0  # measured: the pair writes under a lease
    assert report.acked_starts > 20 and report.acked_events > 10, report  # the load ran
    assert report.peak_running == PROFILE.max_running, report  # the cap was reached
    return records, c


@pytest.mark.timeout(240)
async def test_process_faults_keep_every_promise(
    pg_databases: Callable[[], str], tmp_path: Path
) -> None:
    records, _ = await run(("sigterm", "kill", "stop"), pg_databases(), tmp_path)
    by = {r.fault: r for r in records}
    ttl = PROFILE.ttl
    # Targets: 1 s, 2 s (liveness lock), TTL + 3 s; bounds here: the machine is shared.
    assert by["sigterm"].failover_after is not None and by["sigterm"].failover_after < 5, by
    assert by["kill"].failover_after is not None and by["kill"].failover_after < 10, by
    stop = by["stop"]
    assert stop.failover_after is not None and stop.failover_after < ttl + 15, by
    assert stop.failover_after > ttl * 0.5, by  # not before its lease could have lapsed
    for r in records:  # a deposed leader answers no start after the takeover
        assert r.old_acks_after_takeover == 0, r


@pytest.mark.timeout(240)
async def test_network_faults_keep_every_promise(
    pg_databases: Callable[[], str], tmp_path: Path
) -> None:
    records, _ = await run(("blackhole", "terminate"), pg_databases(), tmp_path)
    by = {r.fault: r for r in records}
    hole = by["blackhole"]
    # Target TTL + 2 s; the bound allows for a loaded machine.
    assert hole.failover_after is not None and hole.failover_after < PROFILE.ttl + 15, by
    assert hole.old_acks_after_takeover == 0, by
    # Sessions cut under the leader: served again (by it or, after a takeover, the other).
    assert by["terminate"].served_after is not None and by["terminate"].served_after < 20, by
    assert by["terminate"].old_acks_after_takeover == 0, by
