"""`python -I -m yoke.executor`: the bootstrap of one tenant's executor process.

Started by its worker (`yoke.actors.executor.process`), never by hand. Its first lines stamp
the monotonic clock (shared by every process of the host, so the worker can subtract), then
apply the limits the worker chose, before anything of the tenant's app is imported: umask 077,
no core dumps, the memory cap (RLIMIT_AS), the file and process caps, the parent-death signal
(SIGKILL when the worker's thread that started it ends: set here, after any change of uid,
which would clear it) and no-new-privileges. If the worker died before the signal was set, it
exits at once. Then it imports the executor runtime (`yoke.actors.executor.child`), which says
hello on the socket and, when told its tenant and app, becomes that tenant's executor (its
directory, and its uid if it was started unbound as a warm spare) and imports the app.

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


def arm_parent_death(parent: int) -> None:
    """SIGKILL when the worker dies; exit now if it is gone already (nobody to serve). Set
    after any change of uid, which clears it."""
    if sys.platform == "linux":
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if parent and os.getppid() != parent:
        os._exit(_EXIT_ORPHANED)


def main() -> None:
    env = os.environ
    limits = json.loads(env.pop("YOKE_EXECUTOR_LIMITS", "{}"))
    parent = int(env.pop("YOKE_EXECUTOR_PARENT", "0"))
    apply_limits(limits)
    arm_parent_death(parent)
    stamps = {"start": _STARTED, "sandbox": time.monotonic()}
    from yoke.actors.executor.child import run

    run(stamps, arm_parent_death)


if __name__ == "__main__":
    main()
