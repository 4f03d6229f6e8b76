"""The text a store keeps: one rule that every part checks before a value reaches a database.

A value either store would refuse (PostgreSQL: NUL, text that is not valid UTF-8) must be
refused as bad input where it enters yoke, before it reaches a batch whose other rows it would
fail with it; SQLite would store it and fail on reading it back.
"""

from __future__ import annotations


def unstorable(value: str) -> str | None:
    """Why no database would store `value` (NUL, lone surrogates), or None if it can."""
    if "\x00" in value:
        return "must not contain NUL characters"
    if not value.isascii():  # ASCII text encodes as is: the common case skips the encoding
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "must be valid Unicode text"
    return None
