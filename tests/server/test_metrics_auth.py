"""Metrics on a registry per app, bounded per-session cardinality, Jain's index; token files,
constant-time lookup, local admin, and the loopback rule of `yoke serve`."""

from __future__ import annotations

from pathlib import Path

import pytest

import yoke
from tests.server.conftest import Serve
from yoke.errors import BadValue
from yoke.executions import Limits
from yoke.server import LOCAL_ADMIN, Server, TokenBook
from yoke.server.introspect import jain
from yoke.server.metrics import TOP_SESSIONS
from yoke.server.serve import check_bind, is_loopback, load_app


def _sample(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or (
            line.startswith(name + "{") and line.split(" ")[0] == name
        ):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in metrics")


async def test_metrics_count_outcomes_and_read_the_scheduler(serve: Serve) -> None:
    _, client = await serve(Limits(max_running=1, max_queued=1))
    c = client("acme")
    await c.post("/v1/starts", json={"workflow": "hold"})
    await c.post("/v1/starts", json={"workflow": "echo"})
    await c.post("/v1/starts", json={"workflow": "echo"})  # 429: past max_queued
    await c.post("/v1/starts", json={"workflow": "nope"})
    text = (await client("scraper").get("/metrics")).text
    assert _sample(text, 'yoke_starts_total{outcome="granted"}') == 1
    assert _sample(text, 'yoke_starts_total{outcome="queued"}') == 1
    assert _sample(text, 'yoke_starts_total{outcome="rejected"}') == 1
    assert _sample(text, 'yoke_starts_total{outcome="invalid"}') == 1
    assert _sample(text, "yoke_executions_running") == 1
    assert _sample(text, "yoke_starts_queued") == 1
    assert _sample(text, 'yoke_session_queued{session="acme"}') == 1
    assert _sample(text, "yoke_start_wait_seconds_count") == 1
    assert _sample(text, "yoke_fairness_jain") == 1.0


async def test_the_wait_of_a_queued_start_is_timed_when_it_is_granted(serve: Serve) -> None:
    _, client = await serve(Limits(max_running=1))
    c = client("acme")
    held = (await c.post("/v1/starts", json={"workflow": "hold"})).json()
    queued = await c.post("/v1/starts", json={"workflow": "echo"})
    assert queued.status_code == 202
    text = (await client("scraper").get("/metrics")).text
    assert _sample(text, "yoke_start_wait_seconds_count") == 1  # the granted one only
    await c.post(f"/v1/executions/{held['execution_id']}/cancel")  # frees the slot
    got = await c.get(f"/v1/starts/{queued.json()['start_id']}?wait=10")
    assert got.json()["status"] == "GRANTED"
    text = (await client("scraper").get("/metrics")).text
    assert _sample(text, "yoke_start_wait_seconds_count") == 2


async def test_two_servers_in_one_process_count_apart(serve: Serve) -> None:
    _, one = await serve()
    await one("acme").post("/v1/starts", json={"workflow": "echo"})
    other = Server(yoke.App("sqlite:///:memory:"), tokens=None)
    assert b'yoke_starts_total{outcome="granted"} 0.0' in other.state.metrics.render()


async def test_per_session_depth_keeps_its_cardinality_bounded(serve: Serve) -> None:
    _, client = await serve(Limits(max_running=0))
    c = client("operator")
    for i in range(TOP_SESSIONS + 5):
        await c.post("/v1/starts", json={"workflow": "echo", "session": f"s{i:03d}"})
    text = (await c.get("/metrics")).text
    series = [ln for ln in text.splitlines() if ln.startswith("yoke_session_queued{")]
    assert len(series) == TOP_SESSIONS + 1
    assert _sample(text, 'yoke_session_queued{session="_other"}') == 5


def test_jain_index() -> None:
    assert jain([]) == 1.0 and jain([0, 0]) == 1.0
    assert jain([3, 3, 3]) == 1.0
    assert jain([4, 0, 0, 0]) == pytest.approx(0.25)
    assert jain([2, 1]) == pytest.approx(0.9)


def test_tokens_file_plain_and_hashed(tmp_path: Path) -> None:
    import hashlib

    path = tmp_path / "t.toml"
    digest = hashlib.sha256(b"hidden").hexdigest()
    path.write_text(f'''
[[tokens]]
token = "s3cr3t-acme"
principal = "acme-ci"
tenant = "acme"
roles = []

[[tokens]]
token_sha256 = "{digest}"
principal = "boss"
roles = ["ADMIN", "OPERATOR"]
''')
    book = TokenBook.from_file(path)
    assert len(book) == 2 and repr(book) == "TokenBook(2 tokens)"
    acme = book.lookup("s3cr3t-acme")
    assert acme is not None and acme.tenant == "acme" and not acme.roles
    boss = book.lookup("hidden")
    assert boss is not None and boss.has_any("ADMIN")
    assert book.lookup("s3cr3t-acm") is None and book.lookup("") is None


@pytest.mark.parametrize(
    "text",
    [
        "[[tokens]]\nprincipal = 'x'\n",
        "[[tokens]]\ntoken = 't'\n",
        "[[tokens]]\ntoken = 't'\nprincipal = 'x'\nroles = ['ROOT']\n",
        "[[tokens]]\ntoken = 't'\ntoken_sha256 = 'ab'\nprincipal = 'x'\n",
        "[[tokens]]\ntoken_sha256 = 'zz'\nprincipal = 'x'\n",
        "[[tokens]]\ntoken = 't'\nprincipal = 'x'\ntenant = 'a/b'\n",
        "tokens = 3\n",
        "not toml [",
    ],
)
def test_a_bad_tokens_file_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "t.toml"
    path.write_text(text)
    with pytest.raises(BadValue):
        TokenBook.from_file(path)
    with pytest.raises(BadValue):
        TokenBook.from_file(tmp_path / "missing.toml")


async def test_without_tokens_every_caller_is_the_local_admin(serve: Serve) -> None:
    _, client = await serve(tokens=False)
    r = await client("anyone").put("/v1/limits", json={"max_running": 4})
    assert r.status_code == 200
    audit = (await client("anyone").get("/v1/audit")).json()["items"]
    assert audit[0]["principal"] == LOCAL_ADMIN.name


def test_serve_binds_loopback_only_without_tokens(tmp_path: Path) -> None:
    app = yoke.App("sqlite:///:memory:")
    local = Server(app, tokens=None)
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        assert is_loopback(host)
        check_bind(host, local)
    for host in ("0.0.0.0", "::", "10.0.0.1", "example.org"):
        assert not is_loopback(host)
        with pytest.raises(BadValue, match="refusing to listen"):
            check_bind(host, local)
    check_bind("0.0.0.0", Server(app, tokens=TokenBook([])))


def test_from_env_reads_tokens_and_retention(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text("[[tokens]]\ntoken = 't'\nprincipal = 'x'\n")
    app = yoke.App("sqlite:///:memory:")
    s = Server.from_env(app, {"YOKE_TOKENS_FILE": str(path), "YOKE_IDEMPOTENCY_RETENTION": "5"})
    assert s.state.tokens is not None and s.state.replayer.retention == 5.0
    assert Server.from_env(app, {}).state.replayer.retention == 24 * 3600
    with pytest.raises(BadValue):
        Server.from_env(app, {"YOKE_IDEMPOTENCY_RETENTION": "a day"})
    with pytest.raises(BadValue):
        Server(app, tokens=None, retention=0)


def test_load_app_names_what_is_wrong() -> None:
    assert isinstance(load_app("examples.shop:app"), yoke.App)
    for spec in (
        "examples.shop",
        "no.such.module:app",
        "examples.shop:nothing",
        "examples.shop:checkout",
    ):
        with pytest.raises(BadValue):
            load_app(spec)
