"""The admission core with tenants' settings, events in and actions out (no store): a tenant at
its executions.max_running is skipped by the picks, so none of its starts goes to the ledger to
come back FULL while another tenant's waits; its grants carry its cap on `tenant:<t>`; a
raised cap lets its next start go; and a tenant whose last start has left is forgotten (no
group per tenant ever seen)."""

from __future__ import annotations

import dataclasses
import itertools

from yoke.executions.core import AdmissionCore
from yoke.executions.model import Limits
from yoke.executions.tenant_book import TenantBook
from yoke.executions.tickets import Action, Grant, Log, Ticket
from yoke.store import NewStart, StartKind, StartStatus
from yoke.store.tenantverbs import TenantRow, TenantValues

_ids = itertools.count()


def _row(tenant: str, version: int = 1, **values: int) -> TenantRow:
    return TenantRow(
        tenant=tenant,
        values=TenantValues(**values),
        updated_by="t",
        updated_at=0.0,
        version=version,
    )


def _new(start_id: str, session: str) -> NewStart:
    return NewStart(
        start_id=start_id,
        kind=StartKind.START,
        workflow="w",
        session=session,
        tenant=session.split("/")[0],
        priority=0,
        input="null",
        fingerprint="",
        principal=None,
        idempotency_key=None,
        source_execution_id=None,
        from_step=None,
        instance_id="here",
        created_at=0.0,
    )


def _arrive(core: AdmissionCore, start_id: str, session: str) -> tuple[Ticket, list[Action]]:
    """A start arrives; if it is logged first, its log answers at once."""
    t, action = core.arrive(_new(start_id, session), None, now=0.0)
    if isinstance(action, Log):
        row = dataclasses.replace(action.start.logged(seq=next(_ids) + 1))
        return t, core.logged(t, row, True, now=0.0)
    return t, [action]


def _grants(actions: list[Action]) -> list[str]:
    return [a.ticket.start_id for a in actions if isinstance(a, Grant)]


def test_a_capped_tenant_is_skipped_and_its_grants_carry_its_cap() -> None:
    book = TenantBook()
    book.load([_row("*", exec_max_running=10), _row("evil", exec_max_running=1)])
    core = AdmissionCore(
        Limits(max_running=4), instance_id="here", new_id=lambda: f"e{next(_ids)}", tenants=book
    )
    t0, first = _arrive(core, "e0", "evil/0")
    [grant] = [a for a in first if isinstance(a, Grant)]
    assert {s.key: s.cap for s in grant.request.slots}["tenant:evil"] == 1
    # Its other starts, each in a session of its own, wait: none is sent to the ledger.
    for i in range(1, 6):
        _, actions = _arrive(core, f"e{i}", f"evil/{i}")
        assert _grants(actions) == [], actions
    # Another tenant is not held by it (the global cap has room).
    _, actions = _arrive(core, "a0", "acme")
    assert _grants(actions) == ["a0"]
    assert core.next_grants(now=0.0) == []  # nothing of evil's can go while e0 runs
    assert core.kernel.group_queued("evil") == 5
    # Its cap raised: the next picks are its own, up to the new cap.
    book.load([_row("*", exec_max_running=10), _row("evil", 2, exec_max_running=3)])
    core.apply_tenant_settings()
    assert len(_grants(core.next_grants(now=0.0))) == 2
    assert t0.row.status is StartStatus.QUEUED  # (its grant was never answered: a pure test)


def test_a_tenant_whose_starts_have_all_left_is_forgotten() -> None:
    book = TenantBook()
    book.load([_row("*", exec_max_running=1)])
    core = AdmissionCore(
        Limits(), instance_id="here", new_id=lambda: f"e{next(_ids)}", tenants=book
    )
    for n in range(200):  # 200 tenants seen, one start each, refused at shutdown or cancelled
        t, _ = _arrive(core, f"s{n}", f"t{n}")
        core.stop(t)
    assert repr(core.tenant_groups) == "TenantGroups(tenants=200)"
    assert len(core.kernel.groups()) == 200
    core.shutdown()
    for t in list(core.tickets.values()):
        core.finished(t, now=0.0)
    assert repr(core.tenant_groups) == "TenantGroups(tenants=0)"
    assert core.kernel.running == 0 and core.kernel.queued == 0
    assert core.kernel.groups() == {}  # the kernel holds no group of any of them


def test_one_session_name_used_by_two_tenants_is_two_lanes() -> None:
    """A trusted caller may put a tenant's start in a session named for no tenant, or for
    another: each tenant's starts then queue in a lane of their own, in their own group."""
    core = AdmissionCore(Limits(max_running=0), instance_id="here", new_id=lambda: "e")
    for n, tenant in enumerate(("initech", "globex", "initech")):
        start = dataclasses.replace(_new(f"s{n}", "shared"), tenant=tenant)
        t, action = core.arrive(start, None, now=0.0)
        assert isinstance(action, Log)
        core.logged(t, action.start.logged(seq=n + 1), True, now=0.0)
    assert core.kernel.group_queued("initech") == 2
    assert core.kernel.group_queued("globex") == 1
    assert sorted(map(str, core.kernel.stats().lanes)) == [
        "('globex', 'shared')",
        "('initech', 'shared')",
    ]
