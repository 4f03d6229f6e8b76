"""bubblewrap's command line for an executor (`namespaces.py`), a pure function of paths:
which directories are masked, which paths are mounted back and how, never a hidden
directory's sockets again. What the command does is `test_executor_sandbox.py`'s."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from yoke.actors.executor.namespaces import Namespaces, mounts


@pytest.fixture
def tree() -> Iterator[Path]:
    """/tmp/x (0755) / private (0700) / venv (0755) / lib: a venv behind a private directory."""
    top = Path(tempfile.mkdtemp(prefix="yoke-ns-"))
    try:
        top.chmod(0o755)
        private = top / "private"
        private.mkdir(mode=0o700)
        (private / "venv" / "lib").mkdir(parents=True)
        yield top
    finally:
        shutil.rmtree(top)


def test_as_root_the_private_directory_is_masked_and_the_venv_mounted_back(tree: Path) -> None:
    venv = tree / "private" / "venv"
    masks, reads = mounts([str(venv / "lib"), str(venv), "/usr/lib"], root=True)
    assert masks == (str(tree / "private"),)
    assert reads == (str(venv),)  # the outermost needed path below the mask, once
    assert mounts([str(venv)], root=False) == ((), (str(venv),))  # below /tmp: mounted back
    assert mounts(["/tmp", "/run", "/usr/lib"], root=True) == ((), ())  # never /tmp itself


def test_the_command_line_hides_first_then_mounts_back_what_is_needed(tree: Path) -> None:
    venv = tree / "private" / "venv"
    work = tree / "work" / "acme"
    ns = Namespaces(
        bwrap="/usr/bin/bwrap", privileged=True, masks=(str(tree / "private"),), reads=(str(venv),)
    )
    argv = ns.command("/usr/bin/python3", writable=work)
    joined = " ".join(argv)
    assert argv[-5:] == ["--", "/usr/bin/python3", "-I", "-m", "yoke.executor"]
    assert "--unshare-user" not in argv  # as root: no user namespace (it would map to uid 0)
    assert "--unshare-net" in argv and "--unshare-pid" in argv and "--die-with-parent" in argv
    assert joined.index("--tmpfs /tmp") < joined.index(f"--tmpfs {tree / 'private'}")
    assert f"--perms 0755 --dir {tree} " in joined  # walkable by the tenant's uid
    assert f"--perms 0711 --dir {tree / 'work'} " in joined  # the writable's parent: not listable
    assert f"--ro-bind {venv} {venv}" in joined and f"--bind {work} {work}" in joined
    assert "--cap-add CAP_SETUID --cap-add CAP_SETGID" in joined
    user = Namespaces(bwrap="/usr/bin/bwrap", privileged=False, masks=(), reads=())
    argv = user.command("/usr/bin/python3", writable=work)
    assert argv[1:3] == ["--unshare-user", "--disable-userns"] and "--cap-add" not in argv
