"""Which tiers a worker gives its executors, and failing closed: as root, `yoke worker
--executors process` refuses to start (exit 2, naming the missing tiers and why) when tenant
code would run as root, unless weaker isolation is accepted (then a WARNING, and the tiers in
`GET /v1/executors`'s rows); as another user, the namespace tier works in a user namespace,
and without it a WARNING says what tenants can reach. The cgroup tier kills a whole tree
where a cgroup v2 directory can be had. Real processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import yoke
from tests.actors import hostile_app
from tests.actors.executors import require_bwrap

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534


def needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("as root only: this worker is not root")


def worker(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "yoke", "worker", "--app", hostile_app.SPEC, *args],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


WEAK = {"YOKE_EXECUTOR_NAMESPACES": "off", "YOKE_EXECUTOR_UIDS": "0"}
WEAK_SETTINGS = {"namespaces": "off", "allow_weak_isolation": 1}


def test_as_root_a_worker_without_a_uid_or_namespaces_refuses_to_start(tmp_path: Path) -> None:
    needs_root()
    db = tmp_path / "w.db"
    proc = worker({**WEAK, "YOKE_DATABASE_URL": f"sqlite:///{db}"}, "--executors", "process")
    _, err = proc.communicate(timeout=60)
    said = " ".join(err.split())  # the console wraps long lines
    assert proc.returncode == 2, err
    assert "refusing to start executors: as root, executors would run tenant code as root" in said
    assert "no uid per tenant (off (YOKE_EXECUTOR_UIDS=0))" in said
    assert "no namespaces (off (YOKE_EXECUTOR_NAMESPACES=off))" in said
    assert "YOKE_EXECUTOR_ALLOW_WEAK_ISOLATION=1" in said
    assert not db.exists()  # refused before it opened the store


def test_as_root_weak_isolation_accepted_warns_and_shows_its_tiers(tmp_path: Path) -> None:
    needs_root()
    db = tmp_path / "w.db"
    env = {
        **WEAK,
        "YOKE_EXECUTOR_ALLOW_WEAK_ISOLATION": "1",
        "YOKE_DATABASE_URL": f"sqlite:///{db}",
    }
    proc = worker(env, "--executors", "process")
    try:
        rows: list[tuple[str, str]] = []
        deadline = time.monotonic() + 60
        while not rows and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)  # polling a subprocess's store
            if db.exists():
                try:
                    with sqlite3.connect(db) as conn:
                        rows = conn.execute(
                            "SELECT state, isolation FROM runtime_spares"
                        ).fetchall()
                except sqlite3.OperationalError:
                    continue
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    said = " ".join(err.split())
    assert proc.returncode == 0, err
    assert "WARNING yoke.executor: weak executor isolation (process+rlimit-as=1024MB)" in said
    assert rows and rows[0][1] == "process+rlimit-as=1024MB"  # what GET /v1/executors shows


@pytest.fixture
def nobody_python() -> Iterator[tuple[str, Path]]:
    """A Python any user can run, with yoke and its dependencies on its path, and a directory
    `nobody` (uid 65534) owns; skips where that cannot be made."""
    needs_root()
    system = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
    ours = [p for p in sys.path if p.endswith("site-packages")]
    yoke_root = str(Path(yoke.__file__).resolve().parents[1])
    if not system.exists() or shutil.which("setpriv") is None:
        pytest.skip(f"needs {system} and setpriv")
    from yoke.actors.executor.sandbox import _unreachable

    blocked = _unreachable([*ours, yoke_root, str(ROOT)])
    if blocked is not None:
        pytest.skip(f"{blocked} cannot be read by another user: nobody could import yoke")
    home = Path(tempfile.mkdtemp(prefix="yoke-nobody-"))
    try:
        home.chmod(0o755)
        venv = home / "venv"
        subprocess.run([str(system), "-m", "venv", "--without-pip", str(venv)], check=True)
        site = next((venv / "lib").glob("python3.*/site-packages"))
        (site / "yoke-tests.pth").write_text("\n".join([*ours, yoke_root, str(ROOT)]) + "\n")
        work = home / "work"
        work.mkdir()
        os.chown(work, NOBODY, NOBODY)
        yield str(venv / "bin" / "python"), work
    finally:
        shutil.rmtree(home)


def as_nobody(python: str, work: Path, namespaces: str) -> dict[str, object]:
    done = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", python,
         "-m", "tests.actors.tier_worker", str(work / "w.db"), namespaces],
        cwd=ROOT,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMPDIR": str(work)},
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_as_another_user_the_namespace_tier_runs_in_a_user_namespace(
    nobody_python: tuple[str, Path],
) -> None:
    require_bwrap()
    if int(Path("/proc/sys/user/max_user_namespaces").read_text()) < 1:
        pytest.skip("this kernel allows no user namespaces")
    out = as_nobody(*nobody_python, "on")
    seen, me = out["seen"], out["worker"]
    assert isinstance(seen, dict) and isinstance(me, dict)
    assert out["isolation"] == "process+rlimit-as=1024MB+namespaces"
    assert out["warnings"] == []
    assert me["uid"] == NOBODY and seen["uid"] == NOBODY  # the worker's own uid, mapped
    assert seen["pid"] == 2 and seen["pidns"] != me["pidns"]


def test_as_another_user_without_namespaces_a_warning_says_so(
    nobody_python: tuple[str, Path],
) -> None:
    out = as_nobody(*nobody_python, "off")
    warnings = out["warnings"]
    assert out["isolation"] == "process+rlimit-as=1024MB"
    assert isinstance(warnings, list) and len(warnings) == 1
    assert warnings[0].startswith("weak executor isolation (process+rlimit-as=1024MB)")
    assert "share the worker's uid" in warnings[0]


def cgroup2_mount() -> Path | None:
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if fields[2] == "cgroup2":
                return Path(fields[1])
    return None


def leaves(group: Path) -> list[Path]:
    return list(group.glob("executor-*"))


def members(leaf: Path) -> set[int]:
    return {int(p) for p in (leaf / "cgroup.procs").read_text().split()}


@pytest.fixture
def delegated_cgroup() -> Iterator[Path]:
    """A cgroup v2 directory this worker may use (made below the cgroup2 mount, as root);
    skips, naming why, where there is none."""
    mount = cgroup2_mount()
    if mount is None:
        pytest.skip("no cgroup v2 hierarchy is mounted here")
    group = mount / f"yoke-test-{os.getpid()}-{time.monotonic_ns()}"
    try:
        group.mkdir()
    except OSError as exc:
        pytest.skip(f"no cgroup can be delegated here: mkdir {group}: {exc.strerror}")
    try:
        yield group
    finally:
        for leaf in group.glob("executor-*"):
            leaf.rmdir()
        group.rmdir()


@pytest.mark.parametrize("tier", ["namespaces", "no-namespaces"])
async def test_each_executor_runs_in_a_cgroup_of_its_own_killed_as_a_whole(
    tmp_path: Path, delegated_cgroup: Path, tier: str
) -> None:
    """Every process of an executor (the tree's top, the executor, what it starts) is in its
    own cgroup from before its first instruction; the cgroup is killed and removed when the
    executor ends."""
    from tests.actors.executors import running, state, until

    if tier == "namespaces":
        require_bwrap()
    settings = {"namespaces": "on"} if tier == "namespaces" else WEAK_SETTINGS
    marker = str(time.monotonic_ns())
    async with running(
        f"sqlite:///{tmp_path}/yoke.db",
        app_spec=hostile_app.SPEC,
        registry=hostile_app.registry,
        cgroup=str(delegated_cgroup),
        warm_spares=0,
        **settings,
    ) as (rt, store):
        pool = rt.pool
        assert pool is not None and "cgroup" in pool.isolation.split("+")
        await rt.append("spawn", {"k": "a", "marker": marker}, tenant="acme")

        async def spawned() -> bool:
            return "spawned" in await state(store, "acme", "spawn", "a")

        await until(spawned)
        (leaf,) = leaves(delegated_cgroup)
        procs = members(leaf)
        ex = pool.executor("acme")
        assert ex is not None and ex.pid in procs
        assert len(procs) >= 5  # the top, the executor, and its three children (and more)
        await rt.append("spawn", {"k": "a", "then": "exit"}, tenant="acme")
        await until(lambda: ex.state.value == "FAILED")
        await until(lambda: not leaf.exists(), seconds=5)  # emptied and removed


def test_the_cgroup_limits_apply_where_its_controllers_are(delegated_cgroup: Path) -> None:
    from yoke.actors.executor import sandbox

    have = (delegated_cgroup.parent / "cgroup.controllers").read_text().split()
    if not {"memory", "pids"} <= set(have):
        pytest.skip(
            f"the memory and pids controllers are not available in {delegated_cgroup.parent} "
            f"(it has {have}: on this host they are bound to cgroup v1)"
        )
    iso = sandbox.detect(
        memory_mb=256, python=sys.executable, needed=[], uids=False, uid_base=1,
        uid_span=1, cgroup=str(delegated_cgroup),
    )  # fmt: skip
    assert iso.cgroup == delegated_cgroup and iso.cgroup_limits
    leaf = sandbox.make_leaf(delegated_cgroup, "limits", memory_mb=256, limits=True)
    assert (leaf / "memory.max").read_text().strip() == str(256 * 1024 * 1024)
    assert (leaf / "pids.max").read_text().strip() == str(sandbox.NPROC)
