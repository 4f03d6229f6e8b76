"""`python -I -m yoke.executor`: the bootstrap of one tenant's executor process.

Started by its worker (`yoke.actors.executor.process`), never by hand. Its first lines stamp
the monotonic clock (shared by every process of the host, so the worker can subtract), then
apply the limits the worker chose, before anything of the tenant's app is imported: umask 077,
no core dumps, the memory cap (RLIMIT_AS), the file and process caps, the parent-death signal
(SIGKILL when the worker's thread that started it ends: set here, after any change of uid,
which would clear it) and no-new-privileges. If the worker died before the signal was set, it
exits at once. Then it imports the executor runtime (`yoke.actors.executor.child`), which says
hello on the socket and, when told its tenant and app, becomes that tenant's executor (its
directory, and its uid when the worker gives one) and imports the app.

Without a pid namespace (`YOKE_EXECUTOR_REAPER=1`), this first process stays behind as the
executor's reaper: it makes itself the child subreaper (every process the executor starts
and leaves behind, `setsid` or not, becomes its child instead of init's), forks the executor,
and when the executor ends, or the worker asks (SIGTERM) or dies (its parent-death signal is
SIGTERM), it kills every process left below it, then exits as the executor did. It keeps the
worker's uid: a tenant given a uid of its own cannot signal it. In the namespace tier,
bubblewrap's first process in the pid namespace plays this part.

This module must import nothing but the standard library before the limits are applied.
"""

from __future__ import annotations

import time

_STARTED = time.monotonic()

import json  # noqa: E402  (after the first stamp, on purpose)
import os  # noqa: E402
import sys  # noqa: E402

_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_CHILD_SUBREAPER = 36
_EXIT_ORPHANED = 70


def apply_limits(limits: dict[str, int | None]) -> None:
    """The limits the worker chose (`actors.executor.sandbox.Isolation.limits`)."""
    import resource

    os.umask(0o077)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for name, which in (
        ("as", resource.RLIMIT_AS),
        ("nofile", resource.RLIMIT_NOFILE),
        ("nproc", resource.RLIMIT_NPROC),
    ):
        value = limits.get(name)
        if value is not None:
            _, hard = resource.getrlimit(which)
            cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (cap, cap))
    if sys.platform == "linux":
        import ctypes

        # SCHED_BATCH: a wake-up of the executor (a frame from its worker) does not preempt
        # the worker on its CPU; both run, and a burst of tenant code never takes the CPU
        # from under the worker's drain.
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def arm_parent_death(parent: int, signum: int = 9) -> None:
    """`signum` (SIGKILL) when the parent dies; exit now if it is gone already (nobody to
    serve). Set after any change of uid, which clears it."""
    if sys.platform == "linux":
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
    if parent and os.getppid() != parent:
        os._exit(_EXIT_ORPHANED)


def reap(executor: int) -> None:
    """The reaper's life: wait for every child (the executor, and the orphans handed to it);
    when the executor ends, or on SIGTERM, kill everything below and exit as the executor did.
    Never returns."""
    import signal

    def stop(signum: int, frame: object) -> None:
        kill_below()
        os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, stop)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(0)
        if pid == executor:
            kill_below()
            code = os.waitstatus_to_exitcode(status)
            if code < 0:  # killed by a signal: die of the same one, so the worker sees it
                signal.signal(-code, signal.SIG_DFL)
                os.kill(os.getpid(), -code)
            os._exit(code & 0xFF)


def kill_below() -> None:
    """SIGKILL the reaper's children until none is left: each one killed hands its own
    children to the reaper, which kills them in the next round."""
    me = os.getpid()
    while True:
        try:
            with open(f"/proc/{me}/task/{me}/children") as f:
                children = [int(c) for c in f.read().split()]
        except OSError:
            children = []
        if not children:
            while True:  # reap what is left
                try:
                    if os.waitpid(-1, os.WNOHANG)[0] == 0:
                        return
                except ChildProcessError:
                    return
        for child in children:
            try:
                os.kill(child, 9)
            except ProcessLookupError:
                continue
        for _ in children:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break


def main() -> None:
    env = os.environ
    limits = json.loads(env.pop("YOKE_EXECUTOR_LIMITS", "{}"))
    parent = int(env.pop("YOKE_EXECUTOR_PARENT", "0"))
    apply_limits(limits)
    if env.pop("YOKE_EXECUTOR_REAPER", "") == "1" and sys.platform == "linux":
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        arm_parent_death(parent, signum=15)  # SIGTERM: the reaper kills its tree first
        executor = os.fork()
        if executor:
            reap(executor)
        parent = os.getppid()  # the reaper
    arm_parent_death(parent)
    stamps = {"start": _STARTED, "sandbox": time.monotonic()}
    from yoke.actors.executor.child import run

    run(stamps, lambda: arm_parent_death(parent))


if __name__ == "__main__":
    main()
