"""Write the sync `Client` (sync.py) from the async one (aio.py):
`python src/yoke/client/unasync.py` (run by path: the package imports what it writes).

The two clients are one source: the sync one is the async one with `async`/`await` taken out
and the async names replaced by their sync twins (httpx has both), so no method is written
twice by hand. `tests/client/test_generated.py` fails when sync.py differs from what this
writes.
This module must never be imported by the clients.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "aio.py"
TARGET = HERE / "sync.py"
HEADER = '''"""`Client`: the v1 API of a yoke server, as methods that return yoke's values and
raise yoke's errors; the sync twin of `AsyncClient` (aio.py), which documents both.

GENERATED from aio.py by `python src/yoke/client/unasync.py`: do not edit.
"""
'''
# Whole words, in this order.
SUBSTITUTIONS = (
    (r"import asyncio\n", ""),
    (r"async def ", "def "),
    (r"async with ", "with "),
    (r"await ", ""),
    (r"\bAsyncBaseTransport\b", "BaseTransport"),
    (r"\bAsyncClient\b", "Client"),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\baclose\b", "close"),
    (r"\basyncio\.sleep\b", "time.sleep"),
)


def generate(source: str) -> str:
    docstring = re.match(r'"""(.|\n)*?"""\n', source)
    assert docstring is not None, "aio.py must open with its docstring"
    text = source[docstring.end() :]
    for pattern, replacement in SUBSTITUTIONS:
        text = re.sub(pattern, replacement, text)
    return HEADER + text


def main() -> int:
    TARGET.write_text(generate(SOURCE.read_text()))
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
