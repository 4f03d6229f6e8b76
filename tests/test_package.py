"""The public surface: `import yoke` is light, and every lazily exported name resolves."""

from __future__ import annotations

import subprocess
import sys

import yoke


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
