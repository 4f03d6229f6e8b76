"""How the `yoke` command prints a table: it fits the terminal, and never cuts a word.

An id cut in two cannot be pasted back and a time cut in two misleads, so a column is never
narrower than its longest word (rich would narrow it further and fold or cut the words when a
table is too wide: its minimum widths are not kept when it shrinks columns). When the columns
do not fit the width at their minimum, the least important are left out, from the right (a
table's columns come most important first), and the command says which; `--json` shows them
all. The room left is shared out among the columns that would wrap, so long text wraps at its
spaces.

This module must never know what a row means: it lays out text.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

PADDING = 2  # one space either side of a cell


def longest_word(text: str) -> int:
    return max((len(w) for w in text.split()), default=0)


def table_width(widths: Sequence[int], *, boxed: bool = True) -> int:
    """The printed width of a table whose columns hold `widths` characters of text: each
    column's text and padding, and in a boxed table a border right of each and the left one."""
    lines = len(widths) + 1 if boxed else 0
    return sum(widths) + PADDING * len(widths) + lines


def fit(
    cells: Sequence[Sequence[str]], width: int, *, keep: int = 1, boxed: bool = True
) -> list[int]:
    """The text width of each column that is shown (the first `len(result)`), given each
    column's cells (header first): every column at least its longest word, at most its longest
    line, and the table within `width`. Columns beyond the first `keep` are left out from the
    right until the rest fit; the first `keep` are always shown."""
    least = [max(longest_word(c) for c in column) for column in cells]
    most = [max(max(len(line) for line in c.splitlines() or [""]) for c in col) for col in cells]
    shown = len(cells)
    while shown > keep and table_width(least[:shown], boxed=boxed) > width:
        shown -= 1
    widths = least[:shown]
    room = width - table_width(widths, boxed=boxed)
    # The room left goes one character at a time to the columns still short of their longest
    # line, in turn, so wide text wraps evenly rather than one column taking it all.
    while room > 0:
        short = [i for i in range(shown) if widths[i] < most[i]]
        if not short:
            break
        for i in short[:room]:
            widths[i] += 1
        room -= min(room, len(short))
    return widths


def render(
    title: str | None,
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    width: int,
    keep: int = 1,
) -> tuple[Table, list[str]]:
    """A rich `Table` of the columns that fit `width` (see `fit`), and the names of the
    columns left out."""
    cells = [[name, *(row[i] for row in rows)] for i, name in enumerate(header)]
    widths = fit(cells, width, keep=keep)
    table = Table(title=title)
    for name, w in zip(header, widths, strict=False):
        table.add_column(name, width=w, overflow="fold")
    for row in rows:
        table.add_row(*row[: len(widths)])
    return table, list(header[len(widths) :])


def render_pairs(
    title: str | None, pairs: Sequence[tuple[str, str]], *, width: int
) -> RenderableType:
    """One value a line, named on its left (no borders), within `width`; when a value holds a
    word too long to stand beside the names, every value goes under its name instead."""
    cells = [[k for k, _ in pairs], [v for _, v in pairs]]
    least = [max((longest_word(c) for c in column), default=0) for column in cells]
    if table_width(least, boxed=False) > width:
        lines: list[RenderableType] = (
            [Text(title, style="italic", justify="center")] if title else []
        )
        for key, value in pairs:
            lines += [Text(key, style="bold"), Padding(Text(value, overflow="fold"), (0, 0, 0, 2))]
        return Group(*lines)
    widths = fit(cells, width, keep=2, boxed=False)
    table = Table(title=title, show_header=False, box=None)
    table.add_column(style="bold", width=widths[0], overflow="fold")
    table.add_column(width=widths[1], overflow="fold")
    for key, value in pairs:
        table.add_row(key, value)
    return table
