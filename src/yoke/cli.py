"""The `yoke` command. It parses arguments and calls `asyncio.run` once, at the edge.

`yoke serve` runs an app's HTTP server; the client verbs (`start`, `executions`, `limits`,
`audit`) talk to a running server over HTTP (`--url`/`YOKE_URL`, `--token`/`YOKE_TOKEN`) and
print tables, or JSON with `--json`; an error answer is printed to stderr and exits 1.
`yoke db upgrade` applies the store's migrations. This module must never hold API logic.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

import yoke

app = typer.Typer(
    name="yoke",
    help="yoke: a fair, durable, multi-tenant scheduler.",
    no_args_is_help=True,
    add_completion=False,
)
executions_app = typer.Typer(
    help="List, show, restart, resume and cancel executions.", no_args_is_help=True
)
limits_app = typer.Typer(help="Show or replace the admission limits.", no_args_is_help=True)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
app.add_typer(executions_app, name="executions")
app.add_typer(limits_app, name="limits")
app.add_typer(db_app, name="db")

URL = typer.Option(
    "http://127.0.0.1:8000", "--url", envvar="YOKE_URL", help="Base URL of the yoke server."
)
TOKEN = typer.Option(None, "--token", envvar="YOKE_TOKEN", help="Bearer token.")
AS_JSON = typer.Option(False, "--json", help="Print the server's JSON answer.")
WAIT = typer.Option(None, "--wait", min=0, max=60, help="Seconds to wait for the grant.")
LOG_LEVEL = typer.Option(
    None, "--log-level", help="debug, info, warning or error (default YOKE_LOG_LEVEL, info)."
)
LOG_FORMAT = typer.Option(
    None, "--log-format", help="text, or json: one object a line (default YOKE_LOG_FORMAT)."
)
EXECUTORS = typer.Option(
    None,
    "--executors",
    help="Where process() runs: inline (in the worker) or process (one process per tenant); "
    "default YOKE_EXECUTORS, else inline.",
)

out = Console()
err = Console(stderr=True)


@app.command()
def demo(
    seconds: float = typer.Option(None, min=0.5, max=20.0, help="How long the flood runs."),
    seed: int = typer.Option(1, help="Seed of the arrival pattern."),
    fair: bool = typer.Option(
        False, "--fair", help="The in-process comparison: yoke.fair beside a plain FIFO."
    ),
    keep: bool = typer.Option(False, "--keep", help="Keep serving the dashboard afterwards."),
    port: int = typer.Option(8000, min=0, max=65535, help="Port (another if taken)."),
) -> None:
    """Watch the durable scheduler and its dashboard while one tenant floods five light ones
    (with --fair: the in-process fair scheduler beside a plain FIFO)."""
    if fair:
        from yoke.demo import run_demo

        asyncio.run(run_demo(12.0 if seconds is None else seconds, seed=seed))
        return
    from yoke.server.demo import run

    asyncio.run(run(20.0 if seconds is None else seconds, keep=keep, port=port, seed=seed))


@app.command()
def version() -> None:
    """Print yoke's version."""
    typer.echo(yoke.__version__)


@app.command()
def serve(
    app_spec: str = typer.Option(..., "--app", help="The app to serve, as module:attribute."),
    host: str = typer.Option(
        "127.0.0.1", help="Address to listen on (loopback without YOKE_TOKENS_FILE)."
    ),
    port: int = typer.Option(8000, min=0, max=65535),
    database_url: str = typer.Option(None, "--database-url", help="Overrides YOKE_DATABASE_URL."),
    log_level: str = LOG_LEVEL,
    log_format: str = LOG_FORMAT,
    executors: str = EXECUTORS,
    forwarded_allow_ips: str = typer.Option(
        None,
        "--forwarded-allow-ips",
        help="Proxies whose X-Forwarded-Proto/-For are believed (YOKE_FORWARDED_ALLOW_IPS).",
    ),
    ha: bool = typer.Option(
        False,
        "--ha",
        help="One of a high-availability pair (PostgreSQL): lead and admit, or stand by "
        "and answer 503 (also YOKE_HA=1).",
    ),
    worker: bool = typer.Option(
        True,
        "--worker/--no-worker",
        help="Also run the actor worker (drain, timers, heartbeat); --no-worker only ingests "
        "and owns no instance.",
    ),
) -> None:
    """Serve an app's v1 HTTP API on uvicorn; SIGTERM shuts down gracefully."""
    from yoke.errors import YokeError
    from yoke.server.serve import run

    try:
        run(
            app_spec,
            host=host,
            port=port,
            database_url=database_url,
            log_level=log_level,
            log_format=log_format,
            executors=executors,
            forwarded_allow_ips=forwarded_allow_ips,
            ha=ha,
            worker=worker,
        )
    except YokeError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None


@app.command()
def worker(
    app_spec: str = typer.Option(..., "--app", help="The app to run, as module:attribute."),
    database_url: str = typer.Option(None, "--database-url", help="Overrides YOKE_DATABASE_URL."),
    log_level: str = LOG_LEVEL,
    log_format: str = LOG_FORMAT,
    executors: str = EXECUTORS,
    metrics_port: int = typer.Option(
        None, "--metrics-port", min=0, max=65535, help="Serve GET /metrics on this port."
    ),
    metrics_host: str = typer.Option(
        "127.0.0.1", "--metrics-host", help="Address of --metrics-port (no auth: keep it private)."
    ),
) -> None:
    """Run an app's actor worker (drain, timers, heartbeat) and executions until SIGTERM."""
    import logging

    from yoke.app import run_worker
    from yoke.errors import YokeError
    from yoke.server.logs import configure_logging
    from yoke.server.serve import load_app

    log = logging.getLogger("yoke.worker")
    try:
        target = load_app(app_spec)
        changes = {"database_url": database_url, "log_level": log_level, "log_format": log_format}
        target.settings = target.settings.with_(**{k: v for k, v in changes.items() if v})
        configure_logging(target.settings.log_level, target.settings.log_format)
        runtime = target.actors
        if executors:
            runtime.use_executors(executors)
        log.info(
            "worker %s starting: store %s, actors %s, concurrency %d, executors %s",
            runtime.worker_id,
            redact(target.settings.database_url),
            ", ".join(runtime.registry.names()) or "none",
            runtime.settings.concurrency,
            runtime.executors,
        )
        if metrics_port is None:
            asyncio.run(run_worker(target))
        else:
            from yoke.server.worker_metrics import run_worker_with_metrics

            asyncio.run(run_worker_with_metrics(target, host=metrics_host, port=metrics_port))
        log.info("worker %s stopped", runtime.worker_id)
    except YokeError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None


def redact(url: str) -> str:
    """A database URL without its password, for a log line."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


# -- client verbs ---------------------------------------------------------------------------------
@contextmanager
def _client(url: str, token: str | None) -> Iterator[Any]:
    from yoke.server.client import ApiError, Client

    try:
        with Client(url, token) as client:
            yield client
    except ApiError as exc:
        err.print(
            f"[red]error {exc.status or ''}[/red] {exc.title}"
            + (f": {exc.detail}" if exc.detail else "")
        )
        raise typer.Exit(1) from None


def _show(data: Any, as_json: bool, title: str | None = None) -> None:
    if as_json:
        typer.echo(json.dumps(data, indent=2, sort_keys=True))
        return
    table = Table(title=title, show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    for key, value in data.items():
        if key != "links":
            shown = _readable(key, value)
            table.add_row(key, shown if isinstance(shown, str) else json.dumps(shown))
    out.print(table)


def _rows(
    items: list[dict[str, Any]],
    columns: list[str],
    as_json: bool,
    title: str,
    extra: dict[str, Any] | None = None,
) -> None:
    if as_json:
        typer.echo(json.dumps({"items": items, **(extra or {})}, indent=2, sort_keys=True))
        return
    table = Table(title=title)
    for col in columns:
        # Ids and times are shown whole (a cut id cannot be pasted back); others wrap, never cut.
        keep = col.endswith(("_id", "_at")) or col == "at"
        cells = [_cell(_readable(col, i.get(col))) for i in items]
        whole = max(map(len, cells), default=0) if keep else 0
        table.add_column(col, no_wrap=bool(whole), min_width=whole or None, overflow="fold")
    for item in items:
        table.add_row(*(_cell(_readable(c, item.get(c))) for c in columns))
    out.print(table)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return value if isinstance(value, str) else json.dumps(value)


def _json_arg(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        err.print(f"[red]error:[/red] {what} must be JSON, got {text!r}")
        raise typer.Exit(2) from None


@app.command()
def start(
    workflow: str = typer.Argument(..., help="Workflow name."),
    input: str = typer.Option("null", "--input", help="Input as JSON."),
    session: str = typer.Option(None, "--session"),
    priority: int = typer.Option(0, "--priority"),
    idempotency_key: str = typer.Option(None, "--idempotency-key"),
    wait: float = WAIT,
    url: str = URL,
    token: str = TOKEN,
    as_json: bool = AS_JSON,
) -> None:
    """Ask for a slot: prints the execution id (granted) or the queue position (queued)."""
    body: dict[str, Any] = {
        "workflow": workflow,
        "input": _json_arg(input, "--input"),
        "priority": priority,
    }
    if session is not None:
        body["session"] = session
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    with _client(url, token) as c:
        _, data = c.call("POST", "/v1/starts", body=body, params={"wait": wait}, headers=headers)
    _show(data, as_json, "start")


@executions_app.command("list")
def executions_list(
    status: str = typer.Option(
        None, "--status", help="RUNNING, SUCCEEDED, FAILED, CANCELLED, ABORTED or TIMED_OUT."
    ),
    session: str = typer.Option(None, "--session"),
    workflow: str = typer.Option(None, "--workflow"),
    limit: int = typer.Option(100, "--limit", min=1, max=1000),
    cursor: str = typer.Option(None, "--cursor"),
    url: str = URL,
    token: str = TOKEN,
    as_json: bool = AS_JSON,
) -> None:
    """Executions, newest first."""
    with _client(url, token) as c:
        _, data = c.call(
            "GET",
            "/v1/executions",
            params={
                "status": status,
                "session": session,
                "workflow": workflow,
                "limit": limit,
                "cursor": cursor,
            },
        )
    _rows(
        data["items"],
        ["execution_id", "status", "workflow", "session", "error"],
        as_json,
        "executions",
        {"next_cursor": data.get("next_cursor")},
    )
    if not as_json and data.get("next_cursor"):
        out.print(f"more: --cursor {data['next_cursor']}")


@executions_app.command("show")
def executions_show(
    execution_id: str, url: str = URL, token: str = TOKEN, as_json: bool = AS_JSON
) -> None:
    """One execution: status, output or error (with its traceback), timestamps, parent."""
    with _client(url, token) as c:
        _, data = c.call("GET", f"/v1/executions/{execution_id}")
    _show(data, as_json, "execution")
    trace = (data.get("error") or {}).get("traceback")
    if trace and not as_json:
        out.print("traceback:", style="bold")
        out.print(trace, markup=False, highlight=False)


@executions_app.command("restart")
def executions_restart(
    execution_id: str,
    from_step: str = typer.Option(None, "--from-step"),
    idempotency_key: str = typer.Option(None, "--idempotency-key"),
    wait: float = WAIT,
    url: str = URL,
    token: str = TOKEN,
    as_json: bool = AS_JSON,
) -> None:
    """Restart an execution (whole, or from a step); it takes a slot like a new start."""
    body = {"from_step": from_step} if from_step else {}
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    with _client(url, token) as c:
        _, data = c.call(
            "POST",
            f"/v1/executions/{execution_id}/restart",
            body=body,
            params={"wait": wait},
            headers=headers,
        )
    _show(data, as_json, "start")


@executions_app.command("resume")
def executions_resume(
    execution_id: str,
    idempotency_key: str = typer.Option(None, "--idempotency-key"),
    wait: float = WAIT,
    url: str = URL,
    token: str = TOKEN,
    as_json: bool = AS_JSON,
) -> None:
    """Resume a failed, cancelled or aborted execution, re-using its steps."""
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    with _client(url, token) as c:
        _, data = c.call(
            "POST", f"/v1/executions/{execution_id}/resume", params={"wait": wait}, headers=headers
        )
    _show(data, as_json, "start")


@executions_app.command("cancel")
def executions_cancel(
    execution_id: str, url: str = URL, token: str = TOKEN, as_json: bool = AS_JSON
) -> None:
    """Cancel a running execution, whichever server runs it (its children stop with it)."""
    with _client(url, token) as c:
        _, data = c.call("POST", f"/v1/executions/{execution_id}/cancel")
    _show(data, as_json, "execution")


@limits_app.command("show")
def limits_show(url: str = URL, token: str = TOKEN, as_json: bool = AS_JSON) -> None:
    """The admission limits in force."""
    with _client(url, token) as c:
        _, data = c.call("GET", "/v1/limits")
    _show(data, as_json, "limits")


LIMITS = ("max_running", "max_running_per_session", "max_running_per_workflow", "max_queued")
CLEAR = typer.Option(None, "--clear", help=f"Turn a limit off (repeatable): {', '.join(LIMITS)}.")


@limits_app.command("set")
def limits_set(
    max_running: int = typer.Option(None, "--max-running", min=0),
    max_running_per_session: int = typer.Option(None, "--max-running-per-session", min=0),
    max_running_per_workflow: str = typer.Option(
        None, "--max-running-per-workflow", help='A number, or JSON like {"report": 2}.'
    ),
    max_queued: int = typer.Option(None, "--max-queued", min=0),
    on_limit: str = typer.Option(None, "--on-limit", help="queue or reject."),
    clear: list[str] = CLEAR,
    url: str = URL,
    token: str = TOKEN,
    as_json: bool = AS_JSON,
) -> None:
    """Change the limits given (role ADMIN); the others stay as they are."""
    given: dict[str, Any] = {
        "max_running": max_running,
        "max_running_per_session": max_running_per_session,
        "max_running_per_workflow": None
        if max_running_per_workflow is None
        else _json_arg(max_running_per_workflow, "--max-running-per-workflow"),
        "max_queued": max_queued,
        "on_limit": on_limit,
    }
    changes = {k: v for k, v in given.items() if v is not None}
    for name in clear or ():
        if name not in LIMITS:
            err.print(f"[red]error:[/red] --clear takes one of {', '.join(LIMITS)}, got {name!r}")
            raise typer.Exit(2)
        if name in changes:
            err.print(f"[red]error:[/red] {name} is both set and cleared")
            raise typer.Exit(2)
        changes[name] = None
    with _client(url, token) as c:
        # The server replaces the whole object: start from what is in force.
        _, current = c.call("GET", "/v1/limits")
        _, data = c.call("PUT", "/v1/limits", body={**current, **changes})
    _show(data, as_json, "limits")


@app.command()
def audit(
    limit: int = typer.Option(100, "--limit", min=1, max=1000),
    offset: int = typer.Option(0, "--offset", min=0),
    url: str = URL,
    token: str = TOKEN,
    as_json: bool = AS_JSON,
) -> None:
    """Control-log entries (role ADMIN): who changed what, when, before and after."""
    with _client(url, token) as c:
        _, data = c.call("GET", "/v1/audit", params={"limit": limit, "offset": offset})
    items = data["items"]
    if not as_json:
        items = [{**i, "change": _change(i["before"], i["after"])} for i in items]
    _rows(items, ["seq", "at", "kind", "principal", "subject", "change"], as_json, "audit")


def _when(at: float) -> str:
    """A time in the local zone, ISO 8601 to the second (with its offset)."""
    import datetime

    return datetime.datetime.fromtimestamp(at).astimezone().isoformat(timespec="seconds")


def _readable(key: str, value: Any) -> Any:
    """Times (`*_at`, as epoch seconds in the API) in local ISO form; an execution's error as
    `Type: message (step s, attempt n)` (its traceback is printed under the table); the rest
    as it is."""
    if (key == "at" or key.endswith("_at")) and isinstance(value, int | float):
        return _when(value)
    if key == "error" and isinstance(value, dict):
        text = f"{value.get('type') or 'Error'}: {value.get('message')}"
        if value.get("step") is not None:
            text += f" (step {value['step']!r}, attempt {value.get('attempt')})"
        return text
    return value


def _change(before: Any, after: Any) -> str:
    """Only what changed, as `field: old -> new`, so a wide limits object stays readable."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        return f"{json.dumps(before)} -> {json.dumps(after)}"
    keys = [k for k in after if before.get(k) != after.get(k)]
    keys += [k for k in before if k not in after]
    return (
        ", ".join(f"{k}: {json.dumps(before.get(k))} -> {json.dumps(after.get(k))}" for k in keys)
        or "no change"
    )


def env_reference_text() -> str:
    """docs/CONFIGURATION.md: every variable yoke reads, generated from the settings."""
    from yoke.actors.executor.settings import ENV as EXECUTOR_ENV
    from yoke.actors.executor.settings import ExecutorSettings
    from yoke.actors.settings import ENV, ActorSettings
    from yoke.config import EnvVar, Settings, env_reference, env_vars

    client = [
        EnvVar(name=str(o.envvar), default=str(o.default or "-"), help=str(o.help))
        for o in (URL, TOKEN)
    ]
    internal = [
        EnvVar(name=name, default="-", help=help)
        for name, help in (
            ("YOKE_EXECUTOR_FD", "the executor's end of its socketpair to the worker"),
            ("YOKE_EXECUTOR_PARENT", "the worker's pid (the executor exits if it is gone)"),
            ("YOKE_EXECUTOR_LIMITS", "the limits the executor applies to itself (JSON)"),
            ("YOKE_EXECUTOR_PRELOAD", "yoke's modules the app uses, imported before it is bound"),
        )
    ]
    return env_reference(
        [
            ("Server, executions and logs (`yoke serve`, `yoke worker`)", env_vars(Settings)),
            ("Actor workers", env_vars(ActorSettings, ENV.__getitem__)),
            (
                'Executor processes (`executors="process"`) and their lifecycle',
                env_vars(ExecutorSettings, EXECUTOR_ENV.__getitem__),
            ),
            ("Set by a worker for its executor processes (never by hand)", internal),
            ("Client commands (`yoke start`, `yoke limits`...)", client),
        ]
    )


@app.command("settings")
def settings_command() -> None:
    """Print every environment variable yoke reads, with its default and meaning (Markdown)."""
    typer.echo(env_reference_text(), nl=False)


@db_app.command("upgrade")
def db_upgrade(
    database_url: str = typer.Option(None, "--database-url", help="Overrides YOKE_DATABASE_URL."),
) -> None:
    """Apply pending schema migrations."""
    from yoke.app import upgrade
    from yoke.errors import YokeError

    try:
        version = asyncio.run(upgrade(database_url))
    except YokeError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    typer.echo(f"schema at version {version}")


def main() -> None:
    app()
