"""The Schedules view in a real browser (Debian's Chromium) against a real `yoke serve`: each
schedule with its cadence, next run and last run; a plain tenant sees only its own, an operator
every tenant's; no console error or CSP violation."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.server.e2e import Running
from tests.ui.conftest import api, live, login

pytestmark = pytest.mark.slow


def test_the_schedules_view_shows_next_and_last_runs_to_their_tenant(
    browser: Any, server: Running
) -> None:
    with api(server, "acme") as c:
        r = c.put("/v1/schedules/heartbeat", json={"workflow": "echo", "every": 1})
        assert r.status_code == 200, r.text
        nightly = {"workflow": "echo", "cron": "30 2 * * *", "timezone": "Europe/Berlin"}
        assert c.put("/v1/schedules/nightly", json=nightly).status_code == 200
        deadline = time.monotonic() + 10
        while c.get("/v1/schedules/heartbeat").json()["fired"] < 1:
            assert time.monotonic() < deadline, "the heartbeat never ticked"
            time.sleep(0.1)
    with api(server, "globex") as c:
        r = c.put("/v1/schedules/globex-secret", json={"workflow": "echo", "every": 3600})
        assert r.status_code == 200, r.text

    w = login(browser, server, "acme")
    page = w.page
    page.goto(f"{server.url}/ui/schedules")
    page.wait_for_selector("#s-acme-heartbeat")
    live(page)
    row = page.inner_text("#s-acme-heartbeat")
    assert "every 1 s" in row and "GRANTED" in row and "in " in row, row
    assert "not yet" in page.inner_text("#s-acme-nightly")
    assert "Europe/Berlin" in page.inner_text("#s-acme-nightly")
    assert "globex" not in page.inner_text("#r-schedules")
    assert w.errors == [] and w.csp_violations() == []

    ops = login(browser, server, "operator").page
    ops.goto(f"{server.url}/ui/schedules")
    ops.wait_for_selector("#s-globex-globex-secret")
    assert ops.locator("#schedules tbody tr").count() == 3
