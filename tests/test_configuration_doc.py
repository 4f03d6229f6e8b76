"""docs/CONFIGURATION.md is the settings, generated (`yoke settings`): it fails here when a
setting changes without the page, and when a `YOKE_*` variable named anywhere in the source is
missing from it (a variable read outside the settings would otherwise go undocumented)."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from yoke.cli import app, env_reference_text

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "CONFIGURATION.md"


def test_the_page_is_the_settings() -> None:
    assert DOC.read_text() == env_reference_text(), (
        "docs/CONFIGURATION.md is stale: run `yoke settings > docs/CONFIGURATION.md`"
    )
    result = CliRunner().invoke(app, ["settings"])
    assert result.exit_code == 0 and result.output == DOC.read_text()


def test_every_variable_in_the_source_is_on_the_page() -> None:
    page = set(re.findall(r"`(YOKE_[A-Z0-9_]+)`", DOC.read_text()))
    named: set[str] = set()
    for path in (ROOT / "src" / "yoke").rglob("*.py"):
        named |= set(re.findall(r"\bYOKE_[A-Z0-9]+(?:_[A-Z0-9]+)*\b", path.read_text()))
    assert named - page == set()
