"""How `yoke serve` and `yoke worker` log: a level and a format (`text`, or `json` with one
object a line for a log shipper), set once at the edge for yoke's loggers and uvicorn's.

A record's `exc_info` is written as its traceback (text) or a `traceback` field (json); the
extra fields a caller passes (`extra={...}`) are kept as fields in json. One record is one
line: in text, control characters of the message (a tenant's error text, name or id may hold
a newline, a carriage return or a terminal escape) are written escaped (`\n`, `\x1b`), so no
tenant can forge a line of the log; a traceback's lines follow indented, each escaped the
same way (json escapes them itself). This module must never decide what is logged, only how
it is written.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# What every LogRecord has: anything else on a record came as an `extra` field.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


_ESCAPES = {
    **{c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))},
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
    0x2028: "\\u2028",  # line and paragraph separators: a new line to some readers
    0x2029: "\\u2029",
}


def escape_controls(text: str) -> str:
    """`text` with every control character written as an escape: one line, whatever it held."""
    return text.translate(_ESCAPES)


class TextFormatter(logging.Formatter):
    """`TEXT_FORMAT`, one line per record (its traceback, if any, on indented lines after)."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.getMessage())
        record.asctime = self.formatTime(record, self.datefmt)
        line = self.formatMessage(record)
        extra = []
        if record.exc_info:
            extra = self.formatException(record.exc_info).splitlines()
        if record.stack_info:
            extra += self.formatStack(record.stack_info).splitlines()
        return "\n".join([line, *("    " + escape_controls(x) for x in extra)])


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["traceback"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def make_handler(fmt: str, stream: TextIO) -> logging.Handler:
    """A handler writing to `stream` as text or json."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    return handler


def configure_logging(level: str, fmt: str) -> None:
    """Send every log line at `level` or above to stderr, as text or json."""
    handler = make_handler(fmt, sys.stderr)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
