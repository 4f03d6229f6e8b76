"""`ClaimWindows` alone: the fair claim's bookkeeping (pure, no store)."""

from __future__ import annotations

from yoke.actors.claims import ClaimWindows


def hold(w: ClaimWindows, tenant: str, n: int) -> None:
    for _ in range(n):
        w.held(tenant)


def test_a_new_tenant_always_has_room_and_windows_follow_weights() -> None:
    w = ClaimWindows(budget=40)
    assert w.quota("flood") == 40  # alone: the whole budget
    w.claimed(["flood"] * 40)
    hold(w, "flood", 40)
    assert w.quota("flood") == 0  # its window is full: a claim takes none of its rows
    w.claimed([])
    # A tenant that appears gets half the budget at once, whatever the flood holds.
    assert w.quota("light") == 20
    w.claimed(["light"] * 3)  # it had 3 rows: it is not backlogged
    hold(w, "light", 3)
    assert w.backlogged() == {"flood"}
    w.set_weights({"gold": 3})
    assert w.window("gold") == 24  # 40 x 3 / (1 + 1 + 3)
    assert w.window("flood") == 20  # 40 x 1 / (1 + 1)


def test_a_backlogged_tenant_is_claimed_again_when_a_quarter_of_its_window_is_free() -> None:
    w = ClaimWindows(budget=8)
    w.quota("a")
    w.claimed(["a"] * 8)
    hold(w, "a", 8)
    wants = [w.released("a") for _ in range(8)]
    assert wants == [False, True, True, True, True, True, True, True]  # from 6 held on
    assert w.hungry()  # its rows wait in the store and its window is free: claim
    assert w.holding("a") == 0
    # A tenant that took less than its quota had nothing more: no claim for it.
    w.quota("b")
    w.claimed(["b"])
    hold(w, "b", 1)
    assert w.released("b") is False
