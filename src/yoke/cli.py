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

out = Console()
err = Console(stderr=True)


@app.command()
def demo(
    seconds: float = typer.Option(12.0, min=0.5, max=20.0, help="How long the flood runs."),
    seed: int = typer.Option(1, help="Seed of the arrival pattern."),
) -> None:
    """Watch one tenant flood a fair scheduler and a plain FIFO side by side."""
    from yoke.demo import run_demo

    asyncio.run(run_demo(seconds, seed=seed))


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
    log_level: str = typer.Option("info", "--log-level"),
) -> None:
    """Serve an app's v1 HTTP API on uvicorn; SIGTERM shuts down gracefully."""
    from yoke.errors import YokeError
    from yoke.server.serve import run

    try:
        run(app_spec, host=host, port=port, database_url=database_url, log_level=log_level)
    except YokeError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None


@app.command()
def worker(
    app_spec: str = typer.Option(..., "--app", help="The app to run, as module:attribute."),
    database_url: str = typer.Option(None, "--database-url", help="Overrides YOKE_DATABASE_URL."),
) -> None:
    """Run an app's actor worker (drain, timers, heartbeat) and executions until SIGTERM."""
    from yoke.app import run_worker
    from yoke.errors import YokeError
    from yoke.server.serve import load_app

    try:
        target = load_app(app_spec)
        if database_url:
            target.settings = target.settings.with_(database_url=database_url)
        asyncio.run(run_worker(target))
    except YokeError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None


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
            table.add_row(key, value if isinstance(value, str) else json.dumps(value))
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
        table.add_column(col)
    for item in items:
        table.add_row(*(_cell(item.get(c)) for c in columns))
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
    status: str = typer.Option(None, "--status"),
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
    """One execution: status, output or error, timestamps, parent."""
    with _client(url, token) as c:
        _, data = c.call("GET", f"/v1/executions/{execution_id}")
    _show(data, as_json, "execution")


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
    """Cancel a running execution."""
    with _client(url, token) as c:
        _, data = c.call("POST", f"/v1/executions/{execution_id}/cancel")
    _show(data, as_json, "execution")


@limits_app.command("show")
def limits_show(url: str = URL, token: str = TOKEN, as_json: bool = AS_JSON) -> None:
    """The admission limits in force."""
    with _client(url, token) as c:
        _, data = c.call("GET", "/v1/limits")
    _show(data, as_json, "limits")


@limits_app.command("set")
def limits_set(
    max_running: int = typer.Option(None, "--max-running", min=0),
    max_running_per_session: int = typer.Option(None, "--max-running-per-session", min=0),
    max_running_per_workflow: str = typer.Option(
        None, "--max-running-per-workflow", help='A number, or JSON like {"report": 2}.'
    ),
    max_queued: int = typer.Option(None, "--max-queued", min=0),
    on_limit: str = typer.Option("queue", "--on-limit", help="queue or reject."),
    url: str = URL,
    token: str = TOKEN,
    as_json: bool = AS_JSON,
) -> None:
    """Replace the limits (role ADMIN): a limit not given is off."""
    body = {
        "max_running": max_running,
        "max_running_per_session": max_running_per_session,
        "max_running_per_workflow": None
        if max_running_per_workflow is None
        else _json_arg(max_running_per_workflow, "--max-running-per-workflow"),
        "max_queued": max_queued,
        "on_limit": on_limit,
    }
    with _client(url, token) as c:
        _, data = c.call("PUT", "/v1/limits", body=body)
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
        items = [
            {**i, "at": _when(i["at"]), "change": _change(i["before"], i["after"])} for i in items
        ]
    _rows(items, ["seq", "at", "kind", "principal", "subject", "change"], as_json, "audit")


def _when(at: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


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
