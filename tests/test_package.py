"""The public surface: `import yoke` is light, and every lazily exported name resolves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yoke

ROOT = Path(__file__).resolve().parents[1]


def test_import_yoke_does_not_load_the_durable_parts() -> None:
    code = (
        "import sys, yoke, yoke.fair\n"
        "heavy = [m for m in ('yoke.app', 'yoke.store', 'psycopg') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_every_exported_name_resolves() -> None:
    for name in yoke.__all__:
        assert getattr(yoke, name) is not None, name
    assert set(yoke._LAZY) <= set(yoke.__all__)


def test_the_seeds_scheduler_names_and_their_legacy_aliases() -> None:
    assert yoke.ActorScheduler is yoke.QueueDrainScheduler
    assert yoke.TenantSchedulerService is yoke.RuntimeLifecycleService
    assert yoke.RuntimeLifecycleService.__name__ == "RuntimeLifecycleService"


def test_defining_an_app_loads_none_of_the_engines() -> None:
    """`import yoke`, `yoke.App()` and its decorators hold definitions only: the engines (store
    backends, drivers, admission, the drain, the server) load when the app runs, not in an
    executor process that imports the app to find its actors."""
    code = (
        "import sys\n"
        "from tests.actors import user_app\n"
        "assert user_app.app.actor_registry.names() == ['report'], user_app.app.actor_registry\n"
        "assert len(user_app.app.portal_registry) == 1\n"
        "assert user_app.app.registry.names() == ['greet']\n"
        "print(','.join(user_app.loaded_engines()))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert done.stdout.strip() == ""
    # The engines, built on first use, run the same definitions.
    from tests.actors import user_app

    assert user_app.app.actors.registry is user_app.app.actor_registry
    assert user_app.app.actors.portals is user_app.app.portal_registry
