"""The tenants' token buckets in the store, on every backend: GCRA in one statement on the
database's clock (a burst goes at once, the next token after 1/rate, a refusal says when),
and a bucket full again is forgotten (the table keeps no row per tenant ever seen)."""

from __future__ import annotations

import asyncio

from tests.executions.helpers import count_rows
from yoke.store import Store
from yoke.store.tenantverbs import TenantVerbs


async def test_a_bucket_gives_its_burst_then_one_token_per_interval(
    store: Store, database_url: str
) -> None:
    verbs = TenantVerbs(store._t)  # type: ignore[attr-defined]
    take = verbs.take_tokens
    assert (await take("acme", "starts", n=2, rate=20, burst=3)).granted
    assert (await take("acme", "starts", n=1, rate=20, burst=3)).granted
    refused = await take("acme", "starts", n=1, rate=20, burst=3)
    assert not refused.granted and 0 < refused.retry_after <= 0.05 + 0.01
    assert not (await take("acme", "starts", n=4, rate=20, burst=3)).granted  # past the burst
    assert (await take("acme", "appends", n=3, rate=20, burst=3)).granted  # another bucket
    assert (await take("globex", "starts", n=3, rate=20, burst=3)).granted  # another tenant
    await asyncio.sleep(refused.retry_after)
    assert (await take("acme", "starts", n=1, rate=20, burst=3)).granted
    assert count_rows(database_url, "yoke_tenant_rates") == 3
    await asyncio.sleep(0.2)  # every bucket full again (3 tokens at 20/s: 0.15 s)
    assert await verbs.forget_full_buckets() == 3
    assert count_rows(database_url, "yoke_tenant_rates") == 0
    assert (await take("acme", "starts", n=3, rate=20, burst=3)).granted  # full: its burst
