"""High availability's settings: `--ha` / `YOKE_HA=1` needs PostgreSQL (SQLite stops at start
with an error naming the URL, before anything listens), the boolean variables read 1/0, and
without `--ha` a server is `solo` (it admits, `/readyz` is 200, no HA metrics)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from yoke.app import App
from yoke.cli import app as cli
from yoke.config import Settings
from yoke.errors import BadValue
from yoke.server.asgi import Server


def test_serve_ha_on_sqlite_stops_at_start_with_a_clear_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/y.db"
    argv = ["serve", "--app", "tests.server.e2e_app:app", "--ha", "--database-url", url]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 2, result.output
    assert "needs PostgreSQL" in result.output
    assert not (tmp_path / "y.db").exists()  # nothing was opened


async def test_an_app_with_ha_on_sqlite_refuses_to_run(tmp_path: Path) -> None:
    app = App(f"sqlite:///{tmp_path}/y.db", settings=Settings(ha=True))
    with pytest.raises(BadValue, match="needs PostgreSQL"):
        async with app.running():
            pass


def test_the_ha_variables_read_one_and_zero() -> None:
    on = Settings.from_env({"YOKE_HA": "1", "YOKE_HA_REQUEUE": "0", "YOKE_HA_LIVENESS_LOCK": "off"})
    assert on.ha and not on.ha_requeue and not on.ha_liveness_lock
    assert not Settings.from_env({}).ha and Settings.from_env({}).ha_requeue
    with pytest.raises(BadValue, match="YOKE_HA"):
        Settings.from_env({"YOKE_HA": "maybe"})
    with pytest.raises(BadValue, match="ha_lease_ttl_secs"):
        Settings(ha_lease_ttl_secs=0)


async def test_without_ha_a_server_is_solo(tmp_path: Path) -> None:
    app = App(f"sqlite:///{tmp_path}/y.db")
    server = Server(app, tokens=None)
    async with (
        server.lifespan(),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=server), base_url="http://127.0.0.1"
        ) as client,
    ):
        body = (await client.get("/v1/ha")).json()
        assert body == {
            "enabled": False,
            "role": "solo",
            "holder": app.instance_id,
            "epoch": None,
            "leader": None,
        }
        assert (await client.get("/readyz")).status_code == 200
        assert "yoke_ha_role" not in (await client.get("/metrics")).text
