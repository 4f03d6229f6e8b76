"""Screenshots of every dashboard view for docs/ (`python -m tests.ui.shoot`): it runs
`yoke demo --keep`, waits for the flood to build a queue, and shoots each page in Chromium."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.server.e2e import free_port
from tests.ui.conftest import CHROMIUM, FLAGS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def main(only: tuple[str, ...] = ()) -> None:
    """Shoot every page, or those named in `only` (`python -m tests.ui.shoot schedules`)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    demo = subprocess.Popen(
        [sys.executable, "-m", "yoke", "demo", "--keep", "--seconds", "12", "--port", str(port)],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the demo did not start")
            time.sleep(0.2)
        time.sleep(6)  # let the flood build a queue
        # A low-priority start waits behind the flood's: the Why page has something to say.
        http = httpx.Client(base_url=url, timeout=30)  # the demo's flood slows every answer
        low = http.post(
            "/v1/starts",
            json={"workflow": "order", "input": {}, "session": "ada", "priority": -5},
        ).json()
        # Fleet-wide weights for the Actors page's table (the flood's events count for less).
        http.put("/v1/tenants/flood", json={"weight": 0.5, "actors": {"max_running": 2}})
        http.put("/v1/tenants/ada", json={"weight": 2.0})
        done = http.get("/v1/executions", params={"status": "SUCCEEDED", "limit": 1})
        # A refund whose step is retried and gives up: the page shows why, and how to resume.
        declined = http.post(
            "/v1/starts",
            json={"workflow": "refund", "input": {"card": "4000000000000000"}, "session": "ada"},
            params={"wait": 30},
        ).json()
        # Schedules of two tenants: one ticking every 2 s has run by the time it is shot.
        schedules: dict[tuple[str, str], dict[str, object]] = {
            ("ada", "nightly-report"): {"cron": "30 2 * * *", "timezone": "Europe/Berlin"},
            ("ada", "heartbeat"): {"every": 2, "session": "ada/heartbeat"},
            ("flood", "hourly-sync"): {"cron": "0 * * * *", "catch_up": "skip"},
        }
        for (tenant, name), cadence in schedules.items():
            http.put(
                f"/v1/schedules/{name}",
                params={"tenant": tenant},
                json={"workflow": "order", "input": {}, **cadence},
            ).raise_for_status()
        # Delayed starts of two tenants: the Queue page lists them under Scheduled.
        for session, delay in (("ada", 90), ("grace", 600)):
            http.post(
                "/v1/starts",
                json={"workflow": "order", "input": {}, "session": session, "delay": delay},
            ).raise_for_status()
        time.sleep(3)  # the refund's three attempts and their pauses; two heartbeats
        pages = {
            "overview": "/ui/",
            "admission": "/ui/admission",
            "fairness": "/ui/fairness",
            "why": f"/ui/starts/{low['start_id']}",
            "executions": "/ui/executions",
            "execution": f"/ui/executions/{done.json()['items'][0]['execution_id']}",
            "execution-failed": f"/ui/executions/{declined['execution_id']}",
            "actors": "/ui/actors",
            "instances": "/ui/actors/tally?tenant=flood",
            "instance": "/ui/actors/tally/instances/flood?tenant=flood",
            "workers": "/ui/workers",
            "timers": "/ui/timers",
            "schedules": "/ui/schedules",
            "audit": "/ui/audit",
        }
        from playwright.sync_api import sync_playwright

        DOCS.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page(viewport={"width": 1280, "height": 760})
            for name, path in pages.items():
                if only and name not in only:
                    continue
                page.goto(url + path)
                page.wait_for_selector("#live[data-state=live]")
                page.wait_for_timeout(1200)  # charts fetch their series
                page.screenshot(path=str(DOCS / f"{name}.png"))
            browser.close()
    finally:
        demo.send_signal(signal.SIGINT)
        demo.wait(30)


if __name__ == "__main__":
    main(tuple(sys.argv[1:]))
