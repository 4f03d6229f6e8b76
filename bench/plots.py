"""The plots of docs/BENCHMARKS.md: SVG drawn by `python -m bench.run` from the raw figures a
benchmark wrote to bench/results/<name>.json, into docs/benchmarks/<name>-*.svg.

Each bar is a median with its min-max as a whisker, as in the tables. matplotlib's SVG backend
writes text as text (no font is embedded or fetched) and, with a fixed hash salt and no date,
the same figures give the same file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
DOCS = ROOT / "docs"
OUT = DOCS / "benchmarks"
YOKE = "#2f6db5"
PEER = "#b5b5b5"

Bar = tuple[str, Sequence[float]]  # a label and the runs' values


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as missing:
        raise SystemExit(
            "the plots need matplotlib: .venv/bin/pip install -e '.[bench]'"
        ) from missing
    matplotlib.use("svg")
    matplotlib.rcParams.update(
        {
            "svg.fonttype": "none",
            "svg.hashsalt": "yoke-bench",
            "font.size": 9,
            "axes.spines.top": False,
            "axes.spines.right": False,
        }
    )
    import matplotlib.pyplot as plt

    return plt


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _bars(ax: Any, bars: Sequence[Bar], title: str, unit: str, digits: int = 0) -> None:
    """Horizontal bars, top to bottom in the order given; yoke's in blue, its peers' in grey;
    each labelled with its median."""
    shown = [(label, list(v)) for label, v in bars if v]
    ys = list(range(len(shown)))[::-1]
    medians = [_median(v) for _, v in shown]
    low = [m - min(v) for m, (_, v) in zip(medians, shown, strict=True)]
    high = [max(v) - m for m, (_, v) in zip(medians, shown, strict=True)]
    colours = [YOKE if label.startswith("yoke") else PEER for label, _ in shown]
    ax.barh(ys, medians, color=colours, xerr=[low, high], capsize=3, ecolor="#444444")
    ax.set_yticks(ys, [label for label, _ in shown])
    ax.set_title(title, loc="left", fontsize=9)
    ax.set_xlabel(unit)
    top = max((max(v) for _, v in shown), default=1.0)
    ax.set_xlim(0, top * 1.3)
    for y, m, (_, v) in zip(ys, medians, shown, strict=True):
        ax.text(max(v) + top * 0.02, y, f"{m:,.{digits}f}", va="center", fontsize=8)


def _save(fig: Any, name: str) -> str:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / name
    fig.tight_layout()
    fig.savefig(path, format="svg", metadata={"Date": None})
    fig.clear()
    return path.relative_to(DOCS).as_posix()


def actors(doc: dict[str, Any]) -> list[tuple[str, str]]:
    plt = _pyplot()
    pgq, pro = doc.get("pgqueuer_batch100", {}), doc.get("procrastinate_c50", {})
    pg, lite = doc["PostgreSQL, 1 worker"], doc["SQLite, 1 worker"]
    fig, (drain, append) = plt.subplots(1, 2, figsize=(9, 2.6))
    _bars(
        drain,
        [
            ("yoke, PostgreSQL", pg["drain_per_s"]),
            ("yoke, SQLite", lite["drain_per_s"]),
            ("PgQueuer 1.6.0", pgq.get("drain_per_s", [])),
            ("Procrastinate 3.10.0", pro.get("drain_per_s", [])),
        ],
        f"Drain of {doc['n']:,} no-op jobs, one worker process",
        "jobs/s (more is better)",
    )
    _bars(
        append,
        [
            ("yoke, PostgreSQL", pg["appends_per_s"]),
            ("yoke, SQLite", lite["appends_per_s"]),
            ("PgQueuer 1.6.0", pgq.get("enqueue_per_s", [])),
            ("Procrastinate 3.10.0", pro.get("enqueue_per_s", [])),
        ],
        "Appends (peers: enqueues), 1,000 per call",
        "jobs/s (more is better)",
    )
    name = _save(fig, "actors-peers.svg")
    plt.close(fig)
    return [(name, "yoke's drain and appends beside PgQueuer's and Procrastinate's")]


def dbos(doc: dict[str, Any]) -> list[tuple[str, str]]:
    plt = _pyplot()
    runs = doc["runs"]

    def col(scenario: str, label: str, key: str) -> list[float]:
        return [float(r[key]) for r in runs.get(scenario, {}).get(label, [])]

    shown: list[tuple[str, str]] = []
    if "cap" in runs and "free" in runs:
        fig, (rate, cpu, latency) = plt.subplots(1, 3, figsize=(10, 2.4))
        pairs = [
            (f"{system}, {cap}", scenario, label)
            for scenario, cap in (("cap", "cap 16"), ("free", "no cap"))
            for system, label in (("yoke", "yoke"), ("DBOS", "DBOS"))
        ]
        _bars(
            rate,
            [(t, col(s, lab, "per_s")) for t, s, lab in pairs],
            "Durable starts of a no-op workflow",
            "workflows/s (more is better)",
        )
        _bars(
            cpu,
            [(t, col(s, lab, "cpu_ms")) for t, s, lab in pairs],
            "Process CPU per workflow",
            "ms (less is better)",
            2,
        )
        _bars(
            latency,
            [(t, col(s, lab, "p50_ms")) for t, s, lab in pairs],
            f"Start latency p50, {doc['paced']} paced starts",
            "ms (less is better)",
            1,
        )
        shown.append((_save(fig, "dbos-starts.svg"), "yoke's durable starts beside DBOS's"))
        plt.close(fig)
    if "flood" in runs:
        labels = list(runs["flood"])
        fig, (p50, p99, share) = plt.subplots(1, 3, figsize=(10, 2.2))
        for ax, key, title in ((p50, "p50_T", "p50"), (p99, "p99_T", "p99")):
            _bars(
                ax,
                [(label, col("flood", label, key)) for label in labels],
                f"Light tenants' wait {title} under a flood",
                "task times (less is better)",
            )
        _bars(
            share,
            [(label, col("flood", label, "flood_share")) for label in labels],
            "Flood's share, light work waiting",
            "of the starts (fair: 0.17)",
            2,
        )
        share.axvline(1 / 6, color="#444444", linestyle=":", linewidth=1)
        shown.append((_save(fig, "dbos-flood.svg"), "light tenants' waits under a flood"))
        plt.close(fig)
    return shown


PLOTS: dict[str, Callable[[dict[str, Any]], list[tuple[str, str]]]] = {
    "actors": actors,
    "dbos": dbos,
}


def draw(name: str) -> list[str]:
    """Draw the plots of benchmark `name` from its raw figures; their markdown image lines."""
    if name not in PLOTS:
        return []
    doc = json.loads((RESULTS / f"{name}.json").read_text())
    return [f"![{alt}]({path})" for path, alt in PLOTS[name](doc)]
