"""The three settings classes read the environment by one loader (`config.load_env`): the same
parse of a number, the same error naming the variable, a blank variable left to the default."""

from __future__ import annotations

from typing import Any

import pytest

from yoke.actors.executor.settings import ENV as EXECUTOR_ENV
from yoke.actors.executor.settings import ExecutorSettings
from yoke.actors.settings import ENV as ACTOR_ENV
from yoke.actors.settings import ActorSettings
from yoke.config import Settings
from yoke.errors import BadValue

CASES: list[tuple[Any, str, str]] = [
    (Settings, "YOKE_MAX_QUEUED", "max_queued"),
    (ActorSettings, ACTOR_ENV["concurrency"], "concurrency"),
    (ExecutorSettings, EXECUTOR_ENV["warm_spares"], "warm_spares"),
]


@pytest.mark.parametrize(("cls", "var", "name"), CASES, ids=lambda c: getattr(c, "__name__", c))
def test_each_settings_class_reads_its_variables_alike(cls: Any, var: str, name: str) -> None:
    assert getattr(cls.from_env({var: " 7 "}), name) == 7
    assert getattr(cls.from_env({var: "  "}), name) == getattr(cls(), name)  # blank: default
    assert getattr(cls.from_env({var: "7"}, **{name: 3}), name) == 3  # an override wins
    with pytest.raises(BadValue, match=f"^{var} must be an integer, got 'many'$"):
        cls.from_env({var: "many"})
