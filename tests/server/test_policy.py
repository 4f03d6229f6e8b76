"""One table says who may do what (`executions/policy.py`): the API's route, the dashboard's
control and the service all read it, so for every principal they agree on what is forbidden.
A row, a control or a service that checks roles of its own fails here."""

from __future__ import annotations

import pytest

from tests.server.conftest import TOKENS, Serve
from tests.ui.test_controls import logged_in
from yoke.errors import Forbidden
from yoke.executions import Limits
from yoke.executions.policy import ROLES, Act
from yoke.server.ui.pages import ACTION_ACTS

# The route of each of the dashboard's acts.
ROUTES = {
    Act.SET_LIMITS: ("PUT", "/v1/limits"),
    Act.SET_PRIORITY: ("PATCH", "/v1/starts/{start_id}"),
    Act.CANCEL_START: ("DELETE", "/v1/starts/{start_id}"),
    Act.RESTART: ("POST", "/v1/executions/{execution_id}/restart"),
    Act.RESUME: ("POST", "/v1/executions/{execution_id}/resume"),
    Act.CANCEL_EXECUTION: ("POST", "/v1/executions/{execution_id}/cancel"),
}


async def test_each_route_asks_the_policy_of_its_act(serve: Serve) -> None:
    server, _ = await serve()
    rows = {(op.method, op.path): op for op in server.ops}
    assert set(ACTION_ACTS.values()) == set(ROUTES)  # every control has its route
    for act, route in ROUTES.items():
        assert rows[route].access.roles == ROLES[act], (act, route)
    assert rows[("PUT", "/v1/tenants/{tenant}")].access.roles == ROLES[Act.SET_TENANT]
    assert rows[("GET", "/v1/audit")].access.roles == ROLES[Act.READ_AUDIT]
    assert rows[("GET", "/v1/workers")].access.roles == ROLES[Act.READ_FLEET]


@pytest.mark.parametrize("who", sorted(TOKENS))
async def test_the_route_the_control_and_the_service_forbid_alike(serve: Serve, who: str) -> None:
    server, client = await serve(Limits(max_running=0))
    queued = await client("acme").post("/v1/starts", json={"workflow": "echo", "input": 1})
    start_id = queued.json()["start_id"]
    principal = TOKENS[who][1]
    browser, csrf = await logged_in(client, who) if who != "scraper" else (None, "")
    ex = server.state.executions
    for act, control, body, form, service in (
        (Act.SET_LIMITS, "limits", {"max_running": 0}, {"max_running": "0"},
         lambda: ex.set_limits(Limits(max_running=0), principal=principal)),
        (Act.SET_PRIORITY, "priority", {"priority": 0}, {"start_id": start_id, "priority": "0"},
         lambda: ex.set_priority(start_id, 0, principal=principal)),
    ):  # fmt: skip
        method, path = ROUTES[act]
        api = await client(who).request(method, path.replace("{start_id}", start_id), json=body)
        try:
            await service()
            service_forbids = False
        except Forbidden:
            service_forbids = True
        forbidden = not principal.has_any(*ROLES[act])
        assert (api.status_code == 403) == forbidden == service_forbids, (who, act, api.text)
        if browser is not None:
            ui = await browser.post(f"/ui/actions/{control}", data={**form, "csrf": csrf})
            assert (ui.status_code == 403) == forbidden, (who, control, ui.text)
