"""Run every benchmark and write their figures to docs/BENCHMARKS.md.

`.venv/bin/python -m bench.run [--quick] [--only fair,kernel,...]`

Each benchmark is a module `bench.bench_<name>` that prints one markdown section (medians of
several runs and ratios to a baseline measured in the same run) and writes its raw figures to
`bench/results/<name>.json`. They run one after another in fresh processes so that one cannot
warm or tire the heap of the next.
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
from pathlib import Path

from bench.common import machine

ORDER = ("fair", "kernel", "executions", "server", "actors")
HEADER = """# Benchmarks

Written by `{command}` on {date}.
Machine: {machine}. The machine is shared and noisy, so every figure is a median of several runs
with its min-max, and each speed is also given as a ratio to a baseline measured in the same run.
CI does not run these and does not fail on a timing.

"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default=",".join(ORDER))
    parser.add_argument("--output", default="docs/BENCHMARKS.md")
    args = parser.parse_args()
    chosen = [name for name in args.only.split(",") if name]
    sections = []
    for name in chosen:
        if not Path(f"bench/bench_{name}.py").exists():
            continue
        argv = [sys.executable, "-m", f"bench.bench_{name}", *(["--quick"] if args.quick else [])]
        print(f"running {' '.join(argv[1:])}", file=sys.stderr, flush=True)
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.stderr.write(done.stderr)
            raise SystemExit(f"bench_{name} failed with exit code {done.returncode}")
        sections.append(done.stdout.strip() + "\n")
    command = "python -m bench.run" + (" --quick" if args.quick else "")
    text = HEADER.format(
        command=command, date=datetime.date.today().isoformat(), machine=machine()
    ) + "\n".join(sections)
    Path(args.output).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
