"""Settings from YOKE_* variables: parsed into typed fields, bad values named."""

from __future__ import annotations

import pytest

from yoke.app import App, open_store
from yoke.config import DEFAULT_DATABASE_URL, Settings
from yoke.errors import BadType, BadValue
from yoke.executions import Limits


def test_defaults_and_env() -> None:
    assert Settings.from_env({}).database_url == DEFAULT_DATABASE_URL
    assert Settings.from_env({}).execution_shutdown_timeout == 30.0
    s = Settings.from_env(
        {
            "YOKE_DATABASE_URL": "postgresql://x/y",
            "YOKE_EXECUTION_SHUTDOWN_TIMEOUT": "2.5",
            "YOKE_MAX_RUNNING": "4",
            "YOKE_MAX_QUEUED": "off",
            "YOKE_ON_LIMIT": "reject",
            "YOKE_INSTANCE_ID": "web-1",
        }
    )
    assert (s.database_url, s.execution_shutdown_timeout, s.max_running, s.max_queued) == (
        "postgresql://x/y",
        2.5,
        4,
        None,
    )
    assert s.on_limit == "reject" and s.instance_id == "web-1"
    app = App(settings=s)
    assert app.configured_limits == Limits(max_running=4, on_limit="reject")


@pytest.mark.parametrize(
    ("env", "error", "match"),
    [
        ({"YOKE_EXECUTION_SHUTDOWN_TIMEOUT": "soon"}, BadValue, "YOKE_EXECUTION_SHUTDOWN_TIMEOUT"),
        ({"YOKE_MAX_RUNNING": "many"}, BadValue, "YOKE_MAX_RUNNING"),
        ({"YOKE_MAX_RUNNING": "-1"}, BadValue, "max_running"),
        ({"YOKE_ON_LIMIT": "drop"}, BadValue, "on_limit"),
        ({"YOKE_HEARTBEAT_INTERVAL": "-2"}, BadValue, "heartbeat_interval"),
        ({"YOKE_PG_POOL_MAX": "0"}, BadValue, "pg_pool_max"),
    ],
)
def test_bad_values_are_named(env: dict[str, str], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        Settings.from_env(env)


def test_wrong_types_and_urls() -> None:
    with pytest.raises(BadType):
        Settings(max_running="3")  # type: ignore[arg-type]
    with pytest.raises(BadValue, match="unsupported database URL"):
        open_store("mysql://nope")
    assert App("sqlite:///x.db", settings=Settings()).settings.database_url == "sqlite:///x.db"
