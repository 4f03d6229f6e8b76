"""The chaos checker on hand-made histories: it must find each break it counts, and find
nothing in a clean history (so a 0 from a chaos run means something)."""

from __future__ import annotations

import dataclasses

from tests.ha.checker import (
    Ack,
    EventAck,
    History,
    SlotChange,
    StartRow,
    check,
    overshoot,
)


def clean() -> History:
    """Two slots; a, b run together, c starts the instant a ends; every ack is in the store;
    events 0-3 appended once and processed once."""
    slots = [
        SlotChange("a", +1, 1.0),
        SlotChange("b", +1, 1.5),
        SlotChange("a", -1, 2.0),
        SlotChange("c", +1, 2.0),
        SlotChange("b", -1, 3.0),
        SlotChange("c", -1, 3.5),
    ]
    starts = {
        "s-a": StartRow("s-a", "GRANTED", "a"),
        "s-b": StartRow("s-b", "GRANTED", "b"),
        "s-c": StartRow("s-c", "GRANTED", "c"),
    }
    acks = [
        Ack("k-a", 0, 201, "s-a", "a", 1.0),
        Ack("k-b", 1, 201, "s-b", "b", 1.5),
        Ack("k-c", 0, 202, "s-c", None, 1.9),
        Ack("k-c", 1, 202, "s-c", None, 2.1),  # a retry answered with the same start
    ]
    return History(
        max_running=2,
        slots=slots,
        starts=starts,
        executions_by_key={"k-a": ["a"], "k-b": ["b"], "k-c": ["c"]},
        acks=acks,
        events=[EventAck("i0", 0), EventAck("i1", 1), EventAck("i0", 2), EventAck("i1", 3)],
        seen={"i0": [0, 2], "i1": [1, 3]},
        counts={"i0": 2, "i1": 2},
        appended={0: 1, 1: 1, 2: 1, 3: 1},
    )


def test_a_clean_history_has_no_violation() -> None:
    report = check(clean())
    assert report.violations == {}
    assert report.peak_running == 2
    assert (report.acked_starts, report.acked_events) == (3, 4)
    assert report.stale_epoch_commits is None  # not measured: not reported as a 0


def test_an_overshoot_is_found() -> None:
    h = clean()
    late = [SlotChange("d", +1, 1.7), SlotChange("d", -1, 1.8)]  # a third while a and b run
    report = check(dataclasses.replace(h, slots=[*h.slots, late[0], late[1]]))
    assert report.violations == {"overshoot": 1}
    assert report.peak_running == 3


def test_a_start_at_the_instant_of_an_end_is_no_overshoot_but_one_before_is() -> None:
    slots = [SlotChange("a", +1, 1.0), SlotChange("b", +1, 2.0), SlotChange("a", -1, 2.0)]
    assert overshoot(slots, 1) == (0, 1)
    early = [SlotChange("a", +1, 1.0), SlotChange("b", +1, 1.999), SlotChange("a", -1, 2.0)]
    assert overshoot(early, 1) == (1, 2)


def test_two_executions_of_one_key_are_a_duplicate() -> None:
    h = clean()
    report = check(
        dataclasses.replace(h, executions_by_key={**h.executions_by_key, "k-a": ["a", "a2"]})
    )
    assert report.violations == {"duplicates": 1}


def test_one_key_acknowledged_with_two_starts_is_a_duplicate() -> None:
    h = clean()
    other = StartRow("s-c2", "GRANTED", "c")
    report = check(
        dataclasses.replace(
            h,
            starts={**h.starts, "s-c2": other},
            acks=[*h.acks, Ack("k-c", 0, 202, "s-c2", None, 2.2)],
        )
    )
    assert report.violations == {"duplicates": 1}


def test_an_acknowledged_start_missing_from_the_store_is_lost() -> None:
    h = clean()
    starts = {k: v for k, v in h.starts.items() if k != "s-b"}
    assert check(dataclasses.replace(h, starts=starts)).violations == {"lost_starts": 1}


def test_a_granted_start_whose_execution_is_missing_is_lost() -> None:
    h = clean()
    by_key = {**h.executions_by_key, "k-a": []}
    assert check(dataclasses.replace(h, executions_by_key=by_key)).violations == {"lost_starts": 1}


def test_an_acknowledged_start_refused_later_is_reported_not_judged() -> None:
    h = clean()
    starts = {**h.starts, "s-c": StartRow("s-c", "REFUSED", None)}
    report = check(
        dataclasses.replace(h, starts=starts, executions_by_key={"k-a": ["a"], "k-b": ["b"]})
    )
    assert report.violations == {}
    assert report.acked_then_not_run == 1


def test_an_event_no_state_lists_is_lost() -> None:
    h = clean()
    seen = {"i0": [0], "i1": [1, 3]}
    report = check(dataclasses.replace(h, seen=seen, counts={"i0": 1, "i1": 2}))
    assert report.violations == {"events_lost": 1}


def test_an_event_applied_twice_is_found_and_one_appended_twice_is_told_apart() -> None:
    h = clean()
    seen = {"i0": [0, 2, 2], "i1": [1, 3]}
    applied_twice = dataclasses.replace(h, seen=seen, counts={"i0": 3, "i1": 2})
    assert check(applied_twice).violations == {"events_twice": 1}
    appended_twice = dataclasses.replace(applied_twice, appended={**(h.appended or {}), 2: 2})
    assert check(appended_twice).violations == {"events_appended_twice": 1}


def test_a_counter_that_lost_an_update_is_found() -> None:
    h = clean()
    assert check(dataclasses.replace(h, counts={"i0": 1, "i1": 2})).violations == {
        "count_mismatches": 1
    }


def test_stale_epoch_commits_count_once_measured() -> None:
    h = clean()
    assert check(dataclasses.replace(h, stale_epoch_commits=0)).violations == {}
    assert check(dataclasses.replace(h, stale_epoch_commits=2)).violations == {
        "stale_epoch_commits": 2
    }


def test_a_slot_never_freed_and_a_start_never_served_are_stuck() -> None:
    h = clean()
    never_ends = [c for c in h.slots if not (c.execution_id == "b" and c.delta < 0)]
    assert check(dataclasses.replace(h, slots=never_ends)).violations == {"stuck": 1}
    starts = {**h.starts, "s-d": StartRow("s-d", "QUEUED", None)}
    assert check(dataclasses.replace(h, starts=starts)).violations == {"stuck": 1}
