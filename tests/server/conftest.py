"""Fixtures of the server tests: an in-process server (lifespan entered) and httpx clients.

`serve` builds a `Server` over a fresh SQLite database with a small app of test workflows and
five tokens: an ADMIN, an OPERATOR, two plain tenants (acme, globex) and a METRICS scraper.
Clients talk to it in process through `httpx.ASGITransport`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

import yoke
from tests.actors.conftest import truncate_actor_tables
from yoke.actors import ActorCtx, ActorSettings, Event
from yoke.executions import Limits, Principal
from yoke.server import Server, TokenBook

TOKENS = {
    "admin": ("t-admin", Principal("root", roles=["ADMIN"], tenant=None)),
    "operator": ("t-operator", Principal("ops", roles=["OPERATOR"], tenant=None)),
    "acme": ("t-acme", Principal("acme-ci", tenant="acme")),
    "globex": ("t-globex", Principal("globex-ci", tenant="globex")),
    "scraper": ("t-scraper", Principal("prometheus", roles=["METRICS"], tenant=None)),
}

# acme may ask priorities up to 9; globex has the default of a plain token (0).
MAX_PRIORITY = {"acme": 9}
TOKENS_TOML = "\n".join(
    f'[[tokens]]\ntoken = "{t}"\nprincipal = "{p.name}"\n'
    + (f'tenant = "{p.tenant}"\n' if p.tenant else "")
    + f"roles = {sorted(p.roles)!r}\n".replace("'", '"')
    + (f"max_priority = {MAX_PRIORITY[who]}\n" if who in MAX_PRIORITY else "")
    for who, (t, p) in TOKENS.items()
)


def make_app(database_url: str, limits: Limits | None = None) -> yoke.App:
    app = yoke.App(database_url, limits=limits)
    gate = asyncio.Event()

    @app.workflow()
    async def echo(ctx: yoke.Context, input: Any) -> Any:
        return input

    @app.workflow()
    async def hold(ctx: yoke.Context, input: Any) -> Any:
        # Runs until the test releases it (or it is cancelled): a slot that stays taken.
        await gate.wait()
        return "released"

    @app.workflow()
    async def steps(ctx: yoke.Context, input: Any) -> Any:
        a = await ctx.step("a", lambda: 1)
        b = await ctx.child("echo", {"x": a})
        if isinstance(input, dict) and input.get("fail"):
            raise RuntimeError("asked to fail")
        return {"a": a, "b": b}

    @app.workflow()
    async def waiter(ctx: yoke.Context, input: Any) -> Any:
        return await ctx.wait_for("go", timeout=60)  # WAITING: holds no slot

    @app.workflow()
    async def sleeper(ctx: yoke.Context, input: Any) -> Any:
        await ctx.sleep(60)  # WAITING until its wake-up: holds no slot
        return "woke"

    app.gate = gate  # type: ignore[attr-defined]
    return app


Client = Callable[[str], httpx.AsyncClient]


@asynccontextmanager
async def running(server: Server) -> AsyncIterator[Client]:
    clients: list[httpx.AsyncClient] = []

    def client(who: str) -> httpx.AsyncClient:
        # Raw bodies in these tests are JSON (or meant to be): declared so, as a client must.
        headers = {"Content-Type": "application/json"}
        if who in TOKENS:
            headers["Authorization"] = f"Bearer {TOKENS[who][0]}"
        c = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=server), base_url="http://localhost", headers=headers
        )
        clients.append(c)
        return c

    async with server.lifespan():
        try:
            yield client
        finally:
            app = server.app
            app.gate.set()  # type: ignore[attr-defined]
            for c in clients:
                await c.aclose()


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/yoke.db"


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.toml"
    path.write_text(TOKENS_TOML)
    return path


Serve = Callable[..., Awaitable[tuple[Server, Client]]]


@pytest.fixture
async def serve(db_url: str, tokens_file: Path) -> AsyncIterator[Serve]:
    """`server, client = await serve(limits=...)`; the lifespan is left at the end."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(
            limits: Limits | None = None, *, tokens: bool = True, retention: float = 3600.0
        ) -> tuple[Server, Client]:
            book = TokenBook.from_file(tokens_file) if tokens else None
            server = Server(make_app(db_url, limits), tokens=book, retention=retention)
            return server, await stack.enter_async_context(running(server))

        yield start


# -- the actor app of the actor route tests ---------------------------------------------
WORKER = "test-worker"
STALE_AFTER = 60.0

Start = Serve


def actor_app(database_url: str, *, worker: bool) -> yoke.App:
    app = yoke.App(
        database_url,
        actor_settings=ActorSettings(
            worker_id=WORKER, stale_after=STALE_AFTER, shutdown_timeout=5.0
        ),
        actor_worker=worker,
    )
    gate = asyncio.Event()  # `slow` holds its events until the test (or teardown) sets it
    app.gate = gate  # type: ignore[attr-defined]

    @app.actor(subscribe=["carts"], key="cart_id", queue=yoke.Queue(concurrency=2, group_by="line"))
    async def cart(ctx: ActorCtx, event: Event) -> None:
        await ctx.state.update(lambda s: {**s, "items": s.get("items", 0) + 1})

    @app.actor(
        subscribe=["carts"], key="cart_id", backoff=yoke.Backoff(initial=0.001, max_attempts=2)
    )
    async def audit(ctx: ActorCtx, event: Event) -> None:
        if event.data.get("bad"):
            raise RuntimeError("refused")

    @app.actor(subscribe=["slow"], key="k")
    async def slow(ctx: ActorCtx, event: Event) -> None:
        await gate.wait()

    return app


@pytest.fixture
async def start(database_url: str, tokens_file: Path) -> AsyncIterator[Start]:
    """`server, client = await start(worker=True)`: an actor app served in process."""
    if database_url.startswith("postgres"):
        truncate_actor_tables(database_url)
    async with contextlib.AsyncExitStack() as stack:

        async def go(*, worker: bool = True) -> tuple[Server, Client]:
            server = Server(
                actor_app(database_url, worker=worker), tokens=TokenBook.from_file(tokens_file)
            )
            return server, await stack.enter_async_context(running(server))

        yield go
