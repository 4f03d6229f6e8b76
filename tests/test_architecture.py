"""The import direction of docs/ARCHITECTURE.md, enforced on the source tree.

Parts import only the parts below them: the kernel nothing of yoke but `errors`, `store` neither
`executions`, `actors` nor `server`, and only `app` (and `store` itself) names a concrete
backend. A new module outside the known parts fails here until it is given a place.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "yoke"

BASE = {"errors", "clock", "retry", "lazy", "tracing"}
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    # The tracer's seam: plain verbs, no tracer (every part may tell it what happens).
    "tracing": set(),
    # `yoke[otel]`: the seam through OpenTelemetry; loaded by `app` only when tracing is on.
    "otel": {"errors", "tracing"},
    "lazy": set(),
    "clock": set(),
    "retry": {"errors"},
    "kernel": {"errors"},
    "fair": {"kernel"} | BASE,
    "config": {"errors", "retry"},
    "store": {"config"} | BASE,
    # The lease elector: the store's lease verbs in a loop; used by portals (and HA).
    "leases": {"store"} | BASE,
    # The one timer loop (sources of timers plug into it): below executions and actors.
    "timers": BASE,
    "executions": {"kernel", "store", "config", "leases", "timers"} | BASE,
    "actors": {"kernel", "fair", "store", "config", "leases", "timers"} | BASE,
    # `python -m yoke.executor`: the executor process's entry point (see actors/executor/).
    "executor": {"actors"} | BASE,
    "app": {"kernel", "fair", "store", "executions", "actors", "config", "leases", "otel", "timers"}
    | BASE,
    "server": {
        "__init__",
        "kernel",
        "fair",
        "store",
        "executions",
        "actors",
        "app",
        "config",
        "leases",
    }
    | BASE,
    "demo": {"fair"} | BASE,
    # `yoke.testing`: the in-memory actor store and the store conformance suite, for users.
    "testing": {"store", "actors"} | BASE,
    # The HTTP client speaks only the API: yoke's values and errors, never the server.
    "client": {"executions"} | BASE,
    # How the `yoke` command prints tables: rich alone.
    "tables": set(),
    "cli": {"__init__", "kernel", "fair", "store", "executions", "actors", "app", "server"}
    | {"config", "demo", "leases", "client", "tables", "otel"}
    | BASE,
    "__init__": {"kernel", "fair", "store", "executions", "actors", "app", "config"} | BASE,
    "__main__": {"cli"},
}
CONCRETE_BACKENDS = ("yoke.store.sqlite", "yoke.store.postgres")
# Third-party packages only one part may import: the rest of yoke runs without them.
ONLY_IN = {"opentelemetry": {"otel"}}
MAY_NAME_BACKENDS = {"app", "store", "cli"}


def part_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py")


def yoke_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == "yoke"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] == "yoke":
                found.append(node.module)
                found += [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            raise AssertionError(f"{path}: use absolute imports (`from yoke...`), not relative")
    return found


def target_part(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    name = parts[1]
    return name if (SRC / name).is_dir() or (SRC / f"{name}.py").is_file() else None


def test_every_module_imports_only_downwards() -> None:
    problems: list[str] = []
    modules = sorted(SRC.rglob("*.py"))
    assert len(modules) > 5
    for path in modules:
        part = part_of(path)
        assert part in ALLOWED, f"{path}: part {part!r} has no place in the import rule"
        for module in yoke_imports(path):
            target = target_part(module)
            if target is None or target == part:
                continue
            if target not in ALLOWED[part]:
                problems.append(f"{path.relative_to(SRC)} imports {module} ({part} -> {target})")
            if module.startswith(CONCRETE_BACKENDS) and part not in MAY_NAME_BACKENDS:
                problems.append(f"{path.relative_to(SRC)} names a concrete backend: {module}")
    assert not problems, "\n".join(problems)


def test_the_rule_catches_a_wrong_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from yoke.fair import create_scheduler\nimport yoke.server.app\n")
    imports = yoke_imports(bad)
    assert {target_part(m) for m in imports} >= {"fair"}
    assert "fair" not in ALLOWED["kernel"] and "server" not in ALLOWED["executions"]


def third_party_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_only_the_otel_module_imports_opentelemetry() -> None:
    """OpenTelemetry is an extra (`yoke[otel]`): yoke's core runs without it, so only
    `yoke/otel.py` (loaded when tracing is on) may import it."""
    problems: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        for package in third_party_imports(path) & set(ONLY_IN):
            if part_of(path) not in ONLY_IN[package]:
                problems.append(f"{path.relative_to(SRC)} imports {package}")
    assert not problems, "\n".join(problems)
    assert "opentelemetry" in third_party_imports(SRC / "otel.py")
