"""`Rates`, a tenant's token buckets as one process spends them, on a manual clock over a
bucket that counts its statements: tokens are leased 50 ms of the rate at a time (so most
requests cost no statement), a refusal is remembered until its tokens are there (a flood of
refused requests costs no statement), a leased token left unspent lapses, and the servers
together never pass the rate."""

from __future__ import annotations

import pytest

from yoke.clock import ManualClock
from yoke.errors import RateLimited
from yoke.executions.tenant_book import LEASE_TTL, Rates
from yoke.store.tenantverbs import Tokens


class Bucket:
    """The store's bucket rows (GCRA, as `take_tokens`), on the same manual clock."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.tats: dict[tuple[str, str], float] = {}
        self.statements = 0
        self.given = 0

    async def take_tokens(
        self, tenant: str, kind: str, *, n: int, rate: float, burst: int
    ) -> Tokens:
        self.statements += 1
        now = self.clock.monotonic()
        tat = max(self.tats.get((tenant, kind), now), now)
        if tat + (n - burst) / rate > now:
            return Tokens(granted=False, retry_after=tat + (n - burst) / rate - now)
        self.tats[(tenant, kind)] = tat + n / rate
        self.given += n
        return Tokens(granted=True)


async def test_tokens_are_leased_and_refusals_remembered() -> None:
    clock = ManualClock(100.0)
    bucket = Bucket(clock)
    rates = Rates(bucket, clock)
    rate_burst = (100.0, 10)  # 50 ms of the rate: 5 tokens a lease
    for _ in range(10):  # the burst: two leases of 5
        await rates.take("acme", "starts", rate_burst)
    assert bucket.statements == 2
    with pytest.raises(RateLimited) as refused:
        await rates.take("acme", "starts", rate_burst)
    assert bucket.statements == 3
    wait = refused.value.retry_after
    assert wait is not None and abs(wait - 0.05) < 1e-9  # 5 tokens at 100/s
    for _ in range(1000):  # a flood while refused: no statement
        with pytest.raises(RateLimited):
            await rates.take("acme", "starts", rate_burst)
    assert bucket.statements == 3
    clock.advance(wait)
    await rates.take("acme", "starts", rate_burst)
    assert bucket.statements == 4
    # Another tenant's bucket is its own; no rate, no statement.
    await rates.take("globex", "starts", rate_burst)
    await rates.take("initech", "starts", None)
    assert bucket.statements == 5


async def test_an_unspent_lease_lapses_and_two_servers_never_pass_the_rate() -> None:
    clock = ManualClock(100.0)
    bucket = Bucket(clock)
    a, b = Rates(bucket, clock), Rates(bucket, clock)
    rate_burst = (20.0, 4)  # 50 ms of 20/s is one token: a lease per request
    admitted = 0
    for _ in range(2000):  # 10 s in steps of 5 ms, a request at each server each step
        for server in (a, b):
            try:
                await server.take("acme", "starts", rate_burst)
                admitted += 1
            except RateLimited:
                pass
        clock.advance(0.005)
    assert admitted <= 4 + 20 * 10 and admitted >= 0.95 * (4 + 20 * 10), admitted
    # A lease for several tokens, left unspent past its time, lapses rather than bursting.
    c = Rates(bucket, clock, lease=1.0)
    clock.advance(10)
    await c.take("late", "starts", (10.0, 10))  # leases all 10, spends 1
    clock.advance(LEASE_TTL + 0.1)
    before = bucket.given
    await c.take("late", "starts", (10.0, 10))
    assert bucket.given > before  # its 9 lapsed: a new lease was taken


async def test_more_than_the_burst_at_once_is_refused_without_a_statement() -> None:
    clock = ManualClock()
    bucket = Bucket(clock)
    with pytest.raises(RateLimited) as refused:
        await Rates(bucket, clock).take("acme", "appends", (5.0, 3), n=4)
    assert refused.value.retry_after is None and bucket.statements == 0
