"""`yoke.tables`: a table printed at a width fits it, and no word in it is cut; columns that do
not fit are left out from the right and named. Checked on rich's own output, over random
cells (words up to 40 characters, so ids and times among them) and widths."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from yoke.tables import fit, render, render_pairs, table_width

WORD = st.text(alphabet="abcdefghij-0123456789", min_size=1, max_size=40)
CELL = st.lists(WORD, min_size=1, max_size=4).map(" ".join)


def printed(renderable: object, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(text, str)
    return text


@settings(max_examples=150, deadline=None)
@given(
    header=st.lists(WORD, min_size=1, max_size=6, unique=True),
    data=st.data(),
    width=st.integers(min_value=40, max_value=160),
)
def test_a_table_fits_its_width_and_keeps_every_word_whole(
    header: list[str], data: st.DataObject, width: int
) -> None:
    rows = data.draw(
        st.lists(st.lists(CELL, min_size=len(header), max_size=len(header)), max_size=5)
    )
    table, left_out = render("t", header, rows, width=width)
    shown = len(header) - len(left_out)
    assert left_out == header[shown:]
    text = printed(table, width)
    cells = [header[:shown], *(row[:shown] for row in rows)]
    if table_width(fit([[h, *(r[i] for r in rows)] for i, h in enumerate(header)], width)) <= width:
        assert all(len(line) <= width for line in text.splitlines()), text
    words = set(text.split())
    for row in cells:
        for cell in row:
            assert set(cell.split()) <= words, (cell, text)


def test_columns_are_left_out_from_the_right_and_the_first_always_stays() -> None:
    wide = "x" * 60
    widths = fit([["id", wide], ["status", "live"], ["note", wide]], 80)
    assert widths == [60, 6]
    assert fit([["id", wide]], 20) == [60]  # the one kept column, wider than the room


@given(
    pairs=st.lists(st.tuples(WORD, CELL), min_size=1, max_size=6),
    width=st.integers(min_value=45, max_value=120),
)
@settings(max_examples=100, deadline=None)
def test_pairs_fit_and_keep_every_word_whole(pairs: list[tuple[str, str]], width: int) -> None:
    text = printed(render_pairs("p", pairs, width=width), width)
    assert all(len(line) <= width for line in text.splitlines()), text
    words = set(text.split())
    for key, value in pairs:
        assert {key, *value.split()} <= words, (key, value, text)
