"""Run the benchmarks and write their figures to docs/BENCHMARKS.md.

`.venv/bin/python -m bench.run [--quick] [--only fair,kernel,...]`

Each benchmark is a module `bench.bench_<name>` that prints one markdown section (medians of
several runs and ratios to a baseline measured in the same run) and writes its raw figures to
`bench/results/<name>.json`. They run one after another in fresh processes so that one cannot
warm or tire the heap of the next. With `--only`, the sections of the benchmarks not run are
kept as they were in docs/BENCHMARKS.md, each with the date it was measured.
"""

from __future__ import annotations

import argparse
import datetime
import re
import subprocess
import sys
from pathlib import Path

from bench.common import machine

ORDER = (
    "fair",
    "kernel",
    "executions",
    "server",
    "connections",
    "admission",
    "rates",
    "ha",
    "actors",
    "fleet",
    "fairclaim",
    "executors",
    "dashboard",
    "chaos",  # written by `python -m bench.chaos` (its own command: it runs for minutes)
)
HEADER = """# Benchmarks

Written by `python -m bench.run`. The machine is shared and noisy, so every figure is a median
of several runs with its min-max, and each speed is also given as a ratio to a baseline measured
in the same run. CI does not run these and does not fail on a timing.

"""
SECTION = re.compile(r"<!-- bench:(\w+) -->\n(.*?)<!-- /bench:\1 -->\n", re.S)


def kept_sections(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    return {m.group(1): m.group(2) for m in SECTION.finditer(path.read_text())}


def kept_notes(path: Path) -> str:
    """The hand-written notes between the header and the first section (about the machines
    the figures come from): kept as they are, since a run cannot know them."""
    if not path.exists():
        return ""
    text = path.read_text()
    if not text.startswith(HEADER):
        return ""
    first = SECTION.search(text)
    return text[len(HEADER) : first.start() if first else len(text)]


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
    return stamp + done.stdout.strip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default=",".join(ORDER))
    parser.add_argument("--output", default="docs/BENCHMARKS.md")
    args = parser.parse_args()
    output = Path(args.output)
    sections = kept_sections(output)
    notes = kept_notes(output)
    for name in args.only.split(","):
        if name and Path(f"bench/bench_{name}.py").exists():
            sections[name] = run_one(name, args.quick)
    body = "".join(
        f"<!-- bench:{name} -->\n{sections[name]}<!-- /bench:{name} -->\n\n"
        for name in ORDER
        if name in sections
    )
    output.write_text(HEADER + notes + body)
    print(output.read_text())


if __name__ == "__main__":
    main()
