"""Run the benchmarks and write their figures to docs/BENCHMARKS.md.

`.venv/bin/python -m bench.run [--quick] [--only actors,dbos,...]`

Each benchmark is a module `bench.bench_<name>` that prints one markdown section (medians of
several runs and ratios to a baseline measured in the same run) and writes its raw figures to
`bench/results/<name>.json`, from which `bench.plots` draws the section's plots (SVG, under
docs/benchmarks/) when it has some. They run one after another in fresh processes so that one
cannot warm or tire the heap of the next. Each section is headed by the date and the machine it
was measured on. With `--only`, the sections of the benchmarks not run are kept as they were in
docs/BENCHMARKS.md, with their dates and plots, and so is the note after the last section.
"""

from __future__ import annotations

import argparse
import datetime
import re
import subprocess
import sys
from pathlib import Path

from bench import plots
from bench.common import machine

ORDER = (
    # yoke against its peers first, each measured beside yoke in the same run
    "actors",
    "dbos",
    "fair",
    "kernel",
    "executions",
    "timers",
    "server",
    "connections",
    "admission",
    "rates",
    "ha",
    "fleet",
    "fairclaim",
    "executors",
    "dashboard",
    "tracing",
    "chaos",  # written by `python -m bench.chaos` (its own command: it runs for minutes)
)
HEADER = """# Benchmarks

Written by `python -m bench.run`. It opens with yoke against its peers, each peer measured on
the same machine in the same run as yoke, their runs taking turns: PgQueuer and Procrastinate
for the drain and the appends (`actors`), DBOS Transact's queues for durable starts under a
concurrency cap and for fairness under a flood (`dbos`). Then yoke's own benchmarks. The
machine is shared and noisy, so every figure is a median of several runs with its min-max, and
each speed is also given as a ratio to a baseline measured in the same run. Each section is
headed by the date and the machine it was measured on; the machines differ between sections
(the note at the end). CI does not run these and does not fail on a timing.

"""
SECTION = re.compile(r"<!-- bench:(\w+) -->\n(.*?)<!-- /bench:\1 -->\n", re.S)


def kept_sections(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    return {m.group(1): m.group(2) for m in SECTION.finditer(path.read_text())}


def kept_notes(path: Path) -> str:
    """The hand-written note after the last section (about the machines the figures come
    from): kept as it is, since a run cannot know it."""
    if not path.exists():
        return ""
    text = path.read_text()
    ends = list(SECTION.finditer(text))
    return text[ends[-1].end() :].strip() + "\n" if ends else ""


def with_plots(section: str, images: list[str]) -> str:
    """The section with its plots' image lines below its heading."""
    lines = section.split("\n")
    at = next((k + 1 for k, line in enumerate(lines) if line.startswith("## ")), 0)
    shown = [part for image in images for part in ("", image)]
    return "\n".join(lines[:at] + shown + lines[at:])


def write(output: Path, fresh: dict[str, str]) -> None:
    """docs/BENCHMARKS.md with the `fresh` sections, the others and the closing note kept."""
    sections = kept_sections(output) | fresh
    body = "".join(
        f"<!-- bench:{name} -->\n{sections[name]}<!-- /bench:{name} -->\n\n"
        for name in ORDER
        if name in sections
    )
    output.write_text(HEADER + body + kept_notes(output))


def run_one(name: str, quick: bool) -> str:
    argv = [sys.executable, "-m", f"bench.bench_{name}", *(["--quick"] if quick else [])]
    print(f"running {' '.join(argv[1:])}", file=sys.stderr, flush=True)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"bench_{name} failed with exit code {done.returncode}")
    stamp = (
        f"_Measured {datetime.date.today().isoformat()} with "
        f"`python -m bench.run{' --quick' if quick else ''} --only {name}` on {machine()}._\n\n"
    )
    return with_plots(stamp + done.stdout.strip() + "\n", plots.draw(name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default=",".join(ORDER))
    parser.add_argument("--output", default="docs/BENCHMARKS.md")
    args = parser.parse_args()
    output = Path(args.output)
    fresh = {
        name: run_one(name, args.quick)
        for name in args.only.split(",")
        if name and Path(f"bench/bench_{name}.py").exists()
    }
    write(output, fresh)
    print(output.read_text())


if __name__ == "__main__":
    main()
