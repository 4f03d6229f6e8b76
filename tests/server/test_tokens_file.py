"""A tokens file that says something other than what it means is refused at start, naming the
entry: a token twice (in the clear or as a hash), an unknown key, field or role, a bad
`max_priority`, an unreadable file. `yoke serve` exits with that error instead of serving."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.server.e2e import ROOT
from yoke.errors import BadValue
from yoke.executions import Principal
from yoke.server import TokenBook

ACME = '[[tokens]]\ntoken = "t-acme"\nprincipal = "acme-ci"\ntenant = "acme"\n'


def _refused(tmp_path: Path, text: str | bytes) -> str:
    path = tmp_path / "tokens.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(BadValue) as info:
        TokenBook.from_file(path)
    return str(info.value)


def test_a_token_twice_is_refused_naming_both_entries(tmp_path: Path) -> None:
    twice = ACME + '[[tokens]]\ntoken = "t-acme"\nprincipal = "boss"\nroles = ["ADMIN"]\n'
    message = _refused(tmp_path, twice)
    assert "tokens[1] (boss)" in message and "tokens[0] (acme-ci)" in message
    hashed = hashlib.sha256(b"t-acme").hexdigest()
    message = _refused(tmp_path, ACME + f'[[tokens]]\ntoken_sha256 = "{hashed}"\nprincipal = "b"\n')
    assert "tokens[1] (b)" in message


def test_one_principal_name_in_two_tenants_is_refused(tmp_path: Path) -> None:
    """A principal's name scopes its Idempotency-Keys: shared by two tenants, globex's retry
    of a key acme used would be answered with acme's start (its ids, its session)."""
    other = '[[tokens]]\ntoken = "t-globex"\nprincipal = "acme-ci"\ntenant = "globex"\n'
    message = _refused(tmp_path, ACME + other)
    assert "tokens[1]" in message and "'acme-ci'" in message and "tokens[0]" in message
    boss = '[[tokens]]\ntoken = "t-2"\nprincipal = "acme-ci"\ntenant = "acme"\nroles = ["ADMIN"]\n'
    assert "tokens[1]" in _refused(tmp_path, ACME + boss)
    with pytest.raises(BadValue, match="principal 'x'"):
        TokenBook([("a", Principal("x", tenant="acme")), ("b", Principal("x", tenant="globex"))])


def test_several_tokens_of_one_principal_are_accepted(tmp_path: Path) -> None:
    """A rotation: the old and the new token of one principal, alike in tenant and roles."""
    path = tmp_path / "tokens.toml"
    path.write_text(ACME + ACME.replace("t-acme", "t-acme-new") + "max_priority = 3\n")
    book = TokenBook.from_file(path)
    assert book.lookup("t-acme") == book.lookup("t-acme-new") == Principal("acme-ci", tenant="acme")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (ACME + 'rolse = ["ADMIN"]\n', "tokens[0] (acme-ci) has unknown fields ['rolse']"),
        (ACME + 'roles = ["ROOT"]\n', "unknown roles ['ROOT']"),
        (ACME + 'roles = "ADMIN"\n', "roles must be a list"),
        (ACME + "max_priority = 1.5\n", "max_priority must be an integer"),
        (ACME + "max_priority = true\n", "max_priority must be an integer"),
        (ACME + "max_priority = 99999999999\n", "max_priority must be an integer"),
        ("[settings]\nx = 1\n" + ACME, "unknown keys ['settings']"),
        ('[[token]]\ntoken = "x"\nprincipal = "p"\n', "unknown keys ['token']"),
        ("tokens = 3\n", "[[tokens]] tables"),
        ("[[tokens]\n", "cannot read"),
    ],
)
def test_a_mistake_in_the_file_is_refused_naming_the_entry(
    tmp_path: Path, text: str, named: str
) -> None:
    assert named in _refused(tmp_path, text)


def test_an_unreadable_file_is_refused(tmp_path: Path) -> None:
    assert "cannot read" in _refused(tmp_path, b"\xff\xfe\x00binary")
    with pytest.raises(BadValue, match="cannot read"):
        TokenBook.from_file(tmp_path / "missing.toml")
    with pytest.raises(BadValue, match="cannot read"):
        TokenBook.from_file(tmp_path)  # a directory


def test_max_priority_defaults_by_role(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text(
        ACME
        + '[[tokens]]\ntoken = "t-ops"\nprincipal = "ops"\nroles = ["OPERATOR"]\n'
        + '[[tokens]]\ntoken = "t-m"\nprincipal = "m"\nroles = ["METRICS"]\nmax_priority = 3\n'
    )
    book = TokenBook.from_file(path)
    found = {t: book.entry_for(t) for t in ("t-acme", "t-ops", "t-m")}
    assert {t: e.max_priority for t, e in found.items() if e} == {
        "t-acme": 0,
        "t-ops": None,
        "t-m": 3,
    }


def test_yoke_serve_refuses_to_start_on_a_bad_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text(ACME + ACME.replace("acme-ci", "again"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "yoke",
            "serve",
            "--app",
            "tests.server.e2e_app:app",
            "--port",
            "0",
            "--database-url",
            f"sqlite:///{tmp_path}/x.db",
        ],
        cwd=ROOT,
        env={"YOKE_TOKENS_FILE": str(path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "tokens[1] (again)" in done.stderr
