"""A command that cannot start says why in one line on stderr and exits 2 (what the operator
must change: a URL, a database name, the app) or 3 (the database cannot be reached or refuses
the credentials), with no traceback unless `--debug`. Real `yoke` processes against the test
PostgreSQL (a database that does not exist, a role that does not exist: its trust auth takes
any password, not an unknown role) and an unused port on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.server.e2e import ROOT, free_port


def yoke(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("YOKE_DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "yoke", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
        env=env,
    )


def one_line(done: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    """The process exited `code` with one line on stderr holding every needle, and nothing on
    stdout; the line is returned."""
    assert done.returncode == code, (done.returncode, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    (line,) = lines
    assert line.startswith("error: ")
    for needle in needles:
        assert needle in line, line
    return line


def on(server: str, *, user: str | None = None, database: str | None = None) -> str:
    parts = urlsplit(server)
    netloc = parts.netloc if user is None else f"{user}@{parts.hostname}:{parts.port or 5432}"
    return urlunsplit(parts._replace(netloc=netloc, path=f"/{database or parts.path[1:]}"))


def serve(url: str, *more: str) -> subprocess.CompletedProcess[str]:
    return yoke(*more, "serve", "--app", "examples.shop:app", "--port", "0", "--database-url", url)


@pytest.mark.postgres
def test_a_database_that_does_not_exist(pg_server: str) -> None:
    url = on(pg_server, database="yoke_no_such_database")
    one_line(serve(url), 2, 'database "yoke_no_such_database" does not exist')


@pytest.mark.postgres
def test_refused_authentication(pg_server: str) -> None:
    url = on(pg_server, user="yoke_no_such_role")
    line = one_line(serve(url), 3, "refused authentication", '"yoke_no_such_role"')
    assert "does not exist" in line


def test_an_unreachable_host_and_port() -> None:
    port = free_port()  # nothing listens there
    url = f"postgresql://postgres@127.0.0.1:{port}/yoke"
    one_line(serve(url), 3, f"cannot reach PostgreSQL at 127.0.0.1:{port}/yoke", "refused")


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("mysql://db/yoke", "unsupported database URL"),
        ("postgresql://postgres@127.0.0.1:port/yoke", "not valid"),
        ("postgresql://postgres@[::1/yoke", "not valid"),
    ],
)
def test_a_bad_url(url: str, needle: str) -> None:
    one_line(serve(url), 2, needle)


def test_an_app_that_does_not_import(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("import yoke\nraise RuntimeError('the app is broken')\n")
    db = f"sqlite:///{tmp_path}/x.db"
    args = ("serve", "--app", "broken:app", "--port", "0", "--database-url", db)
    one_line(yoke(*args, cwd=tmp_path), 2, "cannot import 'broken'", "the app is broken")
    one_line(yoke("serve", "--app", "no_such_module:app"), 2, "No module named")
    # --debug shows where it failed.
    debugged = yoke("--debug", *args, cwd=tmp_path)
    assert debugged.returncode == 2
    assert "Traceback" in debugged.stderr and "broken.py" in debugged.stderr


def test_the_worker_and_db_upgrade_say_so_too(tmp_path: Path) -> None:
    port = free_port()
    url = f"postgresql://postgres@127.0.0.1:{port}/yoke"
    one_line(yoke("db", "upgrade", "--database-url", url), 3, "cannot reach PostgreSQL")
    worker = yoke("worker", "--app", "examples.shop:app", "--database-url", url)
    one_line(worker, 3, "cannot reach PostgreSQL")
    one_line(yoke("db", "upgrade", "--database-url", "mysql://db/yoke"), 2, "unsupported")
