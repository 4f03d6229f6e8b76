"""The wire protocol between a worker and its executor processes: frames on a socketpair.

A frame is a 4-byte big-endian length, then one JSON object (UTF-8). JSON rather than a binary
codec: the executor boots faster (no codec to import) and the frames are batched, so the codec
is not what bounds the throughput. Nothing is ever unpickled: a frame can only be data.

The handshake frames have a tag `t`: the executor sends `hello` (its pid and the monotonic
stamps of its boot so far), the worker answers `init` (the tenant, the app to import and the
import path), the executor answers `ready` (more stamps) or `failed` (a traceback, if the app
cannot be imported). After that every frame is `{"t": "io", ...}` carrying lists, so that what
one side produced in one turn of its event loop travels as one frame (`Outbox`):

* worker -> executor: `run` ([call_id, actor, instance_id, event, version, state], state only
  when the executor's copy is older), `res` (answers to calls: [req_id, ok, value]),
  `forget` (instances whose cached state the executor may drop), `stop` (finish and exit).
* executor -> worker: `done` ([call_id, error]: error is None or [kind, text]) and `call`
  ([req_id, call_id, op, args]: `cas` a new state, `emit` an event, `schedule` a timer).

The executor reads the worker's frames without a size limit (the worker is trusted); the
worker refuses any frame of the executor over its limit, or that is not what the protocol
says, as a protocol error, and kills that executor. This module must stay light (the executor
imports it before the app) and never import the rest of yoke.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

PROTOCOL = 1
DEFAULT_MAX_FRAME = 16 * 1024 * 1024  # bytes: the worker's limit on an executor's frames
_HEADER = 4
# Items of one kind per frame, at most: a turn that makes more sends them in several frames,
# so the peer works on the first ones while the rest are made. As many as a worker runs at
# once by default (concurrency 64): at 32, each turn's calls were split, so their `done`s,
# so the drain's completion batches, and PostgreSQL committed about twice as many of them
# (`bench_executors --drain-only`, CPU per event going from 32 to 64: worker 185 -> 146 us,
# PostgreSQL 180 -> 155 us).
FRAME_ITEMS = 64
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class ProtocolError(Exception):
    """The peer sent something the protocol does not allow (or nothing: EOF mid-frame)."""


def frame(message: dict[str, Any]) -> bytes:
    body = _ENCODER.encode(message).encode()
    return len(body).to_bytes(_HEADER, "big") + body


async def read_frame(reader: asyncio.StreamReader, max_bytes: int | None) -> dict[str, Any]:
    """The next frame; `asyncio.IncompleteReadError` at a clean EOF between frames."""
    header = await reader.readexactly(_HEADER)
    size = int.from_bytes(header, "big")
    if max_bytes is not None and size > max_bytes:
        raise ProtocolError(f"a frame of {size} bytes is over the limit of {max_bytes}")
    try:
        body = await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        raise ProtocolError("the peer closed the socket in the middle of a frame") from None
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        raise ProtocolError("a frame that is not JSON") from None
    if not isinstance(message, dict) or not isinstance(message.get("t"), str):
        raise ProtocolError("a frame that is not a tagged object")
    return message


class Outbox:
    """What one side writes in one turn of its event loop, sent as one `io` frame (or as a few:
    at most `FRAME_ITEMS` items of a kind each, and each within `limit` bytes when one would be
    larger; a single item is never split)."""

    __slots__ = ("_limit", "_loop", "_parts", "_scheduled", "_writer", "frames")

    def __init__(self, writer: asyncio.StreamWriter, *, limit: int | None = None) -> None:
        self._writer = writer
        self._limit = limit
        self._loop = asyncio.get_running_loop()
        self._parts: dict[str, list[Any]] = {}
        self._scheduled = False
        self.frames = 0

    def add(self, kind: str, item: Any) -> None:
        part = self._parts.get(kind)
        if part is None:
            self._parts[kind] = [item]
        else:
            part.append(item)
            if len(part) >= FRAME_ITEMS:
                self.flush()  # the peer starts on these while the rest are made
                return
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        parts, self._parts = self._parts, {}
        self._scheduled = False
        if parts and not self._writer.is_closing():
            self._write(parts)

    def _write(self, parts: dict[str, list[Any]]) -> None:
        data = frame({"t": "io", **parts})
        if self._limit is not None and len(data) > self._limit:
            items = [(kind, item) for kind, part in parts.items() for item in part]
            if len(items) > 1:
                half = len(items) // 2
                for chunk in (items[:half], items[half:]):
                    split: dict[str, list[Any]] = {}
                    for kind, item in chunk:
                        split.setdefault(kind, []).append(item)
                    self._write(split)
                return
        self.frames += 1
        self._writer.write(data)
