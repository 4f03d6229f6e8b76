"""`yoke.testing`: what a user needs to test with yoke's actors, or to test a store of their own.

- `MemoryActorStore` (`memstore.py`): the in-memory `ActorStore`, the reference semantics of
  the actor verbs as plain Python, for unit tests of actors and of the drain without a database.
- `conformance` (`conformance.py`): the actor store's conformance suite (`CHECKS`,
  `check_store`), run by yoke against the in-memory store, SQLite and PostgreSQL alike.

This package must never name a concrete backend and is never imported by yoke itself.
"""

from __future__ import annotations

from yoke.testing.conformance import CHECKS, check_store
from yoke.testing.memstore import MemoryActorStore

__all__ = ["CHECKS", "MemoryActorStore", "check_store"]
