"""This process's copy of the tenants' settings: a change made here applies at once, and a read
of every row that began before it was written (the poll, or a NOTIFY's read) does not undo it.
Before, such a read put back the older row: a tenant's new append rate was off until the next
read, and appends in between went through unlimited (seen in CI as a third append answered 202
under a burst of 2)."""

from __future__ import annotations

from yoke.executions.tenant_book import TenantBook
from yoke.store.tenantverbs import TenantRow, TenantValues


def _row(tenant: str, version: int, **values: float) -> TenantRow:
    return TenantRow(
        tenant=tenant,
        values=TenantValues(**values),  # type: ignore[arg-type]
        updated_by="t",
        updated_at=0.0,
        version=version,
    )


def test_a_read_older_than_a_change_made_here_does_not_undo_it() -> None:
    book = TenantBook()
    assert book.load([_row("acme", 1)])
    assert book.actors("acme").bucket is None
    book.put(_row("acme", 2, append_rate=0.25, append_burst=2))
    assert book.actors("acme").bucket == (0.25, 2)
    # A read that began before the change was written answers the older row.
    assert not book.load([_row("acme", 1)])
    assert book.actors("acme").bucket == (0.25, 2)
    # Nor does a read that began before the row existed at all drop it.
    book.put(_row("globex", 1, append_rate=1.0, append_burst=1))
    assert not book.load([_row("acme", 1)])
    assert book.actors("globex").bucket == (1.0, 1)


def test_a_newer_row_from_another_server_applies() -> None:
    book = TenantBook()
    book.put(_row("acme", 2, append_rate=0.25, append_burst=2))
    assert book.load([_row("acme", 3, append_rate=5.0, append_burst=10), _row("*", 1)])
    assert book.actors("acme").bucket == (5.0, 10)
    book.put(_row("acme", 3))  # an answer older than what a read brought: kept as read
    assert book.actors("acme").bucket == (5.0, 10)
