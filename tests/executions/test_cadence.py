"""When ticks fall (`executions/cadence.py`): cron in a time zone across daylight-saving
changes, periods on the epoch's grid, and the catch-up rule for ticks that passed."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from yoke.errors import BadType, BadValue
from yoke.executions.cadence import Cadence, CatchUp, plan

BERLIN = ZoneInfo("Europe/Berlin")


def at(year: int, month: int, day: int, hour: int, minute: int) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=BERLIN).timestamp()


def local(t: float) -> str:
    return datetime.fromtimestamp(t, BERLIN).strftime("%Y-%m-%d %H:%M %Z")


def ticks(c: Cadence, after: float, n: int) -> list[str]:
    out = []
    for _ in range(n):
        after = c.next_after(after)
        out.append(local(after))
    return out


def test_cron_at_0230_across_spring_forward_fires_at_0300_once() -> None:
    """On 2026-03-29 Berlin's clocks jump from 02:00 to 03:00: 02:30 does not exist."""
    c = Cadence(cron="30 2 * * *", timezone="Europe/Berlin")
    assert ticks(c, at(2026, 3, 27, 12, 0), 4) == [
        "2026-03-28 02:30 CET",
        "2026-03-29 03:00 CEST",
        "2026-03-30 02:30 CEST",
        "2026-03-31 02:30 CEST",
    ]


def test_cron_at_0230_across_fall_back_fires_once() -> None:
    """On 2026-10-25 Berlin's clocks go from 03:00 back to 02:00: 02:30 happens twice."""
    c = Cadence(cron="30 2 * * *", timezone="Europe/Berlin")
    got = [c.next_after(at(2026, 10, 24, 12, 0))]
    for _ in range(2):
        got.append(c.next_after(got[-1]))
    assert [local(t) for t in got] == [
        "2026-10-25 02:30 CEST",
        "2026-10-26 02:30 CET",
        "2026-10-27 02:30 CET",
    ]
    assert got[1] - got[0] == 25 * 3600  # the day of the change has 25 hours


def test_hourly_cron_counts_the_hours_that_exist() -> None:
    c = Cadence(cron="0 * * * *", timezone="Europe/Berlin")
    start = at(2026, 10, 25, 0, 30)
    # Real hours from 00:30 CEST to 04:30 CET: five of them, 02:00 twice.
    assert len(ticks(c, start, 5)) == 5
    assert c.next_after(c.next_after(c.next_after(start))) - start == 2.5 * 3600


def test_every_ticks_on_the_epoch_grid() -> None:
    c = Cadence(every=60)
    assert c.next_after(119.0) == 120.0
    assert c.next_after(120.0) == 180.0
    assert c.last_before(120.0) == 60.0
    assert c.at_or_after(120.0) == 120.0
    assert c.count(60.0, 600.0) == 10


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"cron": "* * * *"}, BadValue),
        ({"cron": "* * * * * *"}, BadValue),  # six fields: seconds are not cron's
        ({"cron": "61 * * * *"}, BadValue),
        ({"cron": "0 0 30 2 *"}, BadValue),  # never fires
        ({"cron": "x" * 500}, BadValue),
        ({"cron": 5}, BadType),
        ({"every": 0.5}, BadValue),
        ({"every": float("nan")}, BadValue),
        ({"every": True}, BadType),
        ({"every": "5"}, BadType),
        ({}, BadValue),
        ({"cron": "* * * * *", "every": 5}, BadValue),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, BadValue),
        ({"cron": "* * * * *", "timezone": "../../etc/passwd"}, BadValue),
    ],
)
def test_bad_cadences_are_refused_by_name(kwargs: dict[str, object], error: type) -> None:
    with pytest.raises(error):
        Cadence(**kwargs)  # type: ignore[arg-type]


def test_a_tick_that_is_only_late_is_started() -> None:
    p = plan(Cadence(every=60), 600.0, 605.0, grace=60, catch_up="skip")
    assert p.starts == (600.0,) and p.missed == p.skipped == 0 and p.next_at == 660.0


def test_late_ticks_within_the_grace_each_start() -> None:
    p = plan(Cadence(every=1), 100.0, 103.5, grace=60, catch_up="skip")
    assert p.starts == (100.0, 101.0, 102.0, 103.0) and p.next_at == 104.0


@pytest.mark.parametrize("catch_up", ["one", "skip"])
def test_ticks_missed_while_down_follow_catch_up(catch_up: CatchUp) -> None:
    # Due at 600; every server was down until 1230: ticks 600..1140 passed over the grace of
    # 60 s (10 of them), 1200 is only late.
    p = plan(Cadence(every=60), 600.0, 1230.0, grace=60, catch_up=catch_up)
    if catch_up == "one":
        assert p.starts == (1140.0, 1200.0) and p.missed == 9 and p.skipped == 0
    else:
        assert p.starts == (1200.0,) and p.skipped == 10 and p.missed == 0
    assert p.next_at == 1260.0


def test_a_year_down_is_one_start_not_a_flood() -> None:
    c = Cadence(cron="* * * * *", timezone="UTC")
    due = c.next_after(0.0)
    p = plan(c, due, 365 * 86400.0 + 45, grace=30, catch_up="one")  # the last tick 45 s ago
    assert len(p.starts) == 1 and p.missed >= 999
