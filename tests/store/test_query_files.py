"""The query files: one shared file for what both backends run as written, and each backend's
own file only for the queries whose text must differ (yoke/store/sqlfiles.py)."""

from __future__ import annotations

import re

from yoke.store import sqlfiles


def _as_sqlite(sql: str) -> str:
    """A query in SQLite's parameter style, whitespace folded: what both dialects compare on."""
    sql = re.sub(r"%\((\w+)\)s", r":\1", sql).replace("%%", "%")
    return " ".join(sql.split())


def test_a_query_both_backends_run_as_written_is_in_the_shared_file_only() -> None:
    sqlite, postgres = sqlfiles.own_queries("sqlite"), sqlfiles.own_queries("postgres")
    written_twice = sorted(
        name
        for name in sqlite.keys() & postgres.keys()
        if _as_sqlite(sqlite[name]) == _as_sqlite(postgres[name])
    )
    assert written_twice == [], "move these to yoke/store/sql/queries.sql"


def test_no_query_is_both_shared_and_a_backends_own() -> None:
    shared = sqlfiles.shared_queries().keys()
    for dialect in ("sqlite", "postgres"):
        assert not shared & sqlfiles.own_queries(dialect).keys()


def test_each_backend_loads_every_shared_query_in_its_parameter_style() -> None:
    shared = sqlfiles.shared_queries()
    assert len(shared) > 50  # most of the statements are the same in both dialects
    sqlite, postgres = sqlfiles.queries("sqlite"), sqlfiles.queries("postgres")
    for name, sql in shared.items():
        assert sqlite[name] == sql
        assert "%(" not in sqlite[name]
        assert _as_sqlite(postgres[name]) == _as_sqlite(sql)
        assert not re.search(r"(?<![:\w]):[a-z_]", _without_literals(postgres[name])), name


def _without_literals(sql: str) -> str:
    return re.sub(r"'(?:[^']|'')*'", "''", sql)


def test_the_postgres_rewrite_leaves_literals_and_casts_and_escapes_percent() -> None:
    sql = "SELECT 'a:b %' || :name, x::text, y % 2 FROM t WHERE k = :key AND s = 'it''s :no'"
    assert sqlfiles.postgres_params(sql) == (
        "SELECT 'a:b %%' || %(name)s, x::text, y %% 2 FROM t WHERE k = %(key)s AND s = 'it''s :no'"
    )


def test_a_query_is_sent_without_its_comment_lines() -> None:
    for dialect in ("sqlite", "postgres"):
        for name, sql in sqlfiles.queries(dialect).items():
            assert not any(line.lstrip().startswith("--") for line in sql.splitlines()), name
