"""The yoke HTTP server: the v1 API (README, docs/ARCHITECTURE.md) over ASGI, with tokens, roles
and metrics.

`Server(app, tokens=...)` (or `Server.from_env(app)`) is an ASGI app serving one `yoke.App`;
`serve.run` runs it on uvicorn (what `yoke serve` calls). This package imports the app, the
executions service and the store protocol, never a concrete store backend.
"""

from __future__ import annotations

from yoke.server.asgi import Server
from yoke.server.auth import LOCAL_ADMIN, TokenBook
from yoke.server.idempotency import AnswerStore, MemoryAnswers, StoreAnswers, StoredAnswer

__all__ = [
    "LOCAL_ADMIN",
    "AnswerStore",
    "MemoryAnswers",
    "Server",
    "StoreAnswers",
    "StoredAnswer",
    "TokenBook",
]
