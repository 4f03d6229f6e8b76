"""No secret in reach: no yoke process shows the database URL on its command line (given by
`--database-url`, the title is masked at once; `--database-url-file` keeps it off), and a
tenant's executor, scanning every /proc entry it can read, finds it nowhere. A real `yoke
worker` process, its executors in namespaces."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.actors import hostile_app
from tests.actors.conftest import open_actor_store
from tests.actors.executors import descendants, require_bwrap, runtime, state, until
from yoke.actors.protocol import ActorStore

ROOT = Path(__file__).resolve().parents[2]
# In namespaces; quick to find the instances the test's appender leaves to no one.
FAST_WORKER = {
    "YOKE_EXECUTOR_NAMESPACES": "on",
    "YOKE_WORKER_HEARTBEAT_SECS": "0.2",
    "YOKE_NOTIFY_POLL_BACKUP_SECS": "0.2",
}


def cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


@asynccontextmanager
async def yoke_worker(
    url: str, *flags: str, env: dict[str, str] | None = None
) -> AsyncIterator[tuple[asyncio.subprocess.Process, ActorStore]]:
    """`yoke worker --executors process` on the hostile app, started and READY to take events
    (its warm spare booted); the store it uses, open here too."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "yoke", "worker", "--app", hostile_app.SPEC,
        "--executors", "process", *flags,
        cwd=ROOT, env={**os.environ, **FAST_WORKER, **(env or {})},
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    backend = open_actor_store(url)
    try:
        await until(lambda: Path(url.removeprefix("sqlite:///")).exists(), seconds=60)
        await backend.open()
        store = backend.actors

        async def spare() -> bool:
            return any(
                r.state == "SPARE"
                for r in await store.executors.list_executors(tenant=None, limit=5)
            )

        await until(spare, seconds=60)
        yield proc, store
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 60)
        await backend.close()


@pytest.fixture
def secret_url(tmp_path: Path) -> str:
    """A store's URL with a secret part, also written to `tmp_path / "url"`."""
    tmp_path.chmod(0o755)  # the store's directory; the URL is the secret here
    url = f"sqlite:///{tmp_path}/secret-{secrets.token_hex(8)}.db"
    (tmp_path / "url").write_text(url + "\n")
    return url


@pytest.mark.parametrize("given", ["flag", "file", "environment"])
async def test_no_process_shows_the_database_url_and_no_executor_finds_it(
    tmp_path: Path, secret_url: str, given: str
) -> None:
    require_bwrap()
    url = secret_url
    needle = url.removeprefix("sqlite:///")
    flags: list[str] = []
    env: dict[str, str] = {}
    if given == "flag":
        flags = ["--database-url", url]
    elif given == "file":
        flags = ["--database-url-file", str(tmp_path / "url")]
    else:
        env = {"YOKE_DATABASE_URL": url}
    async with yoke_worker(url, *flags, env=env) as (proc, store):
        title = cmdline(proc.pid)
        assert needle.encode() not in title
        if given == "flag":
            assert b"--database-url\0***" in title or b"--database-url ***" in title
        for pid in descendants(proc.pid):  # bubblewrap, the executors
            assert needle.encode() not in cmdline(pid), pid
        appender = runtime("appender", app_spec=hostile_app.SPEC, registry=hostile_app.registry)
        appender.attach(store)
        await appender.append("scan", {"k": "a", "needle": needle}, tenant="acme")

        async def scanned() -> bool:
            return "found" in await state(store, "acme", "scan", "a")

        await until(scanned, seconds=60)
        seen = await state(store, "acme", "scan", "a")
    assert proc.returncode == 0
    assert seen["found"] == [] and seen["readable"] > 0  # it read its own /proc, no more
