"""Turning tracing on and off: `YOKE_TRACING`, `App(tracing=...)`, the exporter that `yoke
serve` and `yoke worker` set up from the standard `OTEL_*` variables, and yoke without the
extra installed (OpenTelemetry hidden from import)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import yoke
from yoke.config import Settings
from yoke.errors import BadValue
from yoke.otel import OtelTracing, _exporter, _exporter_names
from yoke.tracing import NO_TRACING

ROOT = Path(__file__).resolve().parents[2]


def test_tracing_is_off_by_default_and_on_by_setting_or_option(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/yoke.db"
    assert yoke.App(url, settings=Settings()).tracing is NO_TRACING
    assert isinstance(yoke.App(url, settings=Settings(tracing="otel")).tracing, OtelTracing)
    assert isinstance(yoke.App(url, settings=Settings(), tracing=True).tracing, OtelTracing)
    assert yoke.App(url, settings=Settings(tracing="otel"), tracing=False).tracing is NO_TRACING
    mine = OtelTracing()
    assert yoke.App(url, tracing=mine).tracing is mine
    with pytest.raises(BadValue, match="tracing must be 'off' or 'otel'"):
        Settings.from_env({"YOKE_TRACING": "jaeger"})


def test_the_exporter_follows_the_otel_variables() -> None:
    assert _exporter_names({}) == ["otlp_proto_http"]  # OTLP, http/protobuf: the default
    assert _exporter_names({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) == ["otlp_proto_grpc"]
    assert _exporter_names({"OTEL_TRACES_EXPORTER": "console, otlp"}) == [
        "console",
        "otlp_proto_http",
    ]
    assert _exporter_names({"OTEL_TRACES_EXPORTER": "none"}) == []
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    assert _exporter("otlp_proto_http") is OTLPSpanExporter
    assert _exporter("console") is ConsoleSpanExporter
    with pytest.raises(BadValue, match="opentelemetry-exporter-otlp-proto-grpc"):
        _exporter("otlp_proto_grpc")


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


EXPORT = """
from opentelemetry import trace
import yoke
app = yoke.App("sqlite:///{db}")
app.tracing.export()
provider = trace.get_tracer_provider()
print(type(provider).__name__, provider.resource.attributes["service.name"])
with app.tracing._tracer.start_as_current_span("hello"):
    pass
provider.shutdown()
"""


def test_a_yoke_command_exports_to_the_console_when_told(tmp_path: Path) -> None:
    done = _python(
        EXPORT.replace("{db}", str(tmp_path / "y.db")),
        YOKE_TRACING="otel",
        OTEL_TRACES_EXPORTER="console",
        OTEL_SERVICE_NAME="shop",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("TracerProvider shop\n")
    assert '"name": "hello"' in done.stdout  # the console exporter printed the span


HIDDEN = """
import sys
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, Hide())

import asyncio, httpx, yoke
from yoke.server import Server

app = yoke.App("sqlite:///{db}")

@app.workflow()
async def echo(ctx, x):
    return x

async def main():
    server = Server(app, tokens=None)
    async with server.lifespan():
        transport = httpx.ASGITransport(app=server, client=("127.0.0.1", 1))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
            r = await c.post(
                "/v1/starts",
                json={"workflow": "echo", "input": 5},
                headers={"traceparent": f"00-{'ab' * 16}-{'cd' * 8}-01"},
            )
            assert r.status_code == 201, r.text
            done = await app.executions.wait(r.json()["execution_id"], timeout=10)
            print(done.status.name, done.output)
    assert not [m for m in sys.modules if m.startswith("opentelemetry")]
    try:
        yoke.App("sqlite:///{db}", tracing=True).tracing
    except yoke.BadValue as exc:
        print(exc)

asyncio.run(main())
"""


def test_yoke_works_unchanged_without_the_extra(tmp_path: Path) -> None:
    done = _python(HIDDEN.replace("{db}", str(tmp_path / "y.db")))
    assert done.returncode == 0, done.stderr
    ran, refused = done.stdout.splitlines()
    assert ran == "SUCCEEDED 5"
    assert refused.startswith("tracing needs OpenTelemetry: pip install 'yoke[otel]'")


def test_yoke_serve_exports_a_starts_spans_in_its_callers_trace(tmp_path: Path) -> None:
    """`yoke serve` with `YOKE_TRACING=otel` and the console exporter: a start sent with a
    traceparent is printed as spans of the caller's trace (the SDK set up from OTEL_*)."""
    import httpx

    from tests.server.e2e import yoke_serve

    trace_id = "ab" * 16
    env = {
        "YOKE_TRACING": "otel",
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }
    with yoke_serve(f"sqlite:///{tmp_path}/y.db", tmp_path, env=env) as server:
        r = httpx.post(
            server.url + "/v1/starts",
            json={"workflow": "echo", "input": 1, "session": "acme"},
            headers={"traceparent": f"00-{trace_id}-{'cd' * 8}-01"},
            params={"wait": 5},
        )
        assert r.status_code == 201, r.text
        assert server.terminate() == 0  # the SDK flushes its spans at exit
    printed = server.log.read_text()
    for name in ("yoke.start", "yoke.admit", "yoke.run"):
        assert f'"name": "{name}"' in printed, printed[-3000:]
    assert printed.count(f'"trace_id": "0x{trace_id}"') == 3
