"""The actor store's conformance suite (`yoke.testing.conformance`) on every `ActorStore`: the
in-memory reference store, SQLite and PostgreSQL (`actor_store` fixture), one test per check;
and `check_store` as a user runs it, on the in-memory store."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from yoke.actors.protocol import ActorStore
from yoke.testing import CHECKS, MemoryActorStore, check_store
from yoke.testing.conformance import Check


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
async def test_the_store_conforms(actor_store: ActorStore, check: Check) -> None:
    await check(actor_store)


async def test_a_user_runs_the_whole_suite_against_a_store_of_their_own() -> None:
    made = 0

    @contextlib.asynccontextmanager
    async def fresh() -> AsyncIterator[ActorStore]:
        nonlocal made
        made += 1
        yield MemoryActorStore()

    await check_store(fresh)
    assert made == len(CHECKS)  # each check on an empty store of its own


async def test_a_departure_from_the_contract_names_its_check() -> None:
    class Forgetful(MemoryActorStore):
        async def dead_letters(self, ref, *, limit=100):  # type: ignore[no-untyped-def]
            return []

    @contextlib.asynccontextmanager
    async def fresh() -> AsyncIterator[ActorStore]:
        yield Forgetful()

    with pytest.raises(AssertionError, match="check_requeue_keeps_the_row"):
        await check_store(fresh)
