"""The text a store keeps: one rule that every part checks before a value reaches a database.

A value either store would refuse (PostgreSQL: NUL, text that is not valid UTF-8) must be
refused as bad input where it enters yoke, before it reaches a batch whose other rows it would
fail with it; SQLite would store it and fail on reading it back.
"""

from __future__ import annotations

from yoke.errors import BadValue

# Names that travel in URLs and key indexes (tenants, streams, instance ids, groups): the API
# addresses them, and PostgreSQL refuses an index row over ~2.7 kB.
MAX_TEXT = 256


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


def check_text(value: str, what: str, *, empty: bool = False) -> str:
    """`value` if it is 1 (or, with `empty`, 0) to `MAX_TEXT` characters a store keeps;
    else `BadValue` naming `what`."""
    if len(value) > MAX_TEXT or (not value and not empty):
        raise BadValue(f"{what} must be {0 if empty else 1} to {MAX_TEXT} characters")
    reason = unstorable(value)
    if reason is not None:
        raise BadValue(f"{what} {reason}")
    return value
