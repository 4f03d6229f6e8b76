"""An event that kills its worker is a dead letter after 3 charged crashes, not a loop that
takes every worker down in turn: whoever recovers the worker's rows (here its next life)
makes them suspects, a suspect runs alone with its row marked, and the one marked when the
worker died is charged. Events that were in flight beside it, or only claimed, are never
charged and all run. Inline, and in executors without namespaces (weak isolation accepted:
the tenant finds its worker in /proc and kills it); in namespaces the same event cannot reach
the worker at all. A real worker process, restarted by the test each time it is killed: the
poison kills it four times (the first death marks no one), so a run takes ~10 s."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.actors import hostile_app
from tests.actors.conftest import open_actor_store
from tests.actors.executors import require_bwrap, runtime, state, until
from yoke.actors import ActorRuntime
from yoke.actors.protocol import ActorStore

ROOT = Path(__file__).resolve().parents[2]
INNOCENTS = 12


async def start(url: str, mode: str, namespaces: str) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.actors.poison_worker", url, "w", mode, namespaces,
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None
    assert (await asyncio.wait_for(proc.stdout.readline(), 60)).startswith(b"ready")
    return proc


@asynccontextmanager
async def appender(url: str) -> AsyncIterator[tuple[ActorRuntime, ActorStore]]:
    backend = open_actor_store(url)
    await backend.open()
    try:
        rt = runtime("appender", app_spec=hostile_app.SPEC, registry=hostile_app.registry)
        rt.attach(backend.actors)
        yield rt, backend.actors
    finally:
        await backend.close()


async def done(store: ActorStore) -> list[int]:
    return sorted((await state(store, "acme", "poison", "i")).get("done", []))


@pytest.mark.parametrize(
    ("mode", "namespaces"), [("inline", "off"), ("process", "off")], ids=["inline", "process"]
)
async def test_an_event_that_kills_its_worker_is_dead_lettered_after_3_charges(
    tmp_path: Path, mode: str, namespaces: str
) -> None:
    url = f"sqlite:///{tmp_path}/yoke.db"
    proc = await start(url, mode, namespaces)
    deaths = 0
    try:
        async with appender(url) as (rt, store):
            # One instance, eight groups running at once: the poison among innocents in flight.
            events = [{"k": "i", "g": n % 8, "n": n, "sleep": 0.3} for n in range(INNOCENTS)]
            events.insert(3, {"k": "i", "g": 3, "n": 99, "kill": True, "sleep": 0.2})
            await rt.append_many("poison", events, tenant="acme")

            async def settled() -> bool:
                view = await rt.instance("poison", "i", tenant="acme")
                return view.dead == 1 and view.pending + view.in_flight == 0

            while not await settled():
                if proc.returncode is not None or await _exited(proc):
                    deaths += 1
                    assert deaths <= 4, "the poison was not dead-lettered after 3 charges"
                    proc = await start(url, mode, namespaces)
            view = await rt.instance("poison", "i", tenant="acme")
            ran = await done(store)
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
    (dead,) = view.dead_letters
    assert dead.crash_attempts == 3 and "its worker died" in (dead.error or "")
    assert deaths == 4  # the first death marked no one; each of the next three charged it
    assert set(ran) == set(range(INNOCENTS))  # every innocent ran (some again), none charged


async def _exited(proc: asyncio.subprocess.Process) -> bool:
    try:
        await asyncio.wait_for(asyncio.shield(proc.wait()), 0.1)
    except TimeoutError:
        return False
    return True


async def test_in_namespaces_the_same_event_cannot_reach_its_worker(tmp_path: Path) -> None:
    require_bwrap()
    url = f"sqlite:///{tmp_path}/yoke.db"
    proc = await start(url, "process", "on")
    try:
        async with appender(url) as (rt, store):
            await rt.append("poison", {"k": "i", "g": 0, "n": 99, "kill": True}, tenant="acme")
            await rt.append("poison", {"k": "i", "g": 0, "n": 1}, tenant="acme")

            async def ran() -> bool:
                return await done(store) == [1]

            await until(ran)
            seen = await state(store, "acme", "poison", "i")
            assert proc.returncode is None  # the worker lives
    finally:
        proc.terminate()
        await proc.wait()
    assert seen["survived:99"] is None  # it found no worker to kill
