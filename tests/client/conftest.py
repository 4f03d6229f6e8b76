"""Fixtures of the client tests: a real `yoke serve` of `client_app` on 127.0.0.1 with the
server tests' tokens (admin, operator, the tenants acme and globex, a scraper), one per module
and backend (SQLite, PostgreSQL), and clients of it by who holds the token."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.server.conftest import TOKENS, TOKENS_TOML
from tests.server.e2e import yoke_serve
from yoke.client import Client

APP = "tests.client.client_app:app"


def tokens_file(tmp: Path) -> Path:
    path = tmp / "tokens.toml"
    path.write_text(TOKENS_TOML)
    return path


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The base URL of a `yoke serve` with tokens, on each backend."""
    tmp = tmp_path_factory.mktemp("client")
    if request.param == "sqlite":
        url = f"sqlite:///{tmp}/client.db"
    else:
        url = request.getfixturevalue("pg_databases")()
    env = {"YOKE_TOKENS_FILE": str(tokens_file(tmp))}
    with yoke_serve(url, tmp, app=APP, env=env) as running:
        yield running.url


@pytest.fixture
def client(server: str) -> Iterator[Callable[[str], Client]]:
    """`client("acme")`: a `Client` with that token (closed at the end)."""
    made: list[Client] = []

    def make(who: str) -> Client:
        c = Client(server, TOKENS[who][0])
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
