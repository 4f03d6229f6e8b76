"""The namespace tier: every executor inside bubblewrap (`bwrap`), found and checked at start.

An executor in this tier has a network namespace of its own with only a loopback (its
socketpair to the worker, passed as an open descriptor, is its only way out: neither the
database's port nor an abstract unix socket of the host is reachable), a pid namespace of its
own (it sees only its own processes, cannot signal the worker, and when the namespace's first
process ends the kernel kills every process left in it, `setsid` or not), a mount namespace
with the host's root read-only, a private /tmp and /run (the host's unix sockets, such as
PostgreSQL's in /run/postgresql, are not there), its own /proc, and its working directory as
the only place it can write. bwrap runs with `--die-with-parent` (the whole namespace ends with
the worker) and `--new-session`, and no process in it may gain privileges.

Two ways to run it, chosen by who the worker is:

* as root, bwrap runs privileged, with no user namespace: a user namespace made by root maps
  the sandbox to uid 0 outside, which still reads root's files. The executor starts as root
  holding only CAP_SETUID and CAP_SETGID, runs nothing but yoke's own bootstrap, and takes its
  tenant's uid (`child.bind`) before the tenant's app is imported; from then it holds no
  capability. So a warm spare, started before its tenant is known, still gets the tenant's
  uid. Directories another user cannot enter on the way to the interpreter or the import path
  (a venv under root's 0700 home) are masked with an empty tmpfs and only the paths the
  executor needs are mounted back, read-only: the tenant's uid can run Python, and sees no
  other file of that directory. As root this tier is only used with a uid per tenant.
* as any other user, bwrap makes a user namespace (where the kernel allows unprivileged ones:
  `/proc/sys/user/max_user_namespaces`, Debian's `unprivileged_userns_clone`) and forbids any
  further one in it (`--disable-userns`).

The worker ends a sandbox by SIGKILLing bubblewrap itself (`spawned.Spawned.kill_tree`): with
`--die-with-parent` its child, the namespace's first process, gets SIGKILL when it dies, even
if a tenant of the same uid has stopped it under ptrace, and the kernel then kills every
process of the namespace; so the worker needs no pid from inside (`--info-fd`).

The check at start runs the exact command line once with a small probe (pid 2 in its own
namespace, loopback only, no new privileges, the host's sockets hidden, the tenant uid taken
and yoke importable under it); if any step fails, the tier is off and the reason reported.
bwrap is never given a secret on its command line (its /proc/1/cmdline is readable inside);
the executor's environment, scrubbed by the launcher, is passed through.

What this does not stop: a kernel exploit (the sandbox shares the host's kernel; that needs a
VM), reading world-readable files of the host (the root is mounted read-only, not hidden), CPU
and memory use (the rlimits and the cgroup tier do that). This module decides and probes; it
starts no executor.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

MIN_VERSION = (0, 8, 0)  # --disable-userns
HIDDEN = ("/tmp", "/run")  # a private tmpfs each: the host's unix sockets live there
_PROBE_TIMEOUT = 10.0

# Run inside the sandbox by the probe: what it must see, printed as one JSON line.
_PROBE = """
import json, os, socket, sys
uid = int(sys.argv[1])
if uid >= 0:
    os.setgroups([]); os.setgid(uid); os.setuid(uid)
import yoke.executor
status = dict(l.split(':', 1) for l in open('/proc/self/status') if ':' in l)
print(json.dumps({
    'pid': os.getpid(),
    'uid': os.getuid(),
    'nics': [n for _, n in socket.if_nameindex()],
    'nnp': status['NoNewPrivs'].strip(),
    'caps': status['CapEff'].strip(),
    'procs': sorted(p for p in os.listdir('/proc') if p.isdigit()),
    'run': os.listdir('/run'),
}))
"""


@dataclass(frozen=True, kw_only=True, slots=True)
class Namespaces:
    """How this worker runs bwrap: the same for every executor."""

    bwrap: str
    privileged: bool  # the worker is root: no user namespace, the executor takes its uid itself
    masks: tuple[str, ...]  # directories hidden under an empty tmpfs
    reads: tuple[str, ...]  # paths mounted back read-only (under a mask or a hidden directory)

    def command(self, python: str, *, writable: Path) -> list[str]:
        """bwrap's command line for one executor whose only writable directory is `writable`.
        Paths only: no secret ever goes here."""
        argv = [self.bwrap]
        if not self.privileged:
            argv += ["--unshare-user", "--disable-userns"]
        argv += [
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--ro-bind", "/", "/",
            "--proc", "/proc",
            "--dev", "/dev",
        ]  # fmt: skip
        for hidden in HIDDEN:
            argv += ["--tmpfs", hidden]
        made: set[str] = set()
        for mask in self.masks:
            argv += [*self._way_to(mask, made), "--tmpfs", mask]
        for path in self.reads:
            argv += [*self._way_to(path, made), "--ro-bind", path, path]
        # Its parents can be walked through, not listed, as on the host (`spawned.prepared`).
        way = self._way_to(str(writable), made, mode="0711")
        argv += [*way, "--bind", str(writable), str(writable)]
        argv += ["--chdir", "/"]
        argv += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        if self.privileged:  # to take the tenant's uid; gone with that change
            argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        return [*argv, "--", python, "-I", "-m", "yoke.executor"]

    def _way_to(self, path: str, made: set[str], *, mode: str = "0755") -> list[str]:
        """The directories between the tmpfs that covers `path` and `path`, made with `mode`
        (bwrap would make them 0700: a tenant uid could not walk through to the mount)."""
        covers = [c for c in (*self.masks, *HIDDEN) if _within(path, c) and c != path]
        if not covers:
            return []
        top = Path(max(covers, key=len))
        out: list[str] = []
        for part in reversed(Path(path).parents):
            if part == top or not _within(str(part), str(top)) or str(part) in made:
                continue
            made.add(str(part))
            out += ["--perms", mode, "--dir", str(part)]
        return out


def find(
    *,
    setting: str,
    python: str,
    needed: list[str],
    writable: Path,
    uid: int | None,
    uid_note: str = "",
) -> tuple[Namespaces | None, str]:
    """The tier and why (`setting`: `auto`, `on` or `off`; `needed`: every path an executor
    reads: the interpreter, its home, the import path; `uid`: a tenant uid to probe as root,
    None when that tier is off, as `uid_note` says)."""
    if setting == "off":
        return None, "off (YOKE_EXECUTOR_NAMESPACES=off)"
    bwrap = shutil.which("bwrap") or ""
    if not bwrap:
        return None, "off (bwrap is not installed: Debian's package bubblewrap)"
    root = os.geteuid() == 0
    problem = _unusable(bwrap, root=root)
    if problem is None and root and uid is None:
        problem = f"as root it needs a uid per tenant, which is {uid_note or 'off'}"
    if problem is not None:
        return None, f"off ({problem})"
    masks, reads = mounts(needed, root=root)
    ns = Namespaces(bwrap=bwrap, privileged=root, masks=masks, reads=reads)
    problem = probe(ns, python, writable=writable, uid=uid if root else None)
    if problem is not None:
        return None, f"off (the probe failed: {problem})"
    return ns, f"on ({bwrap}{', as root' if root else ', in a user namespace'})"


def mounts(needed: list[str], *, root: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The directories to mask (as root: those on the way to a needed path that another user
    cannot enter), and the needed paths to mount back (those below a mask or a hidden
    directory), outermost only."""
    # Each path as given and as resolved: a venv's python is a link out of the venv, whose
    # pyvenv.cfg must be there too.
    given = [p for p in needed if p and Path(p).exists()]
    paths = sorted({os.path.abspath(p) for p in given} | {str(Path(p).resolve()) for p in given})
    masks: set[str] = set()
    if root:
        for path in paths:
            blocked = _first_blocked(Path(path))
            if blocked is not None:
                masks.add(str(blocked))
    covered = [*masks, *HIDDEN]
    # A hidden directory itself is never mounted back (a worker run from /tmp has it on its
    # import path): its host sockets would be reachable again.
    reads = [
        p
        for p in paths
        if any(_within(p, c) for c in covered) and not any(_within(h, p) for h in HIDDEN)
    ]
    outer = [p for p in reads if not any(p != q and _within(p, q) for q in reads)]
    return tuple(sorted(m for m in masks if not any(m != n and _within(m, n) for n in masks))), (
        tuple(outer)
    )


def _first_blocked(path: Path) -> Path | None:
    """The outermost parent directory of `path` that another user cannot enter."""
    for part in reversed(path.parents):
        if part == Path("/"):
            continue
        if not part.stat().st_mode & stat.S_IXOTH:
            return part
    return None


def _within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _unusable(bwrap: str, *, root: bool) -> str | None:
    """Why this bwrap cannot be used here, or None."""
    info = os.stat(bwrap)
    if info.st_mode & stat.S_ISUID:
        return f"{bwrap} is setuid root, which this tier does not use"
    try:
        out = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, timeout=_PROBE_TIMEOUT
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{bwrap} --version failed: {exc}"
    found = re.search(r"(\d+)\.(\d+)\.(\d+)", out)
    version = tuple(int(x) for x in found.groups()) if found else (0, 0, 0)
    if version < MIN_VERSION:
        wanted = ".".join(map(str, MIN_VERSION))
        return f"bubblewrap {'.'.join(map(str, version))} is older than {wanted}"
    if root:
        return None
    if _read_int("/proc/sys/user/max_user_namespaces", 1) < 1:
        return "the kernel allows no user namespaces (/proc/sys/user/max_user_namespaces is 0)"
    if _read_int("/proc/sys/kernel/unprivileged_userns_clone", 1) != 1:
        return "the kernel allows no unprivileged user namespaces (unprivileged_userns_clone)"
    if _read_int("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", 0) == 1:
        return "AppArmor restricts unprivileged user namespaces here"
    return None


def _read_int(path: str, default: int) -> int:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return default


def probe(ns: Namespaces, python: str, *, writable: Path, uid: int | None) -> str | None:
    """Run the tier's command line once with a probe instead of the executor; what is wrong,
    or None."""
    writable.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=writable) as scratch:
        os.chmod(scratch, 0o755)
        argv = ns.command(python, writable=Path(scratch))
        argv = [
            *argv[: argv.index("--") + 1],
            python,
            "-I",
            "-c",
            _PROBE,
            str(-1 if uid is None else uid),
        ]
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=_PROBE_TIMEOUT,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return f"{type(exc).__name__}: {exc}"
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return f"exit {done.returncode}: {lines[-1] if lines else 'no output'}"
    try:
        seen = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"unreadable output {done.stdout[-200:]!r}"
    wrong = []
    if seen["pid"] != 2 or seen["procs"] != ["1", "2"]:
        wrong.append(f"not alone in a pid namespace (pid {seen['pid']}, /proc {seen['procs']})")
    if seen["nics"] != ["lo"]:
        wrong.append(f"network interfaces {seen['nics']}")
    if seen["nnp"] != "1":
        wrong.append("new privileges allowed")
    if int(seen["caps"], 16) != 0:
        wrong.append(f"capabilities {seen['caps']}")
    if seen["run"]:
        wrong.append(f"/run shows {seen['run'][:3]}")
    if uid is not None and seen["uid"] != uid:
        wrong.append(f"uid {seen['uid']}, not {uid}")
    return "; ".join(wrong) or None
