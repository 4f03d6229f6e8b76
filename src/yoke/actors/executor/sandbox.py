"""Isolation of executor processes: which tiers this worker can apply, detected once at start.

* `process` (always): a process and process group of its own, started by exec (never forked
  from the worker's state), a scrubbed environment (no database URL, no token), its own
  working directory (mode 0700), umask 077, no core dumps, the parent-death signal, no new
  privileges, and `rlimit`: RLIMIT_AS at `YOKE_EXECUTOR_MEMORY_MB` and a cap on open files,
  applied by the executor's bootstrap (`yoke/executor.py`) before any tenant code is imported.
* `uid` (the worker runs as root): one uid (and gid) per tenant, so tenants cannot read each
  other's directories or signal each other's processes, and RLIMIT_NPROC counts per tenant.
  Only when the interpreter and the import path can be read by another user: a uid that cannot
  start Python would be a boot loop, so then the tier is left off and the reason reported.
* `cgroup` (a delegated cgroup v2 directory in `YOKE_EXECUTOR_CGROUP`, with the memory and
  pids controllers): a cgroup per executor with memory.max and pids.max; an OOM kill there is
  reported as the executor's stop reason.

What this contains is faults and resource use: one tenant's crash, leak or runaway does not
take the worker or the other tenants down. It is not a security boundary against hostile
code (that needs a VM, gVisor or similar), and the docs say so. This module must never start
a process; it decides what the launcher applies and describes it.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

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

    def tiers(self) -> list[str]:
        out = ["process"]
        if self.memory_mb:
            out.append(f"rlimit-as={self.memory_mb}MB")
        if self.uid_base is not None:
            out.append("uid")
        if self.cgroup is not None:
            out.append("cgroup")
        return out

    def describe(self) -> str:
        """What `GET /v1/executors` reports as `isolation`: the tiers in force."""
        return "+".join(self.tiers())

    def report(self) -> str:
        """A log line: the tiers in force and why the others are not."""
        return (
            f"executor isolation {self.describe()} "
            f"(uid: {self.uid_note}; cgroup: {self.cgroup_note})"
        )

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


def detect(
    *,
    memory_mb: int,
    python: str,
    needed: list[str],
    uids: bool,
    uid_base: int,
    uid_span: int,
    cgroup: str,
) -> Isolation:
    """`needed`: what an executor must read besides its interpreter (where yoke and the app
    are imported from)."""
    uid_base_or_none: int | None = None
    if not uids:
        uid_note = "off (YOKE_EXECUTOR_UIDS=0)"
    elif not hasattr(os, "geteuid") or os.geteuid() != 0:
        uid_note = "off (the worker does not run as root)"
    elif (blocked := _unreachable([python, _home(python), *needed])) is not None:
        uid_note = f"off ({blocked} cannot be read by another user)"
    else:
        uid_base_or_none = uid_base
        uid_note = f"on (uids {uid_base}..{uid_base + uid_span - 1})"
    group, cgroup_note = _cgroup(cgroup)
    return Isolation(
        memory_mb=memory_mb,
        uid_base=uid_base_or_none,
        uid_span=uid_span,
        uid_note=uid_note,
        cgroup=group,
        cgroup_note=cgroup_note,
    )


def _home(python: str) -> str:
    """Where the standard library of `python` lives (this one's, or one beside the binary)."""
    if Path(python).resolve() == Path(sys.executable).resolve():
        return sys.base_prefix
    return str(Path(python).resolve().parent.parent / "lib")


def _unreachable(paths: list[str]) -> str | None:
    """The first of `paths` (or of their parent directories) another user cannot reach."""
    for raw in paths:
        if not raw:
            continue
        path = Path(raw).resolve()
        if not path.exists():
            continue
        for part in [*reversed(path.parents), path]:
            mode = part.stat().st_mode
            if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
                return str(part)
            if not stat.S_ISDIR(mode) and not mode & stat.S_IROTH:
                return str(part)
    return None


def _cgroup(raw: str) -> tuple[Path | None, str]:
    if not raw:
        return None, "not delegated (YOKE_EXECUTOR_CGROUP is not set)"
    path = Path(raw)
    controllers = path / "cgroup.controllers"
    if not controllers.is_file():
        return None, f"{raw} is not a cgroup v2 directory"
    have = set(controllers.read_text().split())
    if not {"memory", "pids"} <= have:
        return None, f"{raw} lacks the memory and pids controllers (has: {sorted(have)})"
    if not os.access(path, os.W_OK):
        return None, f"{raw} is not writable by this worker"
    try:
        (path / "cgroup.subtree_control").write_text("+memory +pids")
    except OSError as exc:
        return None, f"cannot enable memory and pids below {raw}: {exc}"
    return path, f"on ({raw})"


def place(group: Path, tenant: str, pid: int, *, memory_mb: int) -> Path:
    """Put `pid` into a cgroup of its own below `group`, with its memory and pids caps."""
    leaf = group / f"executor-{tenant_dir_name(tenant)}-{pid}"
    leaf.mkdir(exist_ok=True)
    if memory_mb:
        (leaf / "memory.max").write_text(str(memory_mb * 1024 * 1024))
        (leaf / "memory.swap.max").write_text("0")
    (leaf / "pids.max").write_text(str(NPROC))
    (leaf / "cgroup.procs").write_text(str(pid))
    return leaf


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
