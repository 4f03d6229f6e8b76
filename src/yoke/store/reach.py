"""Whether PostgreSQL can be reached at a URL, and if not, why, in one line.

A command that is about to serve (`yoke serve`, `yoke worker`, `yoke db upgrade`) makes one
connection and closes it. The store's pool would not say why it cannot connect: it retries a
failed connection in the background until its timeout, then reports only that it timed out.
libpq's message names the cause; it is sorted here into the error a command answers with:
`BadValue` for what the operator must change (a URL that does not parse, a database that does
not exist), `StoreUnavailable` for a server that does not answer or refuses the credentials.
libpq reports a failed connection without an SQLSTATE, so the sorting reads its messages (in
English, as libpq and a server with the default `lc_messages` write them); a message of no
known kind is a `StoreUnavailable` that quotes it.

This module must never keep a connection open.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import psycopg

from yoke.errors import BadValue, StoreUnavailable, YokeError

AUTH_REFUSED = (
    "password authentication failed",
    "no pg_hba.conf entry",
    "authentication failed",
    "password is required",
    "no password supplied",
)


async def reach_postgres(url: str, *, timeout: float) -> None:
    """Connect to `url` once and close; the failure as one named error (see the module)."""
    where = place(url)
    try:
        conn = await psycopg.AsyncConnection.connect(url, connect_timeout=max(1, round(timeout)))
    except psycopg.ProgrammingError as exc:  # the URL itself does not parse
        raise BadValue(f"the database URL is not valid: {one_line(str(exc))}") from exc
    except psycopg.OperationalError as exc:
        raise connect_failure(where, str(exc)) from exc
    await conn.close()


def connect_failure(where: str, message: str) -> YokeError:
    """The error a failed connection to `where` stands for, from libpq's `message`."""
    text = one_line(message)
    cause = text.rsplit(" failed: ", 1)[-1].removeprefix("FATAL:").strip()
    lowered = cause.lower()
    if lowered.startswith("database ") and lowered.endswith("does not exist"):
        return BadValue(f"PostgreSQL at {where}: {cause} (create it, or correct the URL)")
    if (lowered.startswith("role ") and lowered.endswith("does not exist")) or any(
        s in lowered for s in AUTH_REFUSED
    ):
        return StoreUnavailable(f"PostgreSQL at {where} refused authentication: {cause}")
    if "connection option" in lowered or "invalid uri" in lowered:
        return BadValue(f"the database URL is not valid: {cause}")
    return StoreUnavailable(f"cannot reach PostgreSQL at {where}: {cause}")


def place(url: str) -> str:
    """`host:port/database` of a URL, without its user or password, for a message."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "localhost"
        port = parts.port or 5432
    except ValueError:
        return "the URL given"
    return f"{host}:{port}{parts.path or ''}"


def one_line(text: str) -> str:
    """libpq's lines (a cause, then a hint) as one line."""
    return "; ".join(" ".join(line.split()) for line in text.splitlines() if line.strip())
