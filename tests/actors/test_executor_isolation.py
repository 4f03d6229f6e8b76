"""Isolation tiers of executor processes: what is detected and reported, the uid per tenant
(run for real when the worker is root and a Python every user can run is at hand), the cgroup
placement (on a stand-in directory: this machine has no delegated cgroup v2)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import yoke
from tests.actors.executors import running, state, until
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


@pytest.fixture
def shared_python() -> Iterator[str]:
    """A Python of this version that any user can run, with yoke on its path."""
    system = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
    if os.geteuid() != 0 or not system.exists():
        pytest.skip(f"needs root and {system}")
    home = Path(tempfile.mkdtemp(prefix="yoke-uid-test-"))  # not below pytest's 0700 base
    try:
        home.chmod(0o755)
        venv = home / "venv"
        subprocess.run([str(system), "-m", "venv", "--without-pip", str(venv)], check=True)
        site = next((venv / "lib").glob("python3.*/site-packages"))
        ours = [p for p in sys.path if p.endswith("site-packages")]
        yoke_root = str(Path(yoke.__file__).resolve().parents[1])
        (site / "yoke-executor.pth").write_text("\n".join([*ours, yoke_root]) + "\n")
        yield str(venv / "bin" / "python")
    finally:
        shutil.rmtree(home)


async def test_as_root_each_tenant_runs_under_a_uid_of_its_own(
    app_url: str, shared_python: str
) -> None:
    python = shared_python
    async with running(app_url, python=python, uid_base=3_000_000, uid_count=1000) as (rt, store):
        pool = rt.pool
        assert pool is not None and "uid" in pool.isolation.split("+")
        for tenant in ("acme", "zeta"):
            await rt.append("probes", {"k": "p"}, tenant=tenant)
        seen = {}
        for tenant in ("acme", "zeta"):

            async def probed(t: str = tenant) -> bool:
                return "seen" in await state(store, t, "probe", "p")

            await until(probed)
            seen[tenant] = (await state(store, tenant, "probe", "p"))["seen"]
    iso = sandbox.Isolation(
        memory_mb=0, uid_base=3_000_000, uid_span=1000, uid_note="", cgroup=None, cgroup_note=""
    )
    for tenant, s in seen.items():
        assert s["uid"] == iso.uid_of(tenant) and s["uid"] != 0
        assert os.stat(s["cwd"]).st_uid == s["uid"]
        assert s["peek"] == "denied"  # it cannot even list the other tenants' directories
    assert seen["acme"]["uid"] != seen["zeta"]["uid"]
