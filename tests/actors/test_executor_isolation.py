"""Isolation tiers of executor processes: what is detected and reported, the uid per tenant
(run for real when the worker is root and a Python every user can run is at hand, from a copy
every user can read, wherever the checkout is), the cgroup placement (on a stand-in directory:
this machine has no delegated cgroup v2)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import yoke
from tests.actors import exec_app
from tests.actors.conftest import open_actor_store
from tests.actors.executors import state, until
from tests.actors.uid_worker import WORKER_ID
from yoke.actors.executor import sandbox


def test_without_root_or_a_reachable_interpreter_the_uid_tier_is_off(tmp_path: Path) -> None:
    hidden = tmp_path / "private"
    hidden.mkdir(mode=0o700)
    (hidden / "python").write_text("")
    iso = sandbox.detect(
        memory_mb=512,
        python=str(hidden / "python"),
        needed=[],
        uids=True,
        uid_base=5000,
        uid_span=10,
        cgroup="",
    )
    assert iso.uid_base is None and iso.uid_of("acme") is None
    if os.geteuid() == 0:
        assert "cannot be read by another user" in iso.uid_note
    else:
        assert "root" in iso.uid_note
    assert iso.describe() == "process+rlimit-as=512MB"
    assert "cgroup: not delegated" in iso.report()
    assert iso.limits() == {"as": 512 * 1024 * 1024, "nofile": sandbox.NOFILE, "nproc": None}
    off = sandbox.detect(
        memory_mb=0, python=sys.executable, needed=[], uids=False, uid_base=1,
        uid_span=1, cgroup="",
    )  # fmt: skip
    assert off.uid_note.startswith("off") and off.describe() == "process"


def test_tenant_uids_are_stable_and_in_their_range() -> None:
    iso = sandbox.Isolation(
        memory_mb=0, uid_base=7000, uid_span=100, uid_note="", cgroup=None, cgroup_note=""
    )
    uids = {t: iso.uid_of(t) for t in ("acme", "zeta", "a/b", "x" * 256)}
    assert all(u is not None and 7000 <= u < 7100 for u in uids.values())
    assert uids == {t: iso.uid_of(t) for t in uids}
    assert iso.limits()["nproc"] == sandbox.NPROC
    assert sandbox.tenant_dir_name("a/b") != sandbox.tenant_dir_name("a_b")
    assert "/" not in sandbox.tenant_dir_name("../../etc")


def test_a_delegated_cgroup_gets_one_cgroup_per_executor(tmp_path: Path) -> None:
    group = tmp_path / "yoke.slice"
    group.mkdir()
    assert sandbox.detect(
        memory_mb=256, python=sys.executable, needed=[], uids=False, uid_base=1,
        uid_span=1, cgroup=str(group),
    ).cgroup is None  # fmt: skip  # not a cgroup v2 directory
    (group / "cgroup.controllers").write_text("cpu io memory pids\n")
    (group / "cgroup.subtree_control").write_text("")
    iso = sandbox.detect(
        memory_mb=256, python=sys.executable, needed=[], uids=False, uid_base=1,
        uid_span=1, cgroup=str(group),
    )  # fmt: skip
    assert iso.cgroup == group and "cgroup" in iso.describe()
    assert (group / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert iso.cgroup_limits
    leaf = sandbox.make_leaf(group, "acme-1", memory_mb=256, limits=iso.cgroup_limits)
    assert (leaf / "memory.max").read_text() == str(256 * 1024 * 1024)
    assert (leaf / "pids.max").read_text() == str(sandbox.NPROC)
    assert not sandbox.oom_killed(leaf)
    (leaf / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert sandbox.oom_killed(leaf)


# What an executor of `tests.actors.uid_worker` imports: yoke, and the executor tests' app.
APP_FILES = ("tests/__init__.py", "tests/actors/__init__.py", "tests/actors/exec_app.py")
WORKER_FILE = "tests/actors/uid_worker.py"


def readable_tree(root: Path) -> None:
    """Every directory enterable and every file readable by any user (and runnable, if its
    owner may run it), whatever the umask or the modes of the checkout it was copied from.
    Symbolic links are left alone: a chmod follows them (the venv's `python` is the system's
    interpreter, which is not ours to change)."""
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        mode = stat.S_IMODE(path.lstat().st_mode)
        if path.is_dir():
            path.chmod(mode | 0o755)
        else:
            path.chmod(mode | 0o444 | (0o111 if mode & stat.S_IXUSR else 0))


@pytest.fixture
def readable_copy() -> Iterator[tuple[Path, str]]:
    """(a directory, a Python) that any user can read and run: a copy of yoke, of the
    executor tests' app and of the worker that runs it, and a venv of this Python version
    whose only addition is that copy.

    A tenant's uid must import yoke and the app, and the worker offers the uid tier only when
    it can (`sandbox.detect`). The checkout itself may sit in a directory other users cannot
    enter (a temporary clone is 0700, as is many a home directory), and so may its virtualenv:
    the worker and its executors run from the copy instead, never from the checkout."""
    system = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
    if os.geteuid() != 0 or not system.exists():
        pytest.skip(f"needs root and {system}")
    home = Path(tempfile.mkdtemp(prefix="yoke-uid-test-"))  # not below pytest's 0700 base
    try:
        code = home / "code"
        shutil.copytree(
            Path(yoke.__file__).resolve().parent,
            code / "yoke",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        checkout = Path(__file__).resolve().parents[2]
        for name in (*APP_FILES, WORKER_FILE):
            (code / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(checkout / name, code / name)
        venv = home / "venv"
        subprocess.run([str(system), "-m", "venv", "--without-pip", str(venv)], check=True)
        site = next((venv / "lib").glob("python3.*/site-packages"))
        (site / "yoke-executor.pth").write_text(f"{code}\n")
        readable_tree(home)
        yield code, str(venv / "bin" / "python")
    finally:
        shutil.rmtree(home)


async def test_as_root_each_tenant_runs_under_a_uid_of_its_own(
    app_url: str, readable_copy: tuple[Path, str]
) -> None:
    code, python = readable_copy
    base, count = 3_000_000, 1000
    # The worker is this test's Python (root reads the checkout's virtualenv) started in the
    # copy: `tests` and `yoke` are imported from there, as its executors import them.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.actors.uid_worker", app_url, python, str(base), str(count),
        cwd=code, env=env, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    backend = open_actor_store(app_url)
    await backend.open()
    store = backend.actors
    try:
        assert worker.stdout is not None
        lines: list[str] = []
        async with asyncio.timeout(60):
            while not lines or lines[-1] != "ready":
                line = await worker.stdout.readline()
                assert line, f"the worker ended: {lines}"
                lines.append(line.decode().strip())
        isolation = next(x for x in lines if x.startswith("isolation ")).split()[1]
        assert "uid" in isolation.split("+"), lines
        for tenant in ("acme", "zeta"):
            events = exec_app.registry.new_events("probes", [{"k": "p"}], tenant=tenant)
            await store.append_events(events, owner=WORKER_ID, now=time.time())
        seen = {}
        for tenant in ("acme", "zeta"):

            async def probed(t: str = tenant) -> bool:
                return "seen" in await state(store, t, "probe", "p")

            await until(probed)
            seen[tenant] = (await state(store, tenant, "probe", "p"))["seen"]
    finally:
        if worker.returncode is None:
            worker.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            await worker.wait()
        await backend.close()
    assert worker.returncode == 0
    iso = sandbox.Isolation(
        memory_mb=0, uid_base=base, uid_span=count, uid_note="", cgroup=None, cgroup_note=""
    )
    for tenant, s in seen.items():
        assert s["uid"] == iso.uid_of(tenant) and s["uid"] != 0
        assert os.stat(s["cwd"]).st_uid == s["uid"]
        assert s["peek"] == "denied"  # it cannot even list the other tenants' directories
        assert s["modules"] == []  # no driver, no server: only yoke's executor side
    assert seen["acme"]["uid"] != seen["zeta"]["uid"]
