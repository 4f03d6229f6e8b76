"""Who may do what: the one table of the roles each change or privileged read needs.

Every path to an act reads this table: the route table builds each row's role check from it
(`server/routes.py`, `routing.may`), the dashboard's controls and views check the same entry
(`server/ui/pages.py`, `ui/stored.py`), and the services check it again at the call
(`control.py`, `tenants.py`), so a route, a control and a Python caller cannot disagree. An act
with no roles is open to any principal; what depends on the object (a start of another tenant
is 404) is checked where the object is read, by `server/auth.sees`.

This module must never import anything of yoke but `errors` and the principal's model.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from yoke.errors import Forbidden
from yoke.executions.model import ADMIN, OPERATOR, Principal


class Act(StrEnum):
    SET_LIMITS = "set_limits"
    SET_TENANT = "set_tenant"
    SET_PRIORITY = "set_priority"
    CANCEL_START = "cancel_start"  # its tenant's principal, or a trusted one
    RESTART = "restart"  # (an execution's acts likewise)
    RESUME = "resume"
    CANCEL_EXECUTION = "cancel_execution"
    READ_AUDIT = "read_audit"
    READ_FLEET = "read_fleet"  # the workers and executors of every tenant


ROLES: Mapping[Act, frozenset[str]] = {
    Act.SET_LIMITS: frozenset({ADMIN}),
    Act.SET_TENANT: frozenset({ADMIN}),
    Act.SET_PRIORITY: frozenset({OPERATOR, ADMIN}),
    Act.CANCEL_START: frozenset(),
    Act.RESTART: frozenset(),
    Act.RESUME: frozenset(),
    Act.CANCEL_EXECUTION: frozenset(),
    Act.READ_AUDIT: frozenset({ADMIN}),
    Act.READ_FLEET: frozenset({OPERATOR, ADMIN}),
}


def need(principal: object, act: Act) -> None:
    """`Forbidden` unless `principal` may do `act` (a change needs a principal at all)."""
    roles = ROLES[act]
    if not roles:
        return
    wanted = " or ".join(sorted(roles))
    if not isinstance(principal, Principal):
        raise Forbidden(f"this change needs a principal with role {wanted}")
    if not principal.has_any(*roles):
        raise Forbidden(f"{principal.name} lacks role {wanted}")
