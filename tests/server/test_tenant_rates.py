"""A tenant's start rate holds across two real `yoke serve` processes on one PostgreSQL: offered
at three times its rate for 10 s, evenly or all at one server, the starts admitted stay within
10% of the setting (burst + rate x seconds), and every refusal is a 429 with Retry-After.

Ten seconds because that is the window the rate is promised over (a shorter one would let the
burst alone decide the count); marked slow."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.conftest import _truncate
from tests.server.e2e import yoke_serve

RATE, BURST = 20.0, 5
SECONDS = 10.0
OFFERED = 3.0  # times the rate, in all


async def offer(urls: list[str], seconds: float) -> tuple[Counter[int], float]:
    """Open-loop POST /v1/starts of tenant acme at OFFERED x RATE a second, spread over
    `urls` in turn, for `seconds`: the statuses answered, and the seconds from the first
    request sent to the last answer (on a busy machine a little more than `seconds`: the
    servers decide within that span)."""
    statuses: Counter[int] = Counter()
    retry_after_ok: list[bool] = []
    last = 0.0
    async with httpx.AsyncClient(timeout=30) as http:

        async def one(i: int) -> None:
            nonlocal last
            r = await http.post(
                urls[i % len(urls)] + "/v1/starts",
                json={"workflow": "echo", "input": i, "session": f"acme/{i % 7}"},
            )
            last = max(last, time.monotonic())
            statuses[r.status_code] += 1
            if r.status_code == 429:
                retry_after_ok.append(int(r.headers["Retry-After"]) >= 1)

        per_second = OFFERED * RATE
        tasks = []
        t0 = time.monotonic()
        n = 0
        while (due := t0 + n / per_second) < t0 + seconds:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            tasks.append(asyncio.ensure_future(one(n)))
            n += 1
        await asyncio.gather(*tasks)
    assert all(retry_after_ok) and retry_after_ok, statuses
    return statuses, last - t0


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize("load", ["balanced", "skewed"])
async def test_a_rate_holds_within_ten_percent_across_two_servers(
    pg_url: str, tmp_path: Path, load: str
) -> None:
    _truncate(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tenant_settings (tenant, exec_rate, exec_burst, updated_by, updated_at) "
            "VALUES ('acme', %s, %s, 'test', 0)",
            (RATE, BURST),
        )
    with yoke_serve(pg_url, tmp_path) as a, yoke_serve(pg_url, tmp_path) as b:
        urls = [a.url, b.url] if load == "balanced" else [a.url]
        statuses, span = await offer(urls, SECONDS)
    admitted = statuses[201] + statuses[202]
    assert set(statuses) <= {201, 202, 429}, statuses
    assert span < SECONDS * 1.5, span  # the servers kept up with the offered load
    ideal = BURST + RATE * SECONDS
    # Never more than the rate allows over the span the servers decided in, and within 10% of
    # the setting over the 10 s.
    assert admitted <= BURST + RATE * span + 1, (admitted, span, statuses)
    assert abs(admitted - ideal) <= 0.1 * ideal, (admitted, ideal, span, statuses)
    assert statuses[429] > 0  # it was offered more than its rate
