"""The frames between a worker and its executors: what `read_frame` accepts, what it refuses
(as `ProtocolError`, never another exception, whatever the bytes), and `Outbox` batching what
one loop turn wrote into one frame, split only when a frame would pass the limit."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from yoke.actors import ActorSettings
from yoke.actors.executor.protocol import FRAME_ITEMS, Outbox, ProtocolError, frame, read_frame


def reader_of(data: bytes) -> asyncio.StreamReader:
    r = asyncio.StreamReader()
    r.feed_data(data)
    r.feed_eof()
    return r


async def test_a_frame_reads_back() -> None:
    msg = {"t": "io", "run": [[1, "a", "x", [1, 2, "s", {"é": "ü"}, "", 1, 0.5], 0, None]]}
    assert await read_frame(reader_of(frame(msg) + frame({"t": "x"})), 1024) == msg


@pytest.mark.parametrize(
    ("data", "why"),
    [
        ((2**31).to_bytes(4, "big"), "over the limit"),
        ((5).to_bytes(4, "big") + b"ab", "middle of a frame"),
        ((3).to_bytes(4, "big") + b"{x}", "not JSON"),
        ((2).to_bytes(4, "big") + b"[]", "not a tagged object"),
        ((8).to_bytes(4, "big") + b'{"t": 1}', "not a tagged object"),
        ((4).to_bytes(4, "big") + b"\xff\xfe\xfd\xfc", "not JSON"),
        ((2002).to_bytes(4, "big") + b"[" * 1001 + b"]" * 1001, "not JSON"),
    ],
)
async def test_bad_frames_are_protocol_errors(data: bytes, why: str) -> None:
    with pytest.raises(ProtocolError, match=why):
        await read_frame(reader_of(data), 1 << 20)


async def test_eof_between_frames_is_a_clean_end() -> None:
    with pytest.raises(asyncio.IncompleteReadError):
        await read_frame(reader_of(b""), 1024)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_no_bytes_raise_anything_else(data: bytes) -> None:
    async def one() -> None:
        try:
            got = await read_frame(reader_of(data), 32)
        except (ProtocolError, asyncio.IncompleteReadError):
            return
        assert isinstance(got, dict) and isinstance(got["t"], str)

    asyncio.run(one())


class _Sink:
    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data

    def is_closing(self) -> bool:
        return False


async def _frames(data: bytes) -> list[dict[str, object]]:
    r, out = reader_of(data), []
    while True:
        try:
            out.append(await read_frame(r, None))
        except asyncio.IncompleteReadError:
            return out


async def test_what_one_turn_writes_is_one_frame_of_at_most_frame_items() -> None:
    sink = _Sink()
    box = Outbox(sink)  # type: ignore[arg-type]
    box.add("call", [1, 1, "emit", ["s", {}]])
    for n in range(10):
        box.add("done", [n, None])
    await asyncio.sleep(0)  # the turn ends: one flush
    (got,) = await _frames(sink.data)
    assert got["done"] == [[n, None] for n in range(10)] and len(got["call"]) == 1  # type: ignore[arg-type]
    sink.data = b""
    for n in range(FRAME_ITEMS + 5):  # more than a frame's worth: the first ones leave at once
        box.add("done", [n, None])
    early = await _frames(sink.data)
    assert [len(f["done"]) for f in early] == [FRAME_ITEMS]  # type: ignore[arg-type]
    await asyncio.sleep(0)
    (rest,) = (await _frames(sink.data))[1:]
    assert rest["done"] == [[n, None] for n in range(FRAME_ITEMS, FRAME_ITEMS + 5)]
    assert box.frames == 3


async def test_a_default_workers_turn_of_calls_is_one_frame() -> None:
    """The calls a worker starts in one turn at its default concurrency leave as one frame, so
    their `done`s come back together and the drain completes them in one batch (split in
    two, PostgreSQL committed about twice as many completion batches: docs/BENCHMARKS.md)."""
    sink = _Sink()
    box = Outbox(sink)  # type: ignore[arg-type]
    for n in range(ActorSettings().concurrency):
        box.add("run", [n])
    await asyncio.sleep(0)
    (got,) = await _frames(sink.data)
    assert len(got["run"]) == ActorSettings().concurrency  # type: ignore[arg-type]


async def test_a_frame_over_the_limit_is_split_never_an_item() -> None:
    sink = _Sink()
    box = Outbox(sink, limit=1000)  # type: ignore[arg-type]
    items = [[n, "x" * 100] for n in range(FRAME_ITEMS - 1)]
    for item in items:
        box.add("done", item)
    box.add("done", [99, "y" * 3000])  # one item over the limit goes alone
    box.flush()
    frames = await _frames(sink.data)
    assert len(frames) > 3
    got = [item for f in frames for item in f["done"]]  # type: ignore[attr-defined]
    assert got == [*items, [99, "y" * 3000]]
    assert all(len(json.dumps(f)) <= 1000 for f in frames if len(f["done"]) > 1)  # type: ignore[arg-type]
