"""What the client sends again, and with which Idempotency-Key, through a proxy in front of a
real `yoke serve`: a start whose answer is lost is sent again with the same key and gets the
first start back (one start on the server, not two); a 503 with `Retry-After` is waited out; a
call that is not safe to send twice is not sent again once it may have been acted on. Then the
rule itself (`Retries`), case by case, without I/O."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest

from tests.client.proxy import proxy
from tests.server.conftest import TOKENS
from yoke.client import AsyncClient, Client, Retries, ServerUnreachable
from yoke.client.calls import Answer, Call, Failure
from yoke.executions import ExecutionStatus, StartStatus

Make = Callable[[str], Client]


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def lose_the_first(n: int) -> str:
    return "lose" if n == 0 else "forward"


def test_a_start_whose_answer_is_lost_is_sent_again_with_its_key_and_starts_once(
    server: str, client: Make
) -> None:
    with proxy(port_of(server), lose_the_first) as p, Client(p.url, TOKENS["acme"][0]) as c:
        start = c.start("echo", {"once": True}, session="acme/lost", wait=5)
    assert start.status is StartStatus.GRANTED
    first, second = p.seen
    assert first.headers["idempotency-key"] == second.headers["idempotency-key"]
    # The server acted on the first (its answer was lost) and replayed it to the second.
    page = client("acme").executions(session="acme/lost")
    assert [e.execution_id for e in page.items] == [start.execution_id]


async def test_the_async_client_keeps_its_key_too(server: str) -> None:
    with proxy(port_of(server), lose_the_first) as p:
        async with AsyncClient(p.url, TOKENS["acme"][0]) as c:
            appended = await c.append("ticks", {"id": "lost-once"})
    first, second = p.seen
    assert first.headers["idempotency-key"] == second.headers["idempotency-key"]
    assert appended.tenant == "acme"
    async with AsyncClient(server, TOKENS["acme"][0]) as c:
        async with asyncio.timeout(30):
            while True:
                seen = await c.instance("counter", "lost-once")
                if not seen.queue_depth and seen.state:
                    break
                await asyncio.sleep(0.05)  # polling while the worker processes the event
    assert seen.state == {"n": 1}  # appended once, though sent twice


def test_a_call_not_safe_twice_is_not_sent_again_once_it_may_have_been_acted_on(
    server: str, client: Make
) -> None:
    running = client("acme").start("hold", 30, session="acme/cancel", wait=5)
    assert running.execution_id is not None
    with (
        proxy(port_of(server), lose_the_first) as p,
        Client(p.url, TOKENS["acme"][0]) as c,
        pytest.raises(ServerUnreachable),
    ):
        c.cancel(running.execution_id)
    assert len(p.seen) == 1
    # It was acted on all the same: the answer alone was lost.
    assert client("acme").execution(running.execution_id).status is ExecutionStatus.CANCELLED


def test_a_503_with_retry_after_is_waited_out(server: str) -> None:
    def standby_first(n: int) -> str:
        return "503" if n == 0 else "forward"

    with proxy(port_of(server), standby_first) as p, Client(p.url, TOKENS["acme"][0]) as c:
        ran = c.run("echo", "after a standby", timeout=10)
    assert ran.status is ExecutionStatus.SUCCEEDED
    assert p.seen[1].at - p.seen[0].at >= 0.99  # Retry-After: 1
    assert p.seen[0].headers["idempotency-key"] == p.seen[1].headers["idempotency-key"]


# -- the rule -----------------------------------------------------------------------------
START = Call(method="POST", path="/v1/starts", body={}, key="k")
CANCEL = Call(method="POST", path="/v1/executions/e/cancel")
READ = Call(method="GET", path="/v1/limits")
RULE = Retries(attempts=3)


def answer(status: int, **headers: str) -> Answer:
    return Answer(status=status, headers=headers, body=b"{}")


def test_a_503_is_tried_again_after_its_retry_after_whatever_the_call() -> None:
    for call in (START, CANCEL, READ):
        pause = RULE.after_answer(call, answer(503, **{"retry-after": "2"}), 1)
        assert pause is not None and pause >= 2
    assert RULE.after_answer(START, answer(503), 1) is None  # no Retry-After: not "later"
    assert RULE.after_answer(START, answer(503, **{"retry-after": "3600"}), 1) is None
    assert RULE.after_answer(START, answer(503, **{"retry-after": "1"}), 3) is None  # bound


def test_a_lost_answer_is_tried_again_only_for_a_call_safe_twice() -> None:
    assert RULE.after_failure(START, Failure.LOST, 1) is not None  # keyed
    assert RULE.after_failure(READ, Failure.LOST, 1) is not None
    assert RULE.after_failure(CANCEL, Failure.LOST, 1) is None
    assert RULE.after_answer(CANCEL, answer(502), 1) is None
    assert RULE.after_answer(READ, answer(504), 1) is not None
    # Nothing was sent: any call may go again, within the bound.
    assert RULE.after_failure(CANCEL, Failure.NOT_SENT, 1) is not None
    assert RULE.after_failure(CANCEL, Failure.NOT_SENT, 3) is None


def test_other_answers_are_taken_as_they_are() -> None:
    for status in (200, 201, 202, 400, 401, 403, 404, 409, 422, 429, 500):
        assert RULE.after_answer(START, answer(status, **{"retry-after": "1"}), 1) is None


def test_how_a_transport_failure_is_told() -> None:
    from yoke.client.calls import failure_of

    assert failure_of(httpx.ConnectError("refused")) is Failure.NOT_SENT
    assert failure_of(httpx.ConnectTimeout("slow")) is Failure.NOT_SENT
    assert failure_of(httpx.RemoteProtocolError("closed")) is Failure.LOST
    assert failure_of(httpx.ReadTimeout("slow")) is Failure.LOST
