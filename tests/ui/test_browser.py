"""The dashboard in a real browser (Debian's Chromium through Playwright) against a real
`yoke serve`: every view renders its data with no console error and no CSP violation, a start
made elsewhere shows up live, controls are applied and audited (and refused to a plain tenant),
the Why text is exact, charts draw (each session in a colour of its own name), ten tabs share
one stream and stay live, the Fairness and Workers views read as they should, shutdown does not
wait for open streams,
and axe-core finds no serious accessibility violation."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.server.e2e import Running
from tests.ui.conftest import api, live, login

VENDOR = Path(__file__).parent / "vendor"
pytestmark = pytest.mark.slow


def _queued_behind_one_slot(server: Running) -> tuple[str, str]:
    """max_running=1 taken by a `hold`; returns (the hold's execution id, a queued start id)."""
    with api(server, "admin") as c:
        assert c.put("/v1/limits", json={"max_running": 1}).status_code == 200
        held = c.post("/v1/starts", json={"workflow": "hold", "input": 60, "session": "acme"})
        queued = c.post("/v1/starts", json={"workflow": "echo", "input": 1, "session": "acme"})
        assert (held.status_code, queued.status_code) == (201, 202)
        return held.json()["execution_id"], queued.json()["start_id"]


def test_every_view_renders_its_data_without_console_errors_or_csp_violations(
    browser: Any, server: Running
) -> None:
    with api(server, "admin") as c:
        done = c.post("/v1/starts", json={"workflow": "steps", "input": 1}, params={"wait": 5})
        steps_id = done.json()["execution_id"]
        # Granted is not finished: the next step takes the only slot, which `steps` must
        # have given back by then (a loaded machine can still be running it here).
        deadline = time.monotonic() + 30
        while c.get(f"/v1/executions/{steps_id}").json()["status"] == "RUNNING":
            assert time.monotonic() < deadline, "steps did not finish"
            time.sleep(0.05)
    _, queued = _queued_behind_one_slot(server)
    w = login(browser, server, "admin")
    page = w.page
    checks = {
        "/ui/": "#r-overview .card",
        "/ui/admission": f"#q-{queued}",
        "/ui/fairness": "#r-fairness td",
        f"/ui/starts/{queued}": "#why-text",
        "/ui/executions": f"#e-{steps_id}",
        f"/ui/executions/{steps_id}": "#children a",
        "/ui/actors": "#r-actors",
        "/ui/workers": "#executor-mode >> text=this server's own worker: inline",
        "/ui/timers": "#r-timers",
        "/ui/schedules": "#r-schedules",
        "/ui/audit": "#r-audit tbody tr",
    }
    for path, selector in checks.items():
        page.goto(server.url + path)
        page.wait_for_selector(selector, timeout=5000)
        live(page)
        assert w.errors == [], (path, w.errors)
        assert w.csp_violations() == [], (path, w.csp_violations())
    page.goto(f"{server.url}/ui/starts/{queued}")
    assert page.inner_text("#why-text") == "held by max_running=1: 1 running"
    page.goto(f"{server.url}/ui/fairness")
    assert page.inner_text("#jain-hint").startswith("1 is fair")


def test_a_start_made_by_another_client_appears_within_a_second(
    browser: Any, server: Running
) -> None:
    with api(server, "admin") as c:
        c.put("/v1/limits", json={"max_running": 0})  # everything queues
    page = login(browser, server, "admin").page
    page.goto(f"{server.url}/ui/admission")
    live(page)
    with api(server, "acme") as c:
        t0 = time.monotonic()
        start = c.post("/v1/starts", json={"workflow": "echo", "input": 1}).json()
    page.wait_for_selector(f"#q-{start['start_id']}", timeout=5000)
    assert time.monotonic() - t0 < 1.0


def test_a_limit_raised_from_the_page_is_applied_and_audited(browser: Any, server: Running) -> None:
    _, queued = _queued_behind_one_slot(server)
    page = login(browser, server, "admin").page
    page.goto(f"{server.url}/ui/starts/{queued}")
    page.click("text=Raise max_running to 2")
    page.wait_for_url(f"{server.url}/ui/starts/{queued}")
    with api(server, "admin") as c:
        assert c.get("/v1/limits").json()["max_running"] == 2
        newest = c.get("/v1/audit/recent", params={"limit": 1}).json()["items"][0]
        assert (newest["kind"], newest["principal"]) == ("limits", "root")
        assert (newest["before"]["max_running"], newest["after"]["max_running"]) == (1, 2)
        assert c.get(f"/v1/starts/{queued}", params={"wait": 5}).json()["status"] == "GRANTED"


def test_a_plain_tenant_sees_no_control_and_a_forged_one_is_refused(
    browser: Any, server: Running
) -> None:
    _, queued = _queued_behind_one_slot(server)
    page = login(browser, server, "acme").page
    page.goto(f"{server.url}/ui/starts/{queued}")
    page.wait_for_selector("#why-text")
    assert page.locator("text=Raise max_running").count() == 0
    assert page.locator("text=Set priority").count() == 0
    csrf = page.get_attribute("input[name=csrf]", "value")  # the logout form's token
    forged = page.request.post(
        f"{server.url}/ui/actions/limits",
        form={"csrf": csrf or "", "max_running": "50", "on_limit": "queue"},
        headers={"Origin": server.url},
        max_redirects=0,
    )
    assert forged.status == 403
    no_token = page.request.post(
        f"{server.url}/ui/actions/limits", form={"max_running": "50"}, max_redirects=0
    )
    assert no_token.status == 403
    with api(server, "admin") as c:
        assert c.get("/v1/limits").json()["max_running"] == 1
        assert c.get("/v1/audit/recent").json()["items"][0]["after"]["max_running"] == 1


def test_why_text_is_exact_for_constructed_cases(browser: Any, server: Running) -> None:
    page = login(browser, server, "admin").page

    def why(start_id: str) -> str:
        page.goto(f"{server.url}/ui/starts/{start_id}")
        text: str = page.inner_text("#why-text")
        with api(server, "admin") as c:
            assert c.get(f"/v1/starts/{start_id}/why").json()["explanation"] == text
        return text

    with api(server, "admin") as c:
        c.put("/v1/limits", json={"max_running": 1})
        c.post("/v1/starts", json={"workflow": "hold", "input": 60, "session": "a"})
        first = c.post("/v1/starts", json={"workflow": "echo", "session": "b"}).json()
        assert why(first["start_id"]) == "held by max_running=1: 1 running"
        urgent = c.post("/v1/starts", json={"workflow": "echo", "session": "c", "priority": 5})
        assert urgent.status_code == 202
        assert why(first["start_id"]) == (
            "held by max_running=1: 1 running; 1 queued start(s) go before it "
            "(1 of them of higher priority)"
        )
        c.put("/v1/limits", json={"max_running_per_session": 1})
        c.get(f"/v1/starts/{first['start_id']}", params={"wait": 5})
        c.post("/v1/starts", json={"workflow": "hold", "input": 60, "session": "d"})
        same = c.post("/v1/starts", json={"workflow": "echo", "session": "d"}).json()
        assert why(same["start_id"]) == "held by max_running_per_session=1: 1 running"


def test_charts_draw_pixels(browser: Any, server: Running) -> None:
    with api(server, "acme") as c:
        for _ in range(20):
            c.post("/v1/starts", json={"workflow": "echo", "input": 1})
    page = login(browser, server, "admin").page
    live(page)
    page.wait_for_selector(".chart canvas", timeout=5000)
    coloured = page.evaluate(
        """() => {
          let n = 0;
          for (const c of document.querySelectorAll(".chart canvas")) {
            const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
            for (let i = 0; i < d.length; i += 4) {
              const hi = Math.max(d[i], d[i + 1], d[i + 2]);
              const lo = Math.min(d[i], d[i + 1], d[i + 2]);
              if (d[i + 3] > 0 && hi - lo > 60) n++;
            }
          }
          return n;
        }"""
    )
    assert coloured > 50
    # The time axis: one short line per label (no date stacked under the first, overlapping
    # the next one), each label distinct.
    labels = page.evaluate(
        """() => [...document.querySelectorAll(".chart")].filter((n) => n._plot)
                 .map((n) => n._plot.axes[0]._values || [])"""
    )
    assert labels and all(labels), labels
    for axis in labels:
        assert all(re.fullmatch(r"\d\d:\d\d(:\d\d)?", v) for v in axis), axis
        assert len(set(axis)) == len(axis), axis


WAIT_LINES = """() => {
  const n = document.querySelector('.chart[data-chart="waits"]');
  if (!n || !n._plot) { return null; }
  return n._plot.series.slice(1).map((x, i) =>
    [x.label, typeof x.stroke === "function" ? x.stroke(n._plot, i + 1) : x.stroke]);
}"""


def test_a_session_keeps_its_colour_across_views_and_ranks(browser: Any, server: Running) -> None:
    def starts(session: str, n: int) -> None:
        with api(server, "admin") as c:
            for _ in range(n):
                c.post("/v1/starts", json={"workflow": "echo", "session": session})

    def lines(page: Any, order: list[str]) -> dict[str, str]:
        page.wait_for_function(
            f"() => JSON.stringify(({WAIT_LINES})()?.map((x) => x[0])) === "
            f"'{json.dumps(order, separators=(',', ':'))}'",
            timeout=10_000,
        )
        return dict(page.evaluate(WAIT_LINES))

    starts("beta", 3)
    starts("alpha", 1)
    page = login(browser, server, "admin").page
    live(page)
    on_overview = lines(page, ["beta", "alpha"])  # busiest first
    assert on_overview["alpha"] != on_overview["beta"]
    page.goto(f"{server.url}/ui/fairness")
    assert lines(page, ["beta", "alpha"]) == on_overview
    starts("alpha", 5)  # alpha becomes the busiest: the ranks swap, the colours stay
    assert lines(page, ["alpha", "beta"]) == on_overview


HIDE = """(hidden) => {
  Object.defineProperty(document, "visibilityState", {value: hidden ? "hidden" : "visible",
                        configurable: true});
  document.dispatchEvent(new Event("visibilitychange"));
}"""


def test_ten_visible_tabs_share_one_stream_and_all_stay_live(browser: Any, server: Running) -> None:
    # A browser keeps six connections to one server: with a stream per tab, the seventh tab
    # would never load. All ten are visible here, side by side.
    with api(server, "admin") as c:
        c.put("/v1/limits", json={"max_running": 0})
    first = login(browser, server, "admin").page
    tabs = [first] + [first.context.new_page() for _ in range(9)]
    for tab in tabs:
        tab.goto(f"{server.url}/ui/admission", timeout=10_000)
        live(tab)
    hidden = tabs[-1]
    hidden.evaluate(HIDE, True)  # a hidden tab is told too, and refreshes once it shows
    with api(server, "acme") as c:
        start = c.post("/v1/starts", json={"workflow": "echo"}).json()["start_id"]
    for tab in tabs[:-1]:
        tab.wait_for_selector(f"#q-{start}", timeout=3000)
        assert tab.get_attribute("#live", "data-state") == "live"
    hidden.evaluate(HIDE, False)
    hidden.wait_for_selector(f"#q-{start}", timeout=3000)
    # The tabs still load pages: the browser's connections are not held by ten streams.
    for tab in tabs:
        tab.goto(f"{server.url}/ui/", timeout=10_000)
        live(tab)


def test_without_a_shared_worker_hidden_tabs_let_their_streams_go(
    browser: Any, server: Running
) -> None:
    with api(server, "admin") as c:
        c.put("/v1/limits", json={"max_running": 0})
    first = login(browser, server, "admin").page
    first.context.add_init_script("delete window.SharedWorker;")  # a browser without one
    tabs = [first] + [first.context.new_page() for _ in range(9)]
    for tab in tabs:  # a browser holds 6 connections per host: hidden tabs close their stream
        tab.goto(f"{server.url}/ui/admission")
        live(tab)
        tab.evaluate(HIDE, True)
        tab.wait_for_selector("#live[data-state=paused]")
    with api(server, "acme") as c:
        start = c.post("/v1/starts", json={"workflow": "echo"}).json()["start_id"]
    for tab in tabs:
        tab.evaluate(HIDE, False)
        live(tab)
        tab.wait_for_selector(f"#q-{start}", timeout=3000)
        tab.evaluate(HIDE, True)


def test_shutdown_with_open_streams_takes_under_a_second(browser: Any, server: Running) -> None:
    pages = [login(browser, server, "admin").page for _ in range(3)]
    for page in pages:
        live(page)
    t0 = time.monotonic()
    assert server.terminate(timeout=10) == 0
    assert time.monotonic() - t0 < 1.0


AXE_PAGES = ("/ui/", "/ui/admission", "/ui/fairness", "/ui/executions", "/ui/audit")


def test_axe_finds_no_serious_accessibility_violation(browser: Any, server: Running) -> None:
    _, queued = _queued_behind_one_slot(server)
    # The test injects axe-core itself: its own script must pass the page's CSP.
    page = login(browser, server, "admin", bypass_csp=True).page
    found: dict[str, Any] = {}
    for path in (*AXE_PAGES, f"/ui/starts/{queued}", "/ui/login"):
        page.goto(server.url + path)
        page.wait_for_load_state("load")
        page.add_script_tag(path=str(VENDOR / "axe.min.js"))
        result = page.evaluate(
            "async () => (await axe.run(document, {runOnly: ['wcag2a', 'wcag2aa']})).violations"
        )
        bad = [v["id"] for v in result if v["impact"] in ("serious", "critical")]
        if bad:
            found[path] = bad
    assert found == {}


def test_a_failed_execution_s_page_shows_why_and_resumes_it(browser: Any, server: Running) -> None:
    with api(server, "acme") as c:
        start = c.post("/v1/starts", json={"workflow": "charge", "input": {"card": "4242"}})
        eid = start.json()["execution_id"]
        deadline = time.monotonic() + 30
        while c.get(f"/v1/executions/{eid}").json()["status"] == "RUNNING":
            assert time.monotonic() < deadline, "charge did not finish"
            time.sleep(0.05)
    w = login(browser, server, "acme")
    page = w.page
    page.goto(f"{server.url}/ui/executions/{eid}")
    live(page)
    assert page.inner_text("#error") == (
        "ConnectionError: the payment service refused card 4242 (step charge, attempt 2)"
    )
    assert "raise ConnectionError" in page.inner_text("#traceback")
    assert page.inner_text("#input") == '{"card": "4242"}'
    assert "FAILED" in page.inner_text("#step-1") and "2" in page.inner_text("#step-1")
    assert page.locator("#do-cancel").count() == 0
    assert w.errors == [] and w.csp_violations() == []
    page.click("#do-resume")
    page.wait_for_url(re.compile(f"{re.escape(server.url)}/ui/(executions|starts)/"))
    assert eid not in page.url
    with api(server, "acme") as c:
        runs = c.get("/v1/executions", params={"workflow": "charge"}).json()["items"]
        assert [r["resumed_from"] for r in runs] == [eid, None]
    # axe-core on this page too (injected: its own script must pass the page's CSP).
    checked = login(browser, server, "acme", bypass_csp=True).page
    checked.goto(f"{server.url}/ui/executions/{eid}")
    checked.wait_for_load_state("load")
    checked.add_script_tag(path=str(VENDOR / "axe.min.js"))
    result = checked.evaluate(
        "async () => (await axe.run(document, {runOnly: ['wcag2a', 'wcag2aa']})).violations"
    )
    assert [v["id"] for v in result if v["impact"] in ("serious", "critical")] == []
