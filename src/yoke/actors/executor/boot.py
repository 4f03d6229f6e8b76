"""How an executor process is started and handed its tenant, apart from its life afterwards.

It owns `Launch` (the same for every tenant of a worker), the boot handshake (the executor's
hello, then `init` with its tenant and app, then its ready) and the phases of a boot, computed
from the executor's stamps on the monotonic clock minus the worker's own. `ExecutorProcess`
(`process.py`) runs these steps under its boot deadline and turns any failure into FAILED;
this module keeps no state of its own and never touches the store.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yoke.actors.executor import sandbox
from yoke.actors.executor.protocol import PROTOCOL, frame, read_frame

PHASES = (
    "queue",
    "spawn",
    "interpreter",
    "sandbox",
    "runtime",
    "app",
    "handshake",
    "first_dispatch",
)


class BootFailed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, kw_only=True, slots=True)
class Launch:
    """How this worker starts its executors (the same for every tenant)."""

    python: str
    app: str  # module:attribute
    preload: tuple[str, ...]  # yoke's modules the app imports: a spare imports them unbound
    path: tuple[str, ...]  # the worker's import path, given to the executor
    env: tuple[tuple[str, str], ...]  # the variables an executor sees (no credentials)
    directory: Path  # parent of the tenants' working directories
    isolation: sandbox.Isolation
    max_frame: int
    boot_timeout: float
    dispatch_timeout: float


async def read_hello(reader: asyncio.StreamReader, max_frame: int) -> dict[str, Any]:
    hello = await read_frame(reader, max_frame)
    if hello.get("t") != "hello" or hello.get("v") != PROTOCOL:
        raise BootFailed(f"boot_error: protocol mismatch (got {hello.get('t')!r})")
    return hello


async def init(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    launch: Launch,
    tenant: str,
    directory: Path,
    uid: int | None,
) -> dict[str, Any]:
    """Tell the executor its tenant and app; returns its ready message (`BootFailed` if it
    failed or said anything else)."""
    message = {
        "t": "init",
        "v": PROTOCOL,
        "tenant": tenant,
        "app": launch.app,
        "path": list(launch.path),
        "max": launch.max_frame,
        "dir": str(directory),
        "uid": uid,
    }
    writer.write(frame(message))
    msg = await read_frame(reader, launch.max_frame)
    if msg.get("t") == "failed":
        raise BootFailed(f"boot_error: {str(msg.get('error', ''))[-4000:]}")
    if msg.get("t") != "ready":
        raise BootFailed(f"boot_error: expected ready, got {msg.get('t')!r}")
    return msg


def boot_phases(
    stamps: Any, ours: dict[str, float], received: float, *, upto: str
) -> dict[str, float]:
    """The phases of a boot from the executor's `stamps` and the worker's own (`ours`:
    `spawned`, and `returned` unless the boot is a bind): a cold boot's (`upto="ready"`), a
    spare's own (`"runtime"`: up to its hello), or a bound spare's (`"ready"` after a bind:
    the init and the app only, what the tenant waited)."""
    s = ours
    keys = ("start", "sandbox", "runtime") if upto == "runtime" else ("start", "sandbox",
            "runtime", "init", "app", "ready")  # fmt: skip
    try:
        c = {k: float(stamps[k]) for k in keys}
    except (TypeError, KeyError, ValueError):
        raise BootFailed(f"boot_error: {upto} without its stamps") from None
    if upto == "runtime":
        return {
            "spawn": s["returned"] - s["spawned"],
            "interpreter": c["start"] - s["returned"],
            "sandbox": c["sandbox"] - c["start"],
            "runtime": c["runtime"] - c["sandbox"],
        }
    if "returned" not in s:  # a bound spare: from the bind to its ready
        return {
            "app": c["app"] - c["init"],
            "handshake": (c["init"] - s["spawned"]) + (received - c["app"]),
        }
    return {
        "spawn": s["returned"] - s["spawned"],
        "interpreter": c["start"] - s["returned"],
        "sandbox": c["sandbox"] - c["start"],
        "runtime": c["runtime"] - c["sandbox"],
        "app": c["app"] - c["init"],
        "handshake": (c["init"] - c["runtime"]) + (received - c["app"]),
    }
