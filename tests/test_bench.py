"""The benchmark runner's document and the counting the peer comparison rests on.

`python -m bench.run --only a,b` rewrites docs/BENCHMARKS.md: the peers first, the sections it
ran replaced, every other section kept byte for byte, the note on machines kept at the end, and
the plots it drew linked below their section's heading. The timings themselves are never
asserted (bench/ measures them); what is checked here is what the document says and that the
most workflows running at once is counted right.
"""

from __future__ import annotations

import re
from pathlib import Path

from bench import run
from bench.bench_dbos import most_at_once

DOCS = Path(__file__).resolve().parents[1] / "docs"
NOTE = "## The machines\n\nWhere the figures come from.\n"


def section(name: str, text: str) -> str:
    return f"<!-- bench:{name} -->\n{text}<!-- /bench:{name} -->\n\n"


def test_a_run_of_some_benchmarks_keeps_the_other_sections_and_the_closing_note(
    tmp_path: Path,
) -> None:
    doc = tmp_path / "BENCHMARKS.md"
    old_kernel = "_Measured 2026-12-01 on a machine._\n\n## Kernel\n\n| a | b |\n"
    doc.write_text(
        run.HEADER + section("kernel", old_kernel) + section("dbos", "old dbos\n") + NOTE
    )

    run.write(doc, {"dbos": "new dbos\n", "actors": "new actors\n"})

    text = doc.read_text()
    assert text.startswith(run.HEADER)
    assert run.kept_sections(doc) == {
        "actors": "new actors\n",
        "dbos": "new dbos\n",
        "kernel": old_kernel,
    }
    at = [text.index(f"<!-- bench:{name} -->") for name in ("actors", "dbos", "kernel")]
    assert at == sorted(at)  # the peers first, then yoke's own
    assert text.endswith("<!-- /bench:kernel -->\n\n" + NOTE)
    run.write(doc, {})  # again, nothing run: nothing moves and nothing is doubled
    assert doc.read_text() == text


def test_the_peers_open_the_document() -> None:
    assert run.ORDER[:2] == ("actors", "dbos")


def test_plots_are_linked_below_the_section_heading() -> None:
    measured = "_Measured 2026-12-03 on a machine._\n\n## Title\n\nThe figures.\n"
    images = ["![a](benchmarks/a.svg)", "![b](benchmarks/b.svg)"]
    assert run.with_plots(measured, images) == (
        "_Measured 2026-12-03 on a machine._\n\n## Title\n\n"
        "![a](benchmarks/a.svg)\n\n![b](benchmarks/b.svg)\n\nThe figures.\n"
    )
    assert run.with_plots(measured, []) == measured


def test_every_plot_of_the_document_is_committed_and_every_committed_plot_is_shown() -> None:
    text = (DOCS / "BENCHMARKS.md").read_text()
    linked = set(re.findall(r"!\[[^\]]*\]\((benchmarks/[^)]+\.svg)\)", text))
    committed = {p.relative_to(DOCS).as_posix() for p in (DOCS / "benchmarks").glob("*.svg")}
    assert linked
    assert linked == committed
    assert text.startswith(run.HEADER + "<!-- bench:actors -->")


def test_most_at_once_counts_overlapping_bodies_across_processes() -> None:
    rows = [
        (0, 0.0, 0.0, 1.0, "a"),
        (1, 0.0, 0.5, 2.0, "a"),  # overlaps 0 and 2
        (2, 0.0, 0.9, 1.5, "b"),  # with 0 and 1: three at 0.9-1.0
        (3, 0.0, 2.0, 3.0, "b"),  # begins as 1 ends: not at once
        (4, 0.0, 2.5, 2.6, "c"),  # inside 3
    ]
    assert most_at_once(rows) == 3
    assert most_at_once(rows[3:]) == 2
    assert most_at_once([rows[1], rows[3]]) == 1  # one ends as the other begins
    assert most_at_once([]) == 0
