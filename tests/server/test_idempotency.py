"""Idempotency-Key: a retry replays the first answer exactly; another body is 422; keys expire."""

from __future__ import annotations

import asyncio
from pathlib import Path

from starlette.responses import Response

from tests.server.conftest import Serve, make_app, running
from yoke.executions import Limits
from yoke.server import Server, StoreAnswers, TokenBook
from yoke.server.idempotency import MemoryAnswers, Replayer, StoredAnswer, request_fingerprint


async def test_a_retry_replays_the_first_answer_byte_for_byte(serve: Serve) -> None:
    _, client = await serve(Limits(max_running=1))
    c = client("acme")
    await c.post("/v1/starts", json={"workflow": "hold"})
    key = {"Idempotency-Key": "order-42"}
    first = await c.post("/v1/starts", json={"workflow": "echo", "input": {"n": 1}}, headers=key)
    assert first.status_code == 202
    again = await c.post("/v1/starts", json={"input": {"n": 1}, "workflow": "echo"}, headers=key)
    assert again.status_code == 202 and again.content == first.content
    assert again.headers["location"] == first.headers["location"]
    assert again.headers["idempotent-replayed"] == "true"
    other = await c.post("/v1/starts", json={"workflow": "echo", "input": {"n": 2}}, headers=key)
    assert other.status_code == 422
    # Keys are per principal: another tenant's same key is its own.
    mine = await client("globex").post("/v1/starts", json={"workflow": "echo"}, headers=key)
    assert mine.status_code in (201, 202) and mine.json()["start_id"] != first.json()["start_id"]


async def test_concurrent_retries_make_one_start(serve: Serve) -> None:
    _, client = await serve()
    c = client("acme")
    key = {"Idempotency-Key": "burst"}
    answers = await asyncio.gather(
        *(c.post("/v1/starts", json={"workflow": "hold"}, headers=key) for _ in range(20))
    )
    assert {a.status_code for a in answers} == {201}
    assert len({a.json()["execution_id"] for a in answers}) == 1
    page = (await c.get("/v1/executions")).json()
    assert len(page["items"]) == 1


async def test_restart_with_a_key_replays(serve: Serve) -> None:
    _, client = await serve()
    c = client("acme")
    held = (await c.post("/v1/starts", json={"workflow": "hold"})).json()
    key = {"Idempotency-Key": "restart-1"}
    path = f"/v1/executions/{held['execution_id']}/restart"
    a = await c.post(path, headers=key)
    b = await c.post(path, headers=key)
    assert a.status_code == 201 and b.content == a.content
    assert (await c.post(path, json={"from_step": "a"}, headers=key)).status_code == 422


async def test_an_error_answer_is_not_kept(serve: Serve) -> None:
    _, client = await serve()
    c = client("acme")
    key = {"Idempotency-Key": "typo"}
    assert (await c.post("/v1/starts", json={"workflow": "ech"}, headers=key)).status_code == 404
    assert (await c.post("/v1/starts", json={"workflow": "ech"}, headers=key)).status_code == 404


async def test_keys_expire_after_the_retention() -> None:
    store = MemoryAnswers()
    now = [1000.0]
    replayer = Replayer(store, retention=10.0)
    calls = 0

    async def answer() -> Response:
        nonlocal calls
        calls += 1
        return Response(f'{{"n": {calls}}}', status_code=201)

    fp = request_fingerprint("POST", "/v1/starts", b'{"a": 1}')
    for _ in range(2):
        r, replayed = await replayer.run(
            principal="p", tenant="t", key="k", fp=fp, now=lambda: now[0], answer=answer
        )
    assert replayed and r.body == b'{"n": 1}' and calls == 1
    now[0] += 11
    r, replayed = await replayer.run(
        principal="p", tenant="t", key="k", fp=fp, now=lambda: now[0], answer=answer
    )
    assert not replayed and calls == 2
    now[0] += 11
    assert await store.forget_answers(now=now[0]) == 1
    assert repr(store) == "MemoryAnswers(0 kept)"


async def test_the_store_decides_a_race_between_processes() -> None:
    store = MemoryAnswers()
    theirs = StoredAnswer(
        principal="p",
        tenant="t",
        key="k",
        fingerprint="f",
        status=202,
        body=b"{}",
        headers=(("location", "/v1/starts/x"),),
        created_at=0.0,
        expires_at=100.0,
    )
    assert await store.keep_answer(theirs, now=1.0) is theirs
    mine = StoredAnswer(
        principal="p",
        tenant="t",
        key="k",
        fingerprint="f",
        status=201,
        body=b"[]",
        headers=(),
        created_at=1.0,
        expires_at=101.0,
    )
    assert await store.keep_answer(mine, now=1.0) is theirs


def test_the_fingerprint_ignores_key_order_and_spacing() -> None:
    a = request_fingerprint("POST", "/v1/starts", b'{"a": 1, "b": [1, 2]}')
    assert a == request_fingerprint("POST", "/v1/starts", b'{"b":[1,2],"a":1}')
    assert a != request_fingerprint("POST", "/v1/starts", b'{"a": 2, "b": [1, 2]}')
    assert a != request_fingerprint("POST", "/v1/other", b'{"a": 1, "b": [1, 2]}')


async def test_a_replay_survives_a_restart_of_the_server(db_url: str, tokens_file: Path) -> None:
    """Answers are kept in the store (`yoke_idempotency`), not in the process."""
    key = {"Idempotency-Key": "durable-1"}
    body = {"workflow": "hold", "input": 1}
    answers = []
    for _ in range(2):
        server = Server(make_app(db_url), tokens=TokenBook.from_file(tokens_file))
        assert server.state.replayer.answers is not None
        async with running(server) as client:
            assert isinstance(server.state.replayer.answers, StoreAnswers)
            answers.append(await client("acme").post("/v1/starts", json=body, headers=key))
    first, again = answers
    assert first.status_code == 201 and again.status_code == 201
    assert again.content == first.content and again.headers["idempotent-replayed"] == "true"


async def test_expired_answers_are_purged_from_the_store(serve: Serve) -> None:
    server, client = await serve(retention=0.5)
    c = client("acme")
    key = {"Idempotency-Key": "short-lived"}
    first = await c.post("/v1/starts", json={"workflow": "echo"}, headers=key)
    answers = server.state.replayer.answers
    assert await answers.find_answer("acme-ci", "short-lived", now=server.app.clock.wall())
    later = server.app.clock.wall() + 1.0
    assert await answers.forget_answers(now=later) == 1
    assert await answers.find_answer("acme-ci", "short-lived", now=later) is None
    assert first.status_code == 201
