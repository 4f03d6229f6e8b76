"""The `yoke` command. It parses arguments and calls `asyncio.run` once, at the edge.

`yoke serve` runs an app's HTTP server and `yoke worker` its actor worker; either, and
`yoke db upgrade`, first connects to the database once, so that a command that cannot start
says why in one line and exits 2 (an option, a URL, the app to change) or 3 (the database does
not answer or refuses the credentials); `--debug` adds the traceback. The client verbs
(`start`, `executions`, `limits`, `tenants`, `schedules`, `audit`, `workers`, `events`) talk
to a running server through `yoke.client` (`--url`/`YOKE_URL`, `--token`/`YOKE_TOKEN`) and
print tables that fit the terminal without cutting a word (`yoke.tables`), or JSON with
`--json`; an error answer is printed to stderr in one line and exits 1. This module must never
hold API logic.

No secret stays on a command line, where every user of the host reads it (`/proc/<pid>/
cmdline`): the database URL comes from `YOKE_DATABASE_URL` or `--database-url-file`, and when
`--database-url` or `--token` was given anyway, the process title is rewritten at once with
their values masked (`setproctitle`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import shutil
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

import yoke
from yoke.tables import render, render_pairs

if TYPE_CHECKING:
    from yoke.client import Client

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
tenants_app = typer.Typer(
    help="List and change the tenants' settings (`*`: the defaults).", no_args_is_help=True
)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
app.add_typer(executions_app, name="executions")
app.add_typer(limits_app, name="limits")
app.add_typer(tenants_app, name="tenants")
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

DATABASE_URL = typer.Option(
    None, "--database-url", help="Overrides YOKE_DATABASE_URL (visible to ps: prefer the file)."
)
DATABASE_URL_FILE = typer.Option(
    None,
    "--database-url-file",
    help="Read the database URL from this file (kept off the command line).",
    dir_okay=False,
)
SECRET_FLAGS = ("--database-url", "--token")

out = Console()
err = Console(stderr=True)
DEBUG = False  # `yoke --debug ...`: an error shows its traceback


@app.callback()
def options(
    debug: bool = typer.Option(
        False, "--debug", help="Show an error's traceback (without it: one line naming it)."
    ),
) -> None:
    """yoke: a fair, durable, multi-tenant scheduler."""
    global DEBUG
    DEBUG = debug


def fail(exc: BaseException) -> NoReturn:
    """A command that cannot start: one line naming the cause on stderr (and the traceback
    with `--debug`); exit 3 when the database cannot be reached or refuses the credentials,
    2 for what the operator must change (an option, a URL, the app, a settings value)."""
    from yoke.errors import StoreUnavailable

    if DEBUG:
        traceback.print_exception(exc, file=sys.stderr)
    err.print(f"[red]error:[/red] {escape(' '.join(str(exc).split()))}", soft_wrap=True)
    raise typer.Exit(3 if isinstance(exc, StoreUnavailable) else 2)


def database_url_of(url: str | None, path: Path | None) -> str | None:
    """The URL given by flag or by file (its first line); None: the settings' own."""
    if path is None:
        return url
    from yoke.errors import BadValue

    if url:
        raise BadValue("give --database-url or --database-url-file, not both")
    try:
        text = path.read_text().strip()
    except OSError as exc:
        raise BadValue(f"cannot read --database-url-file {path}: {exc.strerror}") from None
    if not text:
        raise BadValue(f"--database-url-file {path} is empty")
    return text.splitlines()[0].strip()


def masked_title(argv: list[str]) -> str | None:
    """`argv` as a process title with the values of `SECRET_FLAGS` masked; None if it holds
    none."""
    shown: list[str] = []
    hidden = False
    value_next = False
    for arg in argv:
        name, eq, _ = arg.partition("=")
        if value_next:
            shown.append("***")
            hidden, value_next = True, False
        elif name in SECRET_FLAGS and eq:
            shown.append(f"{name}=***")
            hidden = True
        else:
            shown.append(arg)
            value_next = arg in SECRET_FLAGS
    return " ".join(shown) if hidden else None


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
    database_url: str = DATABASE_URL,
    database_url_file: Path = DATABASE_URL_FILE,
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
            database_url=database_url_of(database_url, database_url_file),
            log_level=log_level,
            log_format=log_format,
            executors=executors,
            forwarded_allow_ips=forwarded_allow_ips,
            ha=ha,
            worker=worker,
        )
    except YokeError as exc:
        fail(exc)


@app.command()
def worker(
    app_spec: str = typer.Option(..., "--app", help="The app to run, as module:attribute."),
    database_url: str = DATABASE_URL,
    database_url_file: Path = DATABASE_URL_FILE,
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

    from yoke.app import reach, run_worker
    from yoke.errors import YokeError
    from yoke.server.logs import configure_logging
    from yoke.server.serve import load_app

    log = logging.getLogger("yoke.worker")
    try:
        target = load_app(app_spec)
        url = database_url_of(database_url, database_url_file)
        changes = {"database_url": url, "log_level": log_level, "log_format": log_format}
        target.settings = target.settings.with_(**{k: v for k, v in changes.items() if v})
        configure_logging(target.settings.log_level, target.settings.log_format)
        target.tracing.export()  # YOKE_TRACING=otel: spans to the exporter OTEL_* names
        runtime = target.actors
        if executors:
            runtime.use_executors(executors)
        runtime.check_executors()  # as root without a uid or namespaces: refuse, exit 2
        asyncio.run(reach(target.settings))  # the cause in one line, before anything starts
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
        fail(exc)


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
def _client(url: str, token: str | None) -> Iterator[Client]:
    """A `yoke.client.Client`; an error answer is printed in one line and exits 1."""
    from yoke.client import Client
    from yoke.errors import YokeError

    try:
        with Client(url, token) as client:
            yield client
    except YokeError as exc:
        problem = exc.problem or {}
        status = problem.get("status", exc.status)
        title = problem.get("title", exc.title)
        text = str(exc)
        err.print(
            f"[red]error {status}[/red] {escape(str(title))}"
            + (f": {escape(text)}" if text and text != title else "")
        )
        raise typer.Exit(1) from None


def _plain(value: Any) -> Any:
    """A value of the client (dataclasses, enums, tuples) as the JSON it came from."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _echo_json(data: Any) -> None:
    typer.echo(json.dumps(_plain(data), indent=2, sort_keys=True))


def _screen() -> Console:
    """Standard output at its width now (`COLUMNS`, else the terminal's, else 80): a console
    made once keeps the width it first saw."""
    return Console(width=shutil.get_terminal_size().columns)


def _show(value: Any, as_json: bool, title: str | None = None) -> None:
    if as_json:
        _echo_json(value)
        return
    data = _plain(value)
    pairs = [(k, _cell(_readable(k, v))) for k, v in data.items() if k != "links"]
    screen = _screen()
    screen.print(render_pairs(title, pairs, width=screen.width))


def _rows(
    items: Sequence[Any],
    columns: list[str],
    as_json: bool,
    title: str,
    extra: dict[str, Any] | None = None,
) -> None:
    """A table of `items` (most important column first): whole ids and times, within the
    terminal's width; a column that does not fit is left out, and named."""
    if as_json:
        _echo_json({"items": items, **(extra or {})})
        return
    plain = [_plain(i) for i in items]
    rows = [[_cell(_readable(c, i.get(c))) for c in columns] for i in plain]
    screen = _screen()
    table, left_out = render(title, columns, rows, width=screen.width)
    screen.print(table)
    if left_out:
        screen.print(f"not shown at this width: {', '.join(left_out)} (--json shows every field)")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return value if isinstance(value, str) else json.dumps(value)


def _json_arg(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        err.print(f"[red]error:[/red] {what} must be JSON, got {escape(repr(text))}")
        raise typer.Exit(2) from None


@app.command()
def start(
    workflow: str = typer.Argument(..., help="Workflow name."),
    input: str = typer.Option("null", "--input", help="Input as JSON."),
    session: str = typer.Option(None, "--session"),
    priority: int = typer.Option(0, "--priority"),
    idempotency_key: str = typer.Option(None, "--idempotency-key"),
    wait: float = WAIT,
    at: float = typer.Option(
        None, "--at", help="Start at this time (epoch seconds): SCHEDULED until then."
    ),
    delay: float = typer.Option(
        None, "--delay", help="Start this many seconds from now: SCHEDULED until then."
    ),
    result: bool = typer.Option(
        False,
        "--result",
        help="Wait for the execution to end (within --wait seconds if given) and print its "
        "output as JSON; exit 1 unless it succeeded.",
    ),
    url: str = URL,
    token: str = TOKEN,
    as_json: bool = AS_JSON,
) -> None:
    """Ask for a slot: prints the execution id (granted), the queue position (queued) or when
    it is due (scheduled, with --at or --delay)."""
    value = _json_arg(input, "--input")
    if result and (at is not None or delay is not None):
        err.print("[red]error:[/red] --result waits for a start now; not with --at or --delay")
        raise typer.Exit(2)
    if result:
        _start_for_result(workflow, value, session, priority, idempotency_key, wait, url, token)
        return
    with _client(url, token) as c:
        started = c.start(
            workflow,
            value,
            session=session,
            priority=priority,
            wait=wait,
            idempotency_key=idempotency_key,
            at=at,
            delay=delay,
        )
    _show(started, as_json, "start")


@app.command()
def signal(
    execution_id: str = typer.Argument(..., help="The execution to signal."),
    name: str = typer.Argument(..., help="The signal's name (what ctx.wait_for waits for)."),
    payload: str = typer.Option("null", "--payload", help="Payload as JSON."),
    idempotency_key: str = typer.Option(None, "--idempotency-key"),
    url: str = URL,
    token: str = TOKEN,
    as_json: bool = AS_JSON,
) -> None:
    """Send a signal to an execution: its wait for it ends, or it is kept for the next."""
    value = _json_arg(payload, "--payload")
    with _client(url, token) as c:
        execution = c.signal(execution_id, name, value, idempotency_key=idempotency_key)
    _show(execution, as_json, "execution")


def _start_for_result(
    workflow: str,
    value: Any,
    session: str | None,
    priority: int,
    idempotency_key: str | None,
    wait: float | None,
    url: str,
    token: str | None,
) -> None:
    """`yoke start --result`: the output of a succeeded execution on stdout; anything else on
    stderr, exit 1."""
    with _client(url, token) as c:
        try:
            done = c.run(
                workflow,
                value,
                session=session,
                priority=priority,
                idempotency_key=idempotency_key,
                timeout=wait,
            )
        except TimeoutError as exc:
            err.print(f"[red]error:[/red] {escape(str(exc))} after {wait:g} s")
            raise typer.Exit(1) from None
    if done.status.value == "SUCCEEDED":
        typer.echo(json.dumps(done.output, indent=2, sort_keys=True))
        return
    state = done.status.value + ("" if done.status.finished else f" after {wait:g} s")
    detail = f": {done.error}" if done.error else ""
    err.print(f"[red]error:[/red] execution {done.execution_id} {state}{escape(detail)}")
    raise typer.Exit(1)


@executions_app.command("list")
def executions_list(
    status: str = typer.Option(
        None,
        "--status",
        help="RUNNING, WAITING, SUCCEEDED, FAILED, CANCELLED, ABORTED or TIMED_OUT.",
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
        page = c.executions(
            status=status, session=session, workflow=workflow, limit=limit, cursor=cursor
        )
    _rows(
        page.items,
        ["execution_id", "status", "workflow", "session", "error"],
        as_json,
        "executions",
        {"next_cursor": page.next_cursor},
    )
    if not as_json and page.next_cursor:
        _screen().print(f"more: --cursor {page.next_cursor}")


@executions_app.command("show")
def executions_show(
    execution_id: str, url: str = URL, token: str = TOKEN, as_json: bool = AS_JSON
) -> None:
    """One execution: status, output or error (with its traceback), timestamps, parent."""
    with _client(url, token) as c:
        execution = c.execution(execution_id)
    _show(execution, as_json, "execution")
    trace = None if execution.error is None else execution.error.traceback
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
    with _client(url, token) as c:
        started = c.restart(
            execution_id, from_step=from_step, wait=wait, idempotency_key=idempotency_key
        )
    _show(started, as_json, "start")


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
    with _client(url, token) as c:
        started = c.resume(execution_id, wait=wait, idempotency_key=idempotency_key)
    _show(started, as_json, "start")


@executions_app.command("cancel")
def executions_cancel(
    execution_id: str, url: str = URL, token: str = TOKEN, as_json: bool = AS_JSON
) -> None:
    """Cancel a running execution, whichever server runs it (its children stop with it)."""
    with _client(url, token) as c:
        execution = c.cancel(execution_id)
    _show(execution, as_json, "execution")


@limits_app.command("show")
def limits_show(url: str = URL, token: str = TOKEN, as_json: bool = AS_JSON) -> None:
    """The admission limits in force."""
    with _client(url, token) as c:
        limits = c.limits()
    _show(limits, as_json, "limits")


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
    from yoke.errors import YokeError

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
        current = c.limits()
        try:
            wanted = dataclasses.replace(current, **changes)
        except YokeError as exc:
            err.print(f"[red]error:[/red] {escape(str(exc))}")
            raise typer.Exit(2) from None
        limits = c.set_limits(wanted)
    _show(limits, as_json, "limits")


TENANT_FIELDS = {
    "weight": (),
    "executions": ("max_running", "max_queued", "rate", "burst"),
    "actors": ("max_running", "append_rate", "append_burst", "max_instances", "max_timers"),
}


def _tenant_body(assignments: list[str]) -> dict[str, Any]:
    """`weight=2 executions.max_running=5 actors.append_rate=null` as the PUT body."""
    body: dict[str, Any] = {}
    for text in assignments:
        name, eq, raw = text.partition("=")
        section, _, field = name.partition(".")
        known = section in TENANT_FIELDS and (
            (field in TENANT_FIELDS[section]) if TENANT_FIELDS[section] else not field
        )
        if not eq or not known:
            names = ["weight"] + [f"{s}.{f}" for s, fs in TENANT_FIELDS.items() for f in fs]
            err.print(f"[red]error:[/red] give FIELD=VALUE, FIELD one of {', '.join(names)}")
            raise typer.Exit(2)
        value = _json_arg(raw, name)
        if field:
            body.setdefault(section, {})[field] = value
        else:
            body[section] = value
    return body


def _tenant_path(tenant: str) -> str:
    from urllib.parse import quote

    return f"/v1/tenants/{quote(tenant, safe='')}"


@tenants_app.command("list")
def tenants_list(url: str = URL, token: str = TOKEN, as_json: bool = AS_JSON) -> None:
    """The tenants with settings (a plain tenant: its own and the defaults, `*`)."""
    with _client(url, token) as c:
        _, data = c.call("GET", "/v1/tenants")
    items = data["items"]
    if not as_json:
        items = [_flat_tenant(i) for i in items]
    columns = ["tenant", "weight", "executions", "actors", "updated_by", "updated_at"]
    _rows(items, columns, as_json, "tenants")


def _flat_tenant(item: dict[str, Any]) -> dict[str, Any]:
    """Only the fields set, `name=value`, so a row stays readable."""

    def set_fields(d: dict[str, Any]) -> str:
        return " ".join(f"{k}={json.dumps(v)}" for k, v in d.items() if v is not None) or "-"

    return {
        **item,
        "executions": set_fields(item["executions"]),
        "actors": set_fields(item["actors"]),
    }


TENANT_ARG = typer.Argument(..., help="The tenant, or * for the defaults.")
ASSIGNMENTS = typer.Argument(
    ..., help="FIELD=VALUE (JSON; null clears), e.g. executions.max_running=5."
)
CLEARED = typer.Argument(None, help="FIELDs to clear (e.g. executions.rate); none: every field.")


@tenants_app.command("set")
def tenants_set(
    tenant: str = TENANT_ARG,
    assignments: list[str] = ASSIGNMENTS,
    url: str = URL,
    token: str = TOKEN,
    as_json: bool = AS_JSON,
) -> None:
    """Change the fields given of a tenant's settings (role ADMIN); the others stay."""
    body = _tenant_body(assignments)
    with _client(url, token) as c:
        _, data = c.call("PUT", _tenant_path(tenant), body=body)
    _show(data, as_json, "tenant")


@tenants_app.command("clear")
def tenants_clear(
    tenant: str = TENANT_ARG,
    fields: list[str] = CLEARED,
    url: str = URL,
    token: str = TOKEN,
    as_json: bool = AS_JSON,
) -> None:
    """Clear fields of a tenant's settings (role ADMIN): it follows `*` for them again."""
    names = fields or ["weight"] + [f"{s}.{f}" for s, fs in TENANT_FIELDS.items() for f in fs]
    body = _tenant_body([f"{name}=null" for name in names])
    with _client(url, token) as c:
        _, data = c.call("PUT", _tenant_path(tenant), body=body)
    _show(data, as_json, "tenant")


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
        entries = c.audit(limit=limit, offset=offset)
    if as_json:
        _echo_json({"items": entries})
        return
    items = [{**_plain(e), "change": _change(e.before, e.after)} for e in entries]
    _rows(items, ["seq", "at", "kind", "principal", "subject", "change"], False, "audit")


# -- schedules ----------------------------------------------------------------------------------
schedules_app = typer.Typer(
    help="List, set and delete schedules: workflows started on a cron expression or every N "
    "seconds.",
    no_args_is_help=True,
)
app.add_typer(schedules_app, name="schedules")
SCHEDULE_TENANT = typer.Option(
    None, "--tenant", help="The schedule's tenant (role OPERATOR or ADMIN; a tenant: its own)."
)


@schedules_app.command("list")
def schedules_list(
    tenant: str = SCHEDULE_TENANT,
    limit: int = typer.Option(100, "--limit", min=1, max=1000),
    url: str = URL,
    token: str = TOKEN,
    as_json: bool = AS_JSON,
) -> None:
    """Schedules with their next and last runs (a plain tenant: its own)."""
    import time

    with _client(url, token) as c:
        items = c.schedules(tenant=tenant, limit=limit)
    if as_json:
        _echo_json({"items": items})
        return
    now = time.time()
    rows = [
        {
            **_plain(s),
            "when": s.cron if s.cron is not None else f"every {s.every:g}s",
            "next": _until(s.next_at - now),
            "last": "-" if s.last_fired_at is None else _ago(now - s.last_fired_at),
            "outcome": s.last_outcome,  # the last start's status, or why it was refused
        }
        for s in items
    ]
    columns = ["name", "when", "next", "last", "outcome", "tenant", "workflow"]
    _rows(rows, [*columns, "timezone", "session", "fired", "missed"], False, "schedules")


@schedules_app.command("set")
def schedules_set(
    name: str = typer.Argument(..., help="The schedule's name (letters, digits, . _ : -)."),
    workflow: str = typer.Argument(..., help="The workflow each tick starts."),
    cron: str = typer.Option(None, "--cron", help='Five cron fields, e.g. "*/5 * * * *".'),
    every: float = typer.Option(None, "--every", help="Or: a tick every this many seconds."),
    timezone: str = typer.Option("UTC", "--timezone", help="The cron's time zone (IANA name)."),
    catch_up: str = typer.Option(
        "one", "--catch-up", help="Ticks missed while no server ran: one (one start) or skip."
    ),
    input: str = typer.Option("null", "--input", help="Each start's input, as JSON."),
    session: str = typer.Option(None, "--session", help="The starts' session."),
    tenant: str = SCHEDULE_TENANT,
    url: str = URL,
    token: str = TOKEN,
    as_json: bool = AS_JSON,
) -> None:
    """Make or replace a schedule (from its next tick after now)."""
    value = _json_arg(input, "--input")
    with _client(url, token) as c:
        done = c.set_schedule(
            name,
            workflow=workflow,
            input=value,
            session=session,
            cron=cron,
            every=every,
            timezone=timezone,
            catch_up=catch_up,
            tenant=tenant,
        )
    _show(done, as_json, "schedule")


@schedules_app.command("delete")
def schedules_delete(
    name: str = typer.Argument(..., help="The schedule's name."),
    tenant: str = SCHEDULE_TENANT,
    url: str = URL,
    token: str = TOKEN,
    as_json: bool = AS_JSON,
) -> None:
    """Delete a schedule (what its ticks started goes on)."""
    with _client(url, token) as c:
        gone = c.delete_schedule(name, tenant=tenant)
    _show(gone, as_json, "deleted schedule")


def _until(seconds: float) -> str:
    """How long until, to the unit that reads best (`in 4s`, `in 3m`, `due`)."""
    if seconds <= 0:
        return "due"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"in {int(seconds // size)}{unit}"
    return f"in {int(seconds)}s"


# -- the operator's verbs: workers, events ----------------------------------------------------
workers_app = typer.Typer(help="The actor workers of the fleet.", no_args_is_help=True)
app.add_typer(workers_app, name="workers")


@workers_app.command("list")
def workers_list(url: str = URL, token: str = TOKEN, as_json: bool = AS_JSON) -> None:
    """Actor workers (role OPERATOR or ADMIN): live, stale or stopped, their last heartbeat,
    the instances each owns and the events pending for them, hand-overs under way."""
    import time

    with _client(url, token) as c:
        workers = c.workers()
    if as_json:
        _echo_json(workers)
        return
    now = time.time()
    items = [
        {
            **_plain(w),
            "seen": _ago(now - w.heartbeat_at),  # its last heartbeat
            "moving": f"{w.moving_out} out, {w.moving_in} in",
        }
        for w in workers.items
    ]
    columns = ["worker_id", "status", "seen", "instances", "pending", "moving"]
    _rows(items, [*columns, "hostname", "pid", "share"], False, "workers")
    _screen().print(
        f"stale after {workers.stale_after:g} s; placement {workers.placement}; "
        f"{workers.moves} hand-overs under way"
    )


def _ago(seconds: float) -> str:
    """How long ago, to the unit that reads best (`4s ago`, `3m ago`, `2h ago`)."""
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{int(seconds)}s ago"


events_app = typer.Typer(help="Append events to streams.", no_args_is_help=True)
app.add_typer(events_app, name="events")


@events_app.command("append")
def events_append(
    stream: str = typer.Argument(..., help="The stream to append to."),
    event: str = typer.Argument(..., help="The event, a JSON object."),
    tenant: str = typer.Option(
        None, "--tenant", help="Append for this tenant (role OPERATOR or ADMIN)."
    ),
    idempotency_key: str = typer.Option(
        None, "--idempotency-key", help="Appended once per key (default: a fresh key)."
    ),
    url: str = URL,
    token: str = TOKEN,
    as_json: bool = AS_JSON,
) -> None:
    """Append an event to a stream (the actors subscribed to it process it later)."""
    data = _json_arg(event, "EVENT")
    if not isinstance(data, dict):
        err.print("[red]error:[/red] EVENT must be a JSON object")
        raise typer.Exit(2)
    with _client(url, token) as c:
        appended = c.append(stream, data, tenant=tenant, idempotency_key=idempotency_key)
    _show(appended, as_json, "event")


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
            (
                "YOKE_EXECUTOR_PARENT",
                "the pid of its parent, the worker (0 in namespaces): it exits if that is gone",
            ),
            ("YOKE_EXECUTOR_LIMITS", "the limits the executor applies to itself (JSON)"),
            ("YOKE_EXECUTOR_PRELOAD", "yoke's modules the app uses, imported before it is bound"),
            ("YOKE_EXECUTOR_REAPER", "1: the bootstrap stays as the reaper of the executor's tree"),
        )
    ]
    otel = [
        EnvVar(name=name, default=default, help=help)
        for name, default, help in (
            (
                "OTEL_TRACES_EXPORTER",
                "otlp",
                "where `yoke serve` and `yoke worker` send spans: `otlp`, `console`, `none`, or "
                "an exporter package's name (a program that set its own provider is left be)",
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", "`grpc` needs its exporter package"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318", "the collector (the SDK's)"),
            ("OTEL_SERVICE_NAME", "yoke", "the service the spans name (the SDK's)"),
            ("OTEL_TRACES_SAMPLER", "parentbased_always_on", "which traces are kept (the SDK's)"),
            ("OTEL_PROPAGATORS", "tracecontext,baggage", "the headers a caller's trace comes in"),
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
            ("Clients (`yoke start`, `yoke limits`..., and `yoke.client`)", client),
            ("Traces with `YOKE_TRACING=otel`: OpenTelemetry's own variables", otel),
        ]
    )


@app.command("settings")
def settings_command() -> None:
    """Print every environment variable yoke reads, with its default and meaning (Markdown)."""
    typer.echo(env_reference_text(), nl=False)


@db_app.command("upgrade")
def db_upgrade(
    database_url: str = DATABASE_URL,
    database_url_file: Path = DATABASE_URL_FILE,
) -> None:
    """Apply pending schema migrations."""
    from yoke.app import reach, upgrade
    from yoke.config import Settings
    from yoke.errors import YokeError

    try:
        settings = Settings.from_env(database_url=database_url_of(database_url, database_url_file))
        asyncio.run(reach(settings))
        version = asyncio.run(upgrade(settings.database_url))
    except YokeError as exc:
        fail(exc)
    typer.echo(f"schema at version {version}")


def main() -> None:
    title = masked_title(list(sys.orig_argv))
    if title is not None:
        import setproctitle

        setproctitle.setproctitle(title)
    app()
