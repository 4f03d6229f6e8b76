"""Isolation of executor processes: which tiers this worker can apply, detected once at start.

* `process` (always): a process and process group of its own, started by exec (never forked
  from the worker's state), a scrubbed environment (no database URL, no token), its own
  working directory (mode 0700), umask 077, no core dumps, the parent-death signal, no new
  privileges, and `rlimit`: RLIMIT_AS at `YOKE_EXECUTOR_MEMORY_MB` and a cap on open files,
  applied by the executor's bootstrap (`yoke/executor.py`) before any tenant code is imported.
  Without a pid namespace the bootstrap is the child subreaper of its executor (`reaper`), so
  children that left its process group (`setsid`) are still killed when it ends.
* `uid` (the worker runs as root): one uid (and gid) per tenant, so tenants cannot read each
  other's directories or signal each other's processes (nor the worker's), and RLIMIT_NPROC
  counts per tenant. Only when the interpreter and the import path can be read by another
  user (with namespaces: once the directories in the way are masked, `namespaces.mounts`): a
  uid that cannot start Python would be a boot loop, so then the tier is left off and the
  reason reported.
* `namespaces` (bubblewrap found and probed at start, `namespaces.py`): network, pid, mount,
  ipc and uts namespaces of its own.
* `cgroup` (a delegated cgroup v2 directory in `YOKE_EXECUTOR_CGROUP`): a cgroup per executor,
  whose whole tree is killed at once when the executor ends (`cgroup.kill`); with the memory
  and pids controllers, memory.max and pids.max too, and an OOM kill there is reported as the
  executor's stop reason.

As root, a worker refuses to start executors that would run tenant code as root (neither a
uid per tenant nor namespaces) unless `YOKE_EXECUTOR_ALLOW_WEAK_ISOLATION=1` (`weakness`);
as another user without namespaces it warns. What each tier stops and what it does not is in
the README (a kernel exploit needs a VM). This module must never start a process; it decides
what the launcher applies and describes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from yoke.actors.executor.namespaces import Namespaces
from yoke.actors.executor.namespaces import find as find_namespaces
from yoke.errors import YokeError

NOFILE = 1024  # open files per executor
NPROC = 256  # processes per tenant uid (only meaningful with a uid per tenant)


@dataclass(frozen=True, kw_only=True, slots=True)
class Isolation:
    memory_mb: int  # RLIMIT_AS, 0: none
    uid_base: int | None  # a uid per tenant from here (None: the tier is off)
    uid_span: int
    uid_note: str  # why the tier is on or off
    cgroup: Path | None  # the delegated cgroup v2 directory, if any
    cgroup_note: str
    namespaces: Namespaces | None = None  # bubblewrap's command line, if the tier is on
    namespaces_note: str = "off"
    cgroup_limits: bool = True  # the cgroup has the memory and pids controllers

    def tiers(self) -> list[str]:
        out = ["process"]
        if self.memory_mb:
            out.append(f"rlimit-as={self.memory_mb}MB")
        if self.uid_base is not None:
            out.append("uid")
        if self.namespaces is not None:
            out.append("namespaces")
        if self.cgroup is not None:
            out.append("cgroup")
        return out

    def describe(self) -> str:
        """What `GET /v1/executors` reports as `isolation`: the tiers in force."""
        return "+".join(self.tiers())

    def report(self) -> str:
        """A log line: the tiers in force and why the others are not."""
        return (
            f"executor isolation {self.describe()} (uid: {self.uid_note}; "
            f"namespaces: {self.namespaces_note}; cgroup: {self.cgroup_note})"
        )

    @property
    def reaper(self) -> bool:
        """Whether the executor's bootstrap is the subreaper of its tree (no pid namespace
        does it)."""
        return self.namespaces is None

    def limits(self) -> dict[str, int | None]:
        """What the executor's bootstrap applies to itself (`yoke.executor.apply_limits`)."""
        return {
            "as": self.memory_mb * 1024 * 1024 if self.memory_mb else None,
            "nofile": NOFILE,
            "nproc": NPROC if self.uid_base is not None else None,
        }

    def uid_of(self, tenant: str) -> int | None:
        if self.uid_base is None:
            return None
        digest = hashlib.blake2b(tenant.encode(), digest_size=8).digest()
        return self.uid_base + int.from_bytes(digest, "big") % self.uid_span

    def weakness(self) -> str | None:
        """What makes this isolation weak: as root, tenant code would run as root (no uid of
        its own; namespaces as root come only with one); as another user, tenants share the
        worker's uid and can reach it without namespaces. None: neither."""
        if _root() and self.uid_base is None:
            return (
                "as root, executors would run tenant code as root: no uid per tenant "
                f"({self.uid_note}) and no namespaces ({self.namespaces_note})"
            )
        if not _root() and self.namespaces is None:
            return (
                "executors share the worker's uid and can signal it, read its /proc and reach "
                f"the network: no namespaces ({self.namespaces_note})"
            )
        return None


class WeakIsolation(YokeError):
    """As root, executors would run tenant code as root, and weaker isolation was not
    accepted (`YOKE_EXECUTOR_ALLOW_WEAK_ISOLATION`)."""


def check(isolation: Isolation, *, allow_weak: bool) -> str | None:
    """Fail closed: `WeakIsolation` as root when tenant code would run as root, unless
    `allow_weak`; otherwise the warning to log (None: nothing to warn about)."""
    weak = isolation.weakness()
    if weak is None:
        return None
    if _root() and not allow_weak:
        raise WeakIsolation(
            f"refusing to start executors: {weak}. Make the app, the interpreter and the "
            "import path readable by other users (namespaces mask the directories on the way "
            "to them), install bubblewrap, or set YOKE_EXECUTOR_ALLOW_WEAK_ISOLATION=1 to "
            "accept it"
        )
    return f"weak executor isolation ({isolation.describe()}): {weak}"


def _root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def detect(
    *,
    memory_mb: int,
    python: str,
    needed: list[str],
    uids: bool,
    uid_base: int,
    uid_span: int,
    cgroup: str,
    namespaces: str = "off",
    workdir: Path | None = None,
    reads: tuple[str, ...] = (),
) -> Isolation:
    """`needed`: what an executor must read besides its interpreter (where yoke and the app
    are imported from); `namespaces`: `auto`, `on` or `off` (`on` fails at start without
    them: `WeakIsolation`); `workdir`: where the namespace probe may write; `reads`: more
    paths the namespace tier mounts where they would be hidden (the import path)."""
    venv = str(Path(os.path.abspath(python)).parent.parent)  # its pyvenv.cfg, if a venv's
    paths = [python, str(Path(python).resolve()), _home(python), *needed]
    candidate: int | None = None  # the uid tier, unless a path rules it out
    if not uids:
        uid_note = "off (YOKE_EXECUTOR_UIDS=0)"
    elif not _root():
        uid_note = "off (the worker does not run as root)"
    else:
        candidate = uid_base
        uid_note = f"on (uids {uid_base}..{uid_base + uid_span - 1})"
    if candidate is not None and (own := _unreachable(paths, ancestors=False)) is not None:
        uid_note, candidate = f"off ({own} cannot be read by another user)", None
    ns: Namespaces | None = None
    ns_note = "off (YOKE_EXECUTOR_NAMESPACES=off)"
    if namespaces != "off":
        # As root, the namespace tier masks the directories in the way, not the paths
        # themselves: each must be readable by the tenant's uid.
        ns, ns_note = find_namespaces(
            setting=namespaces,
            python=python,
            needed=[*paths, venv, *reads],
            writable=workdir or Path(tempfile.gettempdir()),
            uid=candidate,
            uid_note=uid_note,
        )
        if ns is None and namespaces == "on":
            raise WeakIsolation(f"YOKE_EXECUTOR_NAMESPACES=on, but namespaces are {ns_note}")
    if candidate is not None and ns is None:
        blocked = _unreachable(paths)
        if blocked is not None:
            uid_note = f"off ({blocked} cannot be read by another user)"
            candidate = None
    group, cgroup_note, limits = _cgroup(cgroup)
    return Isolation(
        memory_mb=memory_mb,
        uid_base=candidate,
        uid_span=uid_span,
        uid_note=uid_note,
        cgroup=group,
        cgroup_note=cgroup_note,
        namespaces=ns,
        namespaces_note=ns_note,
        cgroup_limits=limits,
    )


def _home(python: str) -> str:
    """Where the standard library of `python` lives (this one's, or one beside the binary)."""
    if Path(python).resolve() == Path(sys.executable).resolve():
        return sys.base_prefix
    return str(Path(python).resolve().parent.parent / "lib")


def _unreachable(paths: list[str], *, ancestors: bool = True) -> str | None:
    """The first of `paths` (or of their parent directories, with `ancestors`) another user
    cannot reach."""
    for raw in paths:
        if not raw:
            continue
        path = Path(raw).resolve()
        if not path.exists():
            continue
        for part in [*reversed(path.parents), path] if ancestors else [path]:
            mode = part.stat().st_mode
            if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
                return str(part)
            if not stat.S_ISDIR(mode) and not mode & stat.S_IROTH:
                return str(part)
    return None


def _cgroup(raw: str) -> tuple[Path | None, str, bool]:
    """The delegated cgroup, why (not), and whether it has the memory and pids controllers.
    Without them it still kills an executor's whole tree at once (`cgroup.kill`)."""
    if not raw:
        return None, "not delegated (YOKE_EXECUTOR_CGROUP is not set)", False
    path = Path(raw)
    controllers = path / "cgroup.controllers"
    if not controllers.is_file():
        return None, f"{raw} is not a cgroup v2 directory", False
    if not os.access(path, os.W_OK):
        return None, f"{raw} is not writable by this worker", False
    have = set(controllers.read_text().split())
    if not {"memory", "pids"} <= have:
        return (
            path,
            (
                f"on ({raw}: kills each executor's tree; no memory.max or pids.max, as it lacks "
                f"the memory and pids controllers: has {sorted(have)})"
            ),
            False,
        )
    try:
        (path / "cgroup.subtree_control").write_text("+memory +pids")
    except OSError as exc:
        return (
            path,
            f"on ({raw}: kills each executor's tree; cannot enable memory and pids: {exc})",
            False,
        )
    return path, f"on ({raw})", True


def make_leaf(group: Path, name: str, *, memory_mb: int, limits: bool) -> Path:
    """A cgroup of its own below `group` for one executor, with its memory and pids caps when
    the controllers are there. The executor's first process joins it before it execs
    (`spawned.popen_executor`), so nothing it starts is ever outside it."""
    leaf = group / f"executor-{name}"
    leaf.mkdir(exist_ok=True)
    if limits:
        if memory_mb:
            (leaf / "memory.max").write_text(str(memory_mb * 1024 * 1024))
            (leaf / "memory.swap.max").write_text("0")
        (leaf / "pids.max").write_text(str(NPROC))
    return leaf


def kill_leaf(leaf: Path) -> None:
    """SIGKILL every process in `leaf` at once (`cgroup.kill`, Linux 5.14), or one by one
    until none is left where the kernel lacks it."""
    try:
        (leaf / "cgroup.kill").write_text("1")
        return
    except FileNotFoundError:
        if not leaf.exists():
            return
    except OSError:
        pass
    for _ in range(100):
        try:
            pids = [int(p) for p in (leaf / "cgroup.procs").read_text().split()]
        except OSError:
            return
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, 9)


def remove_leaf(leaf: Path) -> bool:
    """Remove an executor's cgroup; False while a process is still in it."""
    try:
        leaf.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def oom_killed(leaf: Path) -> bool:
    """Whether the kernel's OOM killer acted in this executor's cgroup."""
    try:
        text = (leaf / "memory.events").read_text()
    except OSError:
        return False
    counts = dict(line.split() for line in text.splitlines() if line.count(" ") == 1)
    return int(counts.get("oom_kill", "0")) > 0


def tenant_dir_name(tenant: str) -> str:
    """A directory name for a tenant: its readable part, and a hash (names may hold '/')."""
    readable = "".join(c if c.isalnum() or c in "-_." else "_" for c in tenant[:32])
    return f"{readable}-{hashlib.blake2b(tenant.encode(), digest_size=6).hexdigest()}"
