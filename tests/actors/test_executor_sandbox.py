"""A hostile tenant's `process()` against its sandbox, with and without the namespace tier
(`hostile_app.py`): nothing it starts outlives its executor on any exit path, `setsid` or
not; the database is out of its reach in namespaces; killing its parent does nothing to the
worker; its text cannot forge a line of the worker's log; a value no store can hold fails its
call, not its instance. Real processes, a real SQLite store; the worker runs as root here, so
`without namespaces` is weak isolation, accepted on purpose."""

from __future__ import annotations

import io
import logging
import os
import re
import secrets
import socket
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.actors import hostile_app
from tests.actors.executors import alive, require_bwrap, running, state, until
from yoke.actors import ActorRuntime
from yoke.actors.definitions import MAX_DATA_BYTES
from yoke.actors.protocol import ActorStore
from yoke.server.logs import make_handler

TIERS: dict[str, dict[str, Any]] = {
    "namespaces": {"namespaces": "on"},
    "no-namespaces": {"namespaces": "off", "allow_weak_isolation": 1},
}


@pytest.fixture(params=list(TIERS))
def tier(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "namespaces":
        require_bwrap()
    return TIERS[request.param]


def hostile(
    url: str, **settings: Any
) -> AbstractAsyncContextManager[tuple[ActorRuntime, ActorStore]]:
    return running(url, app_spec=hostile_app.SPEC, registry=hostile_app.registry, **settings)


def marked(marker: str) -> list[int]:
    """Live processes whose command line holds `marker` (the children `spawn` started)."""
    needle = f"600.{marker}".encode()
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if needle in f.read() and alive(int(pid)):
                        out.append(int(pid))
            except OSError:
                continue
    return out


@pytest.mark.parametrize("path", ["crash", "idle", "dispatch-timeout", "worker-stop"])
async def test_nothing_an_executor_started_outlives_it(
    tmp_path: Path, tier: dict[str, Any], path: str
) -> None:
    """Three children (plain, `setsid`, a daemon), each ignoring SIGTERM and SIGHUP, run while
    their executor does and are gone once it ended, however it ended."""
    marker = str(secrets.randbelow(10**9))
    settings = {**tier, "idle_secs": 2.0 if path == "idle" else 60.0, "dispatch_timeout": 1.5}
    url = f"sqlite:///{tmp_path}/yoke.db"
    try:
        async with hostile(url, **settings) as (rt, _store):
            await rt.append("spawn", {"k": "a", "marker": marker}, tenant="acme")
            await until(lambda: len(marked(marker)) == 3)  # all three run, and outlive the call
            pool = rt.pool
            assert pool is not None
            ex = pool.executor("acme")
            assert ex is not None and ex.pid is not None and ex.state.value == "READY"
            if path == "crash":
                await rt.append("spawn", {"k": "a", "then": "exit"}, tenant="acme")
                await until(lambda: ex.state.value == "FAILED")
                assert (ex.stop_reason or "").startswith("crash: exit code 3"), ex.stop_reason
            elif path == "dispatch-timeout":
                await rt.append("spawn", {"k": "a", "then": "sleep"}, tenant="acme")
                await until(lambda: ex.state.value == "FAILED")
                assert (ex.stop_reason or "").startswith("dispatch_timeout")
            elif path == "idle":
                await until(lambda: ex.state.value == "STOPPED", seconds=20)
                assert ex.stop_reason == "idle"
            if path != "worker-stop":
                await until(lambda: not marked(marker), seconds=5)
                assert not alive(ex.pid)
        await until(lambda: not marked(marker), seconds=5)
    finally:
        for pid in marked(marker):  # never leave one behind for the next test
            os.kill(pid, 9)


@pytest.fixture
def listeners() -> Iterator[tuple[int, str]]:
    """A TCP port on the loopback and a unix socket in /run, both listening here."""
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    path = f"/run/yoke-test-{secrets.token_hex(4)}.sock"
    unix = socket.socket(socket.AF_UNIX)
    try:
        unix.bind(path)
    except OSError as exc:
        tcp.close()
        pytest.skip(f"cannot listen in /run here: {exc}")
    unix.listen()
    try:
        yield tcp.getsockname()[1], path
    finally:
        tcp.close()
        unix.close()
        os.unlink(path)


@pytest.fixture
def postgresql(pg_server: str) -> tuple[int, str]:
    """The test PostgreSQL's port on the loopback and its unix socket in /run."""
    port = urlsplit(pg_server).port or 5432
    path = f"/run/postgresql/.s.PGSQL.{port}"
    if not Path(path).exists():
        pytest.skip(f"PostgreSQL has no unix socket at {path} here")
    return port, path


@pytest.mark.parametrize("target", ["listeners", "postgresql"])
async def test_the_database_is_out_of_reach_in_namespaces(
    tmp_path: Path, tier: dict[str, Any], target: str, request: pytest.FixtureRequest
) -> None:
    """The database's port on 127.0.0.1 and its unix socket: refused inside namespaces (the
    loopback is the sandbox's own, /run is empty); reachable without them (what the tier
    changes). Both listen here, so a refusal is the sandbox's doing."""
    port, path = request.getfixturevalue(target)
    assert hostile_app._connect(socket.AF_INET, ("127.0.0.1", port)) == "connected"
    assert hostile_app._connect(socket.AF_UNIX, path) == "connected"
    async with hostile(f"sqlite:///{tmp_path}/yoke.db", **tier) as (rt, store):
        await rt.append("reach", {"k": "a", "port": port, "socket": path}, tenant="acme")

        async def tried() -> bool:
            return "tcp" in await state(store, "acme", "reach", "a")

        await until(tried)
        seen = await state(store, "acme", "reach", "a")
    if tier["namespaces"] == "on":
        assert seen == {"tcp": "ConnectionRefusedError", "unix": "FileNotFoundError"}
    else:
        assert seen == {"tcp": "connected", "unix": "connected"}


async def test_killing_its_parent_does_nothing_in_namespaces(tmp_path: Path) -> None:
    """Its parent is the namespace's first process (root's, when the tenant has a uid) and the
    worker is not in its pid namespace: both kills fail, the executor and the worker go on."""
    require_bwrap()
    async with hostile(f"sqlite:///{tmp_path}/yoke.db", namespaces="on") as (rt, store):
        await rt.append("kill", {"k": "a", "pid": os.getpid()}, tenant="acme")

        async def tried() -> bool:
            return "tried" in await state(store, "acme", "kill", "a")

        await until(tried)
        seen = await state(store, "acme", "kill", "a")
        (view,) = rt.executor_views()
    assert seen["ppid"] == 1  # the namespace's init, not the worker
    assert seen["tried"] == {"parent": "PermissionError", "worker": "ProcessLookupError"}
    assert view.state.value == "READY" and view.crashes == 0


async def test_a_tenant_cannot_forge_a_line_of_the_worker_log(tmp_path: Path) -> None:
    """Its error message and its output hold newlines, a carriage return and a terminal escape
    made to look like a record of the worker: each record stays one line, its text escaped."""
    forged = "boom\n2026-01-01 00:00:00,000 ERROR yoke.worker: forged\r\x1b[2Kcleared"
    out = io.StringIO()
    handler = make_handler("text", out)  # what `yoke worker` and `yoke serve` log with
    logger = logging.getLogger("yoke")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        async with hostile(f"sqlite:///{tmp_path}/yoke.db", warm_spares=0) as (rt, _store):
            await rt.append("forge", {"k": "a", "text": forged}, tenant="acme\nadmin")

            async def dead() -> bool:
                return (await rt.instance("forge", "a", tenant="acme\nadmin")).dead == 1

            await until(dead)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    lines = out.getvalue().splitlines()
    record = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ yoke[.\w]*: ")
    assert lines and all(record.match(line) or line.startswith("    ") for line in lines)
    assert not any(line.startswith("2026-01-01") for line in lines)
    escaped = "\\n2026-01-01 00:00:00,000 ERROR yoke.worker: forged\\r\\x1b[2Kcleared"
    assert any("dead letter" in line and escaped in line for line in lines)  # its error
    # Its output, a record per line it printed, the tenant's name escaped too.
    assert any(
        "[tenant acme\\nadmin pid" in line and "forged\\r\\x1b[2Kcleared" in line for line in lines
    )


UNSTORABLE = [
    {"what": "at", "at": "1e300"},
    {"what": "at", "at": "-1e17"},
    {"what": "at", "at": "nan"},
    {"what": "at", "at": "inf"},
    {"what": "delay", "delay": "nan"},
    {"what": "emit"},
    {"what": "state"},
]


@pytest.mark.parametrize("mode", ["inline", "process"])
async def test_a_value_no_store_can_hold_fails_its_call_not_its_instance(
    tmp_path: Path, mode: str
) -> None:
    """Each ctx verb refuses it with BadValue at the call (a caught one is seen as such);
    uncaught, its call fails and is counted, and the next event of the instance runs."""
    async with hostile(f"sqlite:///{tmp_path}/yoke.db", mode=mode) as (rt, store):
        for bad in UNSTORABLE:
            await rt.append("unstorable", {"k": "c", **bad, "catch": True}, tenant="acme")
        for bad in UNSTORABLE:
            await rt.append("unstorable", {"k": "u", **bad}, tenant="acme")
        await rt.append("unstorable", {"k": "u", "what": "ok"}, tenant="acme")

        async def settled() -> bool:
            view = await rt.instance("unstorable", "u", tenant="acme")
            caught = await state(store, "acme", "unstorable", "c")
            done = view.state.get("ok") == 1 and view.dead == len(UNSTORABLE)
            return done and len(caught) == len(UNSTORABLE)

        await until(settled, seconds=60)
        caught = await state(store, "acme", "unstorable", "c")
        view = await rt.instance("unstorable", "u", tenant="acme", dead_letters=20)
        drain = rt.drain
        assert drain is not None
        errors = drain.stats().errors
    assert len(caught) == len(UNSTORABLE) and set(caught.values()) == {"BadValue"}, caught
    assert all((d.error or "").startswith("BadValue") for d in view.dead_letters)
    assert errors == len(UNSTORABLE)  # each failed call counted
    assert MAX_DATA_BYTES == 4 * 1024 * 1024  # the bound README documents


async def test_nothing_an_executor_started_outlives_its_worker_killed(
    tmp_path: Path, tier: dict[str, Any]
) -> None:
    """The worker itself SIGKILLed: its executors' trees end with it (the reaper's parent-death
    signal is SIGTERM, which it answers by killing its tree; bubblewrap dies with its parent,
    and its pid namespace with it)."""
    from tests.actors.test_poison_workers import appender, start

    marker = str(secrets.randbelow(10**9))
    url = f"sqlite:///{tmp_path}/yoke.db"
    proc = await start(url, "process", tier["namespaces"])
    try:
        async with appender(url) as (rt, _store):
            await rt.append("spawn", {"k": "a", "marker": marker}, tenant="acme")
            await until(lambda: len(marked(marker)) == 3)
            proc.kill()
            await proc.wait()
            await until(lambda: not marked(marker), seconds=5)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        for pid in marked(marker):
            os.kill(pid, 9)
