"""A database that refuses a value, on both backends: a trigger that raises as a CHECK would
(SQLite `RAISE(ABORT)`, PostgreSQL `check_violation`), for tests of what a permanent store error
does (`yoke.errors.TRANSIENT`: anything else is never retried)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg


@dataclass(frozen=True, kw_only=True)
class Refusal:
    name: str  # the trigger's (and on PostgreSQL its function's) name
    table: str
    op: str  # "UPDATE" or "DELETE"
    when: str  # a condition on NEW (or OLD), written alike in both dialects
    message: str

    def sqlite(self) -> str:
        return (
            f"CREATE TRIGGER {self.name} BEFORE {self.op} ON {self.table} WHEN {self.when} "
            f"BEGIN SELECT RAISE(ABORT, '{self.message}'); END"
        )

    def postgres(self) -> str:
        row = "OLD" if self.op == "DELETE" else "NEW"
        return (
            f"CREATE FUNCTION {self.name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF {self.when} THEN RAISE EXCEPTION '{self.message}' "
            f"USING ERRCODE = 'check_violation'; END IF; RETURN {row}; END $$; "
            f"CREATE TRIGGER {self.name} BEFORE {self.op} ON {self.table} "
            f"FOR EACH ROW EXECUTE FUNCTION {self.name}();"
        )


@contextlib.contextmanager
def refusing(url: str, *refusals: Refusal) -> Iterator[None]:
    """The database of `url` (its schema made) refuses what `refusals` say, until the end (a
    PostgreSQL database is shared by the session; a SQLite file is the test's own)."""
    if url.startswith("sqlite:"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            for refusal in refusals:
                conn.execute(refusal.sqlite())
            conn.commit()
        finally:
            conn.close()
        yield
        return
    with psycopg.connect(url, autocommit=True) as pg:
        for refusal in refusals:
            pg.execute(refusal.postgres().encode())
    try:
        yield
    finally:
        with psycopg.connect(url, autocommit=True) as pg:
            for refusal in refusals:
                pg.execute(f"DROP TRIGGER {refusal.name} ON {refusal.table}".encode())
                pg.execute(f"DROP FUNCTION {refusal.name}()".encode())
