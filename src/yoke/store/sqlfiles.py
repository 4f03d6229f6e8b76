"""Loads the SQL that ships with yoke: named queries and numbered migrations, per backend.

Layout: `yoke/store/sql/queries.sql` holds the `-- name: <query>` blocks that both backends run
as written, with `:name` parameters (rewritten to psycopg's `%(name)s` when PostgreSQL's are
loaded); `yoke/store/sql/<dialect>/queries.sql` holds the queries whose text must differ, in
that dialect's own parameter style. A name is in one place only: the shared file or the
dialect files. `<dialect>/NNNN_<what>.sql` are the migrations, applied in order; `schema.sql`
is the whole current schema for a fresh install (a test checks it equals all migrations applied
in order). This module only reads package data; it must never connect to a database.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
_MIGRATION = re.compile(r"^(\d{4})_(\w+)\.sql$")


@dataclass(frozen=True, kw_only=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def _dir(dialect: str) -> resources.abc.Traversable:
    return resources.files("yoke.store").joinpath("sql", dialect)


def _named(text: str, where: str) -> dict[str, str]:
    """The `-- name:` blocks of one file, without their comment lines and their lines'
    indentation (both are for the reader; a statement sent without them is the same statement,
    and psycopg converts a statement's parameters once and keeps it only up to 4,096
    characters: a longer one is parsed again at every execution)."""
    parts = _NAME.split(text)
    # parts = [preamble, name1, body1, name2, body2, ...]
    out: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in out:
            raise RuntimeError(f"query {name!r} is defined twice in {where}")
        lines = (ln.strip() for ln in body.splitlines())
        sql = "\n".join(ln for ln in lines if not ln.startswith("--"))
        out[name] = sql.strip().rstrip(";").strip()
    return out


# In a shared query: a string literal (no parameter inside), a `::` cast (kept), a `:name`
# parameter, or a `%`. psycopg reads every `%` as the start of a parameter, in a literal too.
_SHARED_TOKEN = re.compile(r"'(?:[^']|'')*'|::|:(\w+)|%")


def postgres_params(sql: str) -> str:
    """A shared query in psycopg's parameter style: `:name` becomes `%(name)s`, a `%` `%%`."""

    def token(m: re.Match[str]) -> str:
        if m.group(1) is not None:
            return f"%({m.group(1)})s"
        return m.group(0).replace("%", "%%")  # a literal, a cast or a lone `%`

    return _SHARED_TOKEN.sub(token, sql)


def shared_queries() -> dict[str, str]:
    """The queries both backends run as written, in SQLite's `:name` parameter style."""
    text = resources.files("yoke.store").joinpath("sql", "queries.sql").read_text("utf-8")
    return _named(text, "sql/queries.sql")


def own_queries(dialect: str) -> dict[str, str]:
    """The queries whose text is this dialect's own, in its parameter style."""
    text = _dir(dialect).joinpath("queries.sql").read_text(encoding="utf-8")
    return _named(text, f"sql/{dialect}/queries.sql")


@functools.cache
def queries(dialect: str) -> dict[str, str]:
    """Every named query of a backend, by name, ready for its driver."""
    shared, own = shared_queries(), own_queries(dialect)
    both = sorted(shared.keys() & own.keys())
    if both:
        raise RuntimeError(f"queries in sql/queries.sql and sql/{dialect}/queries.sql: {both}")
    if dialect == "postgres":
        shared = {name: postgres_params(sql) for name, sql in shared.items()}
    return shared | own


@functools.cache
def migrations(dialect: str) -> tuple[Migration, ...]:
    found: list[Migration] = []
    for entry in _dir(dialect).iterdir():
        m = _MIGRATION.match(entry.name)
        if m:
            found.append(
                Migration(
                    version=int(m.group(1)), name=m.group(2), sql=entry.read_text(encoding="utf-8")
                )
            )
    found.sort(key=lambda mig: mig.version)
    versions = [mig.version for mig in found]
    # Numbers are handed out ahead to work that lands in any order, so a branch may lack a
    # number below its own; each number is applied once, by number, whatever the order.
    if len(set(versions)) != len(versions) or (versions and versions[0] != 1):
        raise RuntimeError(f"migrations of {dialect} must be numbered from 1, each number once")
    return tuple(found)


def latest(dialect: str) -> int:
    """The version a fully migrated database reports: the highest migration number."""
    return migrations(dialect)[-1].version


def fresh_schema(dialect: str) -> str:
    return _dir(dialect).joinpath("schema.sql").read_text(encoding="utf-8")


def split_statements(sql: str) -> list[str]:
    """Split a migration on `;` at line ends, except inside a `$$`-quoted function body (the
    only place our migrations put a `;` inside a statement)."""
    lines = [ln for ln in sql.splitlines() if not ln.lstrip().startswith("--")]
    out: list[str] = []
    current = ""
    for i, chunk in enumerate("\n".join(lines).split("$$")):
        if i % 2:  # a quoted body: kept whole
            current += "$$" + chunk + "$$"
            continue
        parts = re.split(r";[ \t]*(?:\n|$)", chunk)
        current += parts[0]
        for part in parts[1:]:
            out.append(current)
            current = part
    out.append(current)
    return [p.strip() for p in out if p.strip()]
