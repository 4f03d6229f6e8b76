"""Fixtures of the dashboard's browser tests: Debian's Chromium driven by Playwright, and a real
`yoke serve` (SQLite, tokens file) per test.

The browser is never downloaded: Playwright launches `/usr/bin/chromium` (or `YOKE_CHROMIUM`).
Without it these tests are skipped locally and fail when `YOKE_REQUIRE_BROWSER=1` (CI), as
PostgreSQL's tests do. One browser per module, a fresh context (cookies, storage) per test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server.conftest import TOKENS, TOKENS_TOML, db_url, serve, start, tokens_file
from tests.server.e2e import Running, yoke_serve

__all__ = [
    "db_url",
    "serve",
    "start",
    "tokens_file",
]  # the server tests' in-process fixtures, shared

CHROMIUM = os.environ.get("YOKE_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Counts Content-Security-Policy violations of each page (read back by `csp_violations`).
CSP_WATCH = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(e.violatedDirective + " " + e.blockedURI);
});
"""


# One browser per module: sync Playwright runs an event loop in this thread while it is open,
# which the asyncio tests of other modules must not find running.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        message = f"no Chromium at {CHROMIUM} (apt-get install chromium)"
        if os.environ.get("YOKE_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Running]:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS_TOML)
    env = {"YOKE_TOKENS_FILE": str(tokens)}
    with yoke_serve(f"sqlite:///{tmp_path}/ui.db", tmp_path, env=env) as running:
        yield running


def api(server: Running, who: str) -> httpx.Client:
    return httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {TOKENS[who][0]}"}, timeout=10
    )


class Watched:
    """A page with its console errors and CSP violations collected."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))

    def csp_violations(self) -> list[str]:
        found: list[str] = self.page.evaluate("window.__csp || []")
        return found


def login(browser: Any, server: Running, who: str, **context: Any) -> Watched:
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, **context)
    ctx.add_init_script(CSP_WATCH)
    page = ctx.new_page()
    watched = Watched(page)
    page.goto(f"{server.url}/ui/login")
    page.fill("#token", TOKENS[who][0])
    page.click("button[type=submit]")
    page.wait_for_url(f"{server.url}/ui/")
    return watched


def live(page: Any, timeout: float = 5000) -> None:
    page.wait_for_selector("#live[data-state=live]", timeout=timeout)
