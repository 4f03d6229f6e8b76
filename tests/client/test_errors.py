"""Problem JSON becomes yoke's exceptions: every error class of `yoke.errors` (and the server's
own request checks) round-trips from the server's own answer to the class it names, with what
it carries; and against a real `yoke serve` on SQLite and PostgreSQL each error a caller meets
is raised as its class (`NotFound`, `Unauthorized`, `Forbidden`, `Vetoed`, `LimitExceeded`
with `retry_after`, `Conflict`, `IdempotencyConflict`, `BadValue`, `InvalidArgument`,
`NotLeader` from an HA standby, `ServerUnreachable`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

import yoke.errors as errors
from tests.server.conftest import TOKENS
from tests.server.e2e import free_port
from yoke.client import ApiError, Client, Retries, ServerUnreachable
from yoke.client.problems import error_of
from yoke.errors import (
    BadValue,
    Conflict,
    Forbidden,
    IdempotencyConflict,
    InvalidArgument,
    LimitExceeded,
    NotFound,
    NotLeader,
    ShuttingDown,
    Unauthorized,
    Vetoed,
    YokeError,
)
from yoke.executions import Limits
from yoke.server.problems import from_yoke_error, problem

Make = Callable[[str], Client]


def every_error() -> list[YokeError]:
    """One of each class of `yoke.errors`, built as the code that raises it does."""
    made: list[YokeError] = []
    for cls in vars(errors).values():
        if not (isinstance(cls, type) and issubclass(cls, YokeError)):
            continue
        if issubclass(cls, LimitExceeded):  # RateLimited too
            made.append(cls("full", retry_after=2.5))
        elif cls is NotLeader:
            made.append(NotLeader("a standby", leader="host-1"))
        elif cls is Vetoed:
            made.append(Vetoed("13 is unlucky"))
        else:
            made.append(cls(f"a {cls.__name__}"))
    return made


@pytest.mark.parametrize("exc", every_error(), ids=lambda e: type(e).__name__)
def test_the_servers_answer_to_each_error_comes_back_as_its_class(exc: YokeError) -> None:
    answer = from_yoke_error(exc, "/v1/x")  # what the server sends for it
    headers = {k.lower(): v for k, v in answer.headers.items()}
    back = error_of(answer.status_code, headers, bytes(answer.body))
    assert type(back) is type(exc)
    assert str(back) == str(exc)
    assert back.problem is not None and back.problem["type"] == exc.problem_type
    if isinstance(exc, LimitExceeded):
        assert isinstance(back, LimitExceeded) and back.retry_after == 2.5
    if isinstance(exc, NotLeader):
        assert isinstance(back, NotLeader) and back.leader == "host-1"
    if isinstance(exc, Vetoed):
        assert isinstance(back, Vetoed) and back.reason == "13 is unlucky"


def test_errors_of_no_known_type_fall_back_to_their_status() -> None:
    from yoke.server.routing import UnsupportedMediaType
    from yoke.server.state import BadRequest, Invalid

    for exc, cls in (
        (BadRequest("not JSON"), InvalidArgument),
        (UnsupportedMediaType("send JSON"), InvalidArgument),
        (Invalid([{"loc": ["priority"], "msg": "too big"}]), InvalidArgument),
    ):
        answer = from_yoke_error(exc)
        back = error_of(answer.status_code, dict(answer.headers), bytes(answer.body))
        assert type(back) is cls, (exc, back)
    # A route that does not exist (Starlette's 404), a 503 of no type, a proxy's HTML page.
    missing = problem(404, "Not found")
    assert type(error_of(404, {}, bytes(missing.body))) is NotFound
    busy = error_of(503, {"retry-after": "1"}, bytes(problem(503, "Busy").body))
    assert type(busy) is ShuttingDown
    page = error_of(502, {}, b"<html><body>Bad Gateway</body></html>")
    assert type(page) is ApiError and page.status == 502 and "Bad Gateway" in str(page)
    # 429 without `retry_after` in the body: the header's.
    limited = error_of(429, {"retry-after": "7"}, b'{"title": "Limit exceeded", "status": 429}')
    assert isinstance(limited, LimitExceeded) and limited.retry_after == 7.0


def test_each_error_a_caller_meets_is_raised_as_its_class(client: Make, server: str) -> None:
    admin, acme, globex = client("admin"), client("acme"), client("globex")
    with pytest.raises(NotFound):
        acme.execution("no-such-execution")
    with pytest.raises(NotFound, match="workflow"):
        acme.start("no-such-workflow")
    with pytest.raises(Unauthorized), Client(server, "a-wrong-token") as stranger:
        stranger.limits()
    with pytest.raises(Forbidden):
        acme.set_limits(Limits())
    with pytest.raises(Forbidden):
        acme.workers()
    with pytest.raises(Forbidden):
        acme.append("ticks", {"id": "x"}, tenant="globex")
    with pytest.raises(Forbidden, match="max_priority"):
        globex.start("echo", None, priority=1)
    with pytest.raises(Vetoed) as vetoed:
        admin.set_limits(Limits(max_queued=13))
    assert vetoed.value.reason == "13 is unlucky"
    with pytest.raises(BadValue):
        acme.executions(status="SLEEPING")
    with pytest.raises(InvalidArgument) as invalid:
        acme.start("echo", None, priority=2**40)  # out of the API's range: the body is refused
    assert invalid.value.problem is not None and invalid.value.problem["errors"]
    acme.start("echo", {"v": 1}, idempotency_key="k-conflict")
    with pytest.raises(IdempotencyConflict):
        acme.start("echo", {"v": 2}, idempotency_key="k-conflict")


def test_a_full_limit_with_reject_is_limit_exceeded_with_retry_after(client: Make) -> None:
    admin, acme = client("admin"), client("acme")
    before = admin.limits()
    admin.set_limits(Limits(max_running_per_workflow={"hold": 1}, on_limit="reject"))
    try:
        running = acme.start("hold", 30, session="acme/full", wait=5)
        assert running.execution_id is not None
        with pytest.raises(LimitExceeded) as refused:
            acme.start("hold", 30, session="acme/full")
        assert refused.value.retry_after is not None and refused.value.retry_after > 0
        assert refused.value.problem is not None and refused.value.problem["status"] == 429
        with pytest.raises(Conflict):
            acme.cancel_start(running.start_id)  # granted: no longer queued
        acme.cancel(running.execution_id)
    finally:
        admin.set_limits(before)


def test_an_unreachable_server_is_server_unreachable_after_bounded_tries() -> None:
    port = free_port()  # nothing listens there
    tries = Retries(attempts=3)
    t0 = time.monotonic()
    with Client(f"http://127.0.0.1:{port}", retries=tries) as c, pytest.raises(ServerUnreachable):
        c.limits()
    took = time.monotonic() - t0
    # Two pauses (0.2 s, then 0.4 s, each up to a fifth shorter), then it gives up.
    assert 0.45 < took < 5, took


@pytest.mark.postgres
def test_a_standby_answers_not_leader_naming_the_leader(
    pg_databases: Callable[[], str], tmp_path: Path
) -> None:
    from tests.server.ha import servers

    db = pg_databases()
    with servers(db, tmp_path) as start:
        leader = start()
        standby = start()
        with Client(leader.url) as c:
            holder = c.ha().holder
            assert c.ha().role == "leader"
        once = Retries(attempts=1)
        with Client(standby.url, retries=once) as c, pytest.raises(NotLeader) as refused:
            c.start("echo")
        assert refused.value.leader == holder
        assert isinstance(refused.value, ShuttingDown)  # a 503: retry later, elsewhere
        # With retries, still bounded: each Retry-After (1 s) waited out, then NotLeader.
        t0 = time.monotonic()
        with Client(standby.url, retries=Retries(attempts=3)) as c, pytest.raises(NotLeader):
            c.start("echo")
        assert 2.0 <= time.monotonic() - t0 < 10


async def test_the_async_client_raises_the_same_classes(server: str) -> None:
    from yoke.client import AsyncClient

    async with AsyncClient(server, TOKENS["acme"][0]) as c:
        with pytest.raises(NotFound):
            await c.execution("no-such-execution")
        with pytest.raises(Forbidden):
            await c.workers()
