"""README's Python examples run as pasted: each ```python block, alone, in a directory of its
own, on the default SQLite store, exits 0; one that defines `main()` runs it.

A block that is only a fragment says so in its first line, `# fragment: <why>`; it is then
compiled (never run), and such blocks stay few (`MAX_FRAGMENTS`). No block is skipped
otherwise: one that needs something the machine lacks fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
FRAGMENT = "# fragment:"
MAX_FRAGMENTS = 1
SECONDS = 60  # per block; each takes about one


MAIN = re.compile(r"^async def main\(", re.MULTILINE)


def blocks() -> list[tuple[int, str]]:
    """(line, code) of each ```python block of README.md."""
    text = README.read_text()
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in FENCE.finditer(text)]


def cases() -> list[object]:
    return [pytest.param(line, code, id=f"README.md:{line}") for line, code in blocks()]


def test_readme_has_its_examples_and_few_fragments() -> None:
    found = blocks()
    assert len(found) >= 6, [line for line, _ in found]  # the fence pattern still finds them
    fragments = [line for line, code in found if code.startswith(FRAGMENT)]
    assert len(fragments) <= MAX_FRAGMENTS, f"fragments at lines {fragments}: make them run"


@pytest.mark.parametrize(("line", "code"), cases())
def test_a_readme_example_runs_as_pasted(line: int, code: str, tmp_path: Path) -> None:
    if code.startswith(FRAGMENT):
        reason = code.splitlines()[0].removeprefix(FRAGMENT).strip()
        assert reason, f"README.md:{line}: a fragment says why it is one"
        compile(code, f"README.md:{line}", "exec")
        return
    if MAIN.search(code):  # defined and never called, it would "run" without doing anything
        assert "asyncio.run(main())" in code, f"README.md:{line}: main() is never run"
    script = tmp_path / "example.py"
    script.write_text(code)
    # The reader's environment, without yoke's settings: the default store is a SQLite file in
    # the directory the example runs in.
    env = {k: v for k, v in os.environ.items() if not k.startswith("YOKE_")}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=SECONDS,
    )
    assert done.returncode == 0, f"README.md:{line}\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, f"README.md:{line}\n{done.stderr}"
