"""The deployment recipe in deploy/ names only what exists: every `yoke` command line in the
Dockerfile, compose.yaml and the systemd units is a real command with real options (parsed
against the `yoke` command itself), the app it serves imports, every `YOKE_*` variable is a
setting yoke reads, files it copies or mounts exist, and the tokens file parses. Beside that,
what the recipe promises: a slim non-root image with a HEALTHCHECK on /healthz; PostgreSQL,
two `yoke serve --ha` and two `yoke worker --executors process`; hardened units (checked by
`systemd-analyze verify` where it is installed). No container engine runs here, so the
images are not built."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml

from yoke.cli import app, env_reference_text
from yoke.errors import BadValue
from yoke.server.auth import TokenBook
from yoke.server.serve import load_app

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
DEPLOYMENT_SYSTEMD = DEPLOY / "systemd"
SETTINGS = set(re.findall(r"`(YOKE_[A-Z0-9_]+)`", env_reference_text()))
YOKE_VARIABLE = re.compile(r"\b(YOKE_[A-Z0-9_]+)\b")
# What a root worker needs for the executors' uid tier, and no more (seen to suffice: a worker
# under `setpriv --bounding-set=-all,+<these>` ran two tenants' executors as their own uids,
# processed their events and stopped them; without DAC_READ_SEARCH an executor's start fails
# to enter its tenant's 0700 directory, which happens before the uid changes).
EXECUTOR_CAPABILITIES = {"SETUID", "SETGID", "CHOWN", "DAC_READ_SEARCH", "KILL"}


# -- the yoke command ----------------------------------------------------------------------
def check_command(argv: list[str]) -> None:
    """`argv` (`yoke ...`, or a path ending in /yoke) is a real command line: its subcommands
    exist, each option is one of that command's, each value is given, and `--app` imports."""
    assert Path(argv[0]).name == "yoke", argv
    command: Any = typer.main.get_group(app)
    args = argv[1:]
    while hasattr(command, "commands"):
        while args and args[0].startswith("--"):  # the group's own options (`--debug`)
            names = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
            assert args[0] in names, f"{args[0]} is not an option of yoke: {argv}"
            args = args[1:]
        assert args, f"no command after {argv}"
        assert args[0] in command.commands, f"yoke has no command {args[0]!r}: {argv}"
        command, args = command.commands[args[0]], args[1:]
    options = {o: p for p in command.params for o in (*p.opts, *p.secondary_opts)}
    positional = [p for p in command.params if not p.opts[0].startswith("-")]
    given: dict[str, str] = {}
    while args:
        arg = args.pop(0)
        if not arg.startswith("-"):
            assert positional, f"{command.name} takes no argument {arg!r}: {argv}"
            positional.pop(0)
            continue
        name, _, inline = arg.partition("=")
        assert name in options, f"{command.name} has no option {name}: {argv}"
        param = options[name]
        if param.is_flag:
            continue
        value = inline or (args.pop(0) if args else "")
        assert value and not value.startswith("--"), f"{name} needs a value: {argv}"
        given[param.name] = value
    if "app_spec" in given:
        load_app(given["app_spec"])  # the app named imports and is a yoke.App


def check_variables(text: str, where: str) -> set[str]:
    found = set(YOKE_VARIABLE.findall(text))
    unknown = found - SETTINGS
    assert not unknown, f"{where} names variables yoke does not read: {sorted(unknown)}"
    return found


def test_the_command_check_catches_what_is_not_there() -> None:
    check_command(["yoke", "serve", "--app", "examples.shop:app", "--ha", "--no-worker"])
    check_command(["yoke", "--debug", "db", "upgrade"])
    for bad in (
        ["yoke", "serve", "--app", "examples.shop:app", "--replicas", "2"],
        ["yoke", "serves", "--app", "examples.shop:app"],
        ["yoke", "db", "migrate"],
        ["yoke", "worker", "--app"],
        ["yoke", "serve", "--app", "examples.nowhere:app"],
    ):
        with pytest.raises((AssertionError, BadValue)):
            check_command(bad)
    with pytest.raises(AssertionError):
        check_variables("YOKE_DATABASE_URL=x YOKE_NO_SUCH_THING=1", "a test")


# -- the Dockerfile ------------------------------------------------------------------------
def instructions(path: Path) -> Iterator[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuation lines joined, comments left out."""
    joined = re.sub(r"\\\n", " ", path.read_text())
    for line in joined.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            yield word.upper(), rest.strip()


def exec_form(text: str) -> list[str]:
    import json

    value = json.loads(text)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), text
    return value


def test_the_dockerfile_is_slim_non_root_and_checks_healthz() -> None:
    steps = list(instructions(DEPLOY / "Dockerfile"))
    froms = [args for word, args in steps if word == "FROM"]
    assert froms and all("-slim" in f for f in froms), froms
    users = [args for word, args in steps if word == "USER"]
    assert users and users[-1] not in ("root", "0"), users
    (health,) = [args for word, args in steps if word == "HEALTHCHECK"]
    assert "/healthz" in health and "CMD" in health
    (cmd,) = [args for word, args in steps if word == "CMD"]
    check_command(exec_form(cmd))
    for word, args in steps:
        if word == "COPY" and "--from=" not in args:
            *sources, _ = args.split()
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: no such file in the repo"
        check_variables(args, f"Dockerfile {word}")
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    assert "*" in ignored and "!src" in ignored and "!pyproject.toml" in ignored


# -- compose.yaml --------------------------------------------------------------------------
def compose() -> dict[str, Any]:
    data = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert isinstance(data, dict)
    return data


def test_compose_runs_postgres_an_ha_pair_and_two_process_workers() -> None:
    services: dict[str, Any] = compose()["services"]
    commands = {name: s.get("command") for name, s in services.items()}
    assert any("postgres" in str(s.get("image", "")) for s in services.values())
    serves = [c for c in commands.values() if c and c[:2] == ["yoke", "serve"]]
    workers = [c for c in commands.values() if c and c[:2] == ["yoke", "worker"]]
    assert len(serves) == 2 and all("--ha" in c for c in serves), serves
    assert len(workers) == 2, workers
    assert all(c[c.index("--executors") + 1] == "process" for c in workers), workers
    assert ["yoke", "db", "upgrade"] in commands.values()  # migrations before the rest
    for name, command in commands.items():
        if command and command[0] == "yoke":
            check_command(command)
        service = services[name]
        check_variables(str(service.get("environment", {})), f"compose service {name}")
        if command and command[0] == "yoke" and name != "migrate":
            assert service["depends_on"]["migrate"]["condition"] == (
                "service_completed_successfully"
            )


def test_compose_mounts_a_tokens_file_that_parses() -> None:
    data = compose()
    for name, service in data["services"].items():
        env = service.get("environment", {})
        if service.get("command", [None])[0] == "yoke" and "YOKE_TOKENS_FILE" in env:
            assert env["YOKE_TOKENS_FILE"] == "/run/secrets/yoke_tokens", name
            assert "yoke_tokens" in service["secrets"], name
    mounted = Path(data["secrets"]["yoke_tokens"]["file"])
    example = DEPLOY / f"{mounted.stem}.example{mounted.suffix}"
    assert example.is_file(), f"{example} is the tokens file to copy from"
    book = TokenBook.from_file(example)
    assert len(book) >= 3


def test_compose_keeps_the_workers_to_what_their_executors_need() -> None:
    services: dict[str, Any] = compose()["services"]
    for name, service in services.items():
        command = service.get("command") or []
        if command[:2] == ["yoke", "worker"]:
            assert service["cap_drop"] == ["ALL"]
            assert set(service["cap_add"]) == EXECUTOR_CAPABILITIES, name
            assert "no-new-privileges:true" in service["security_opt"]
        elif command[:2] == ["yoke", "serve"]:
            assert service["cap_drop"] == ["ALL"] and "cap_add" not in service, name
            assert service.get("user") != "root", name


# -- systemd ---------------------------------------------------------------------------------
def unit(path: Path) -> dict[str, list[str]]:
    """`Key` -> its values, for every section (systemd allows a key more than once)."""
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
HARDENING = {
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "PrivateDevices": "yes",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "RestrictNamespaces": "yes",
    "RestrictSUIDSGID": "yes",
    "LockPersonality": "yes",
}


@pytest.mark.parametrize("path", UNITS, ids=[p.name for p in UNITS])
def test_a_unit_runs_real_commands_with_real_settings_hardened(path: Path) -> None:
    keys = unit(path)
    for key in ("ExecStartPre", "ExecStart"):
        for line in keys.get(key, []):
            check_command(shlex.split(line.lstrip("-+!@")))
    for value in keys.get("Environment", []):
        check_variables(value, f"{path.name} Environment")
    for name, value in HARDENING.items():
        assert keys.get(name) == [value], f"{path.name}: {name}={value} missing"
    env_files = keys.get("EnvironmentFile", [])
    assert env_files, path.name
    example = DEPLOY / "systemd" / f"{Path(env_files[0].lstrip('-')).name}.example"
    found = check_variables(example.read_text(), example.name)
    assert "YOKE_DATABASE_URL" in found


def test_the_worker_unit_keeps_what_executor_uids_need_and_the_server_nothing() -> None:
    serve = unit(DEPLOY / "systemd" / "yoke-serve.service")
    worker = unit(DEPLOY / "systemd" / "yoke-worker.service")
    assert serve["CapabilityBoundingSet"] == [""] and serve["User"] == ["yoke"]
    kept = set(worker["CapabilityBoundingSet"][0].split())
    assert kept == {f"CAP_{c}" for c in EXECUTOR_CAPABILITIES}
    assert "PrivateUsers" not in worker  # it would make every tenant uid unusable
    exec_start = shlex.split(worker["ExecStart"][0])
    assert exec_start[exec_start.index("--executors") + 1] == "process"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_knows_every_key_of_the_units(tmp_path: Path) -> None:
    for path in UNITS:
        shutil.copy(path, tmp_path / path.name)
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *(str(tmp_path / p.name) for p in UNITS)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # /opt/yoke is not installed here: that one complaint is expected, any other is not.
    problems = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if line.strip() and "is not executable" not in line
    ]
    assert not problems, problems


# -- docs/DEPLOYMENT.md --------------------------------------------------------------------
def test_the_deployment_guide_names_real_variables_metrics_and_commands() -> None:
    guide = (ROOT / "docs" / "DEPLOYMENT.md").read_text()
    check_variables(guide, "docs/DEPLOYMENT.md")
    source = "\n".join(p.read_text() for p in (ROOT / "src" / "yoke").rglob("*.py"))
    for metric in set(re.findall(r"`(yoke_[a-z_]+)", guide)):
        family = metric.removesuffix("_total")
        assert f'"{family}"' in source, f"docs/DEPLOYMENT.md names {metric}: no such metric"
    for line in re.findall(r"`(yoke (?:--debug )?[a-z][^`]*)`", guide):
        words = shlex.split(line.replace("...", ""))
        if len(words) > 1:
            check_command(words)
    for path in re.findall(r"`(deploy/[^`]+)`", guide):
        for name in path.split(", "):
            assert (ROOT / name).exists() or (DEPLOYMENT_SYSTEMD / name).exists(), name
