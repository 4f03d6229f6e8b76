"""How a failure becomes data: an exception into a bounded `Failure`, and the log line of a
failed execution.

A traceback can be any size (a deep recursion, a huge message), and it is stored with the
execution and shown to its tenant, so it is cut to the innermost `TRACEBACK_BYTES` (16 KiB,
as UTF-8: the frames nearest the raise and the exception line are the useful part) and the
message to `MESSAGE_BYTES`. Text from an exception is the workflow's, so the log line escapes
every control character (a newline cannot forge a second line, an escape sequence cannot
repaint a terminal) and is bounded too.

This module must never touch the store; it only turns exceptions into values and lines.
"""

from __future__ import annotations

import logging
import traceback
import unicodedata

from yoke.executions.model import Failure

log = logging.getLogger("yoke.executions")

TRACEBACK_BYTES = 16 * 1024
MESSAGE_BYTES = 4 * 1024
LOGGED_CHARS = 500  # of each text in a log line
CUT = "[... {n} bytes cut ...]\n"


def failure_of(
    exc: BaseException, *, step: str | None = None, attempt: int | None = None
) -> Failure:
    return Failure(
        type=type(exc).__name__,
        message=head(_message(exc), MESSAGE_BYTES),
        traceback=tail("".join(traceback.format_exception(exc)), TRACEBACK_BYTES),
        step=step,
        attempt=attempt,
    )


def _message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a broken __str__ must not lose the failure
        return f"<{type(exc).__name__} whose message could not be read>"


def head(text: str, limit: int) -> str:
    """At most `limit` bytes of UTF-8: the start of `text`, marked if cut."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return text
    mark = f" [... {len(raw) - limit} bytes cut]"
    keep = raw[: max(0, limit - len(mark))]
    return keep.decode("utf-8", "ignore") + mark


def tail(text: str, limit: int) -> str:
    """At most `limit` bytes of UTF-8: the end of `text`, marked if cut."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return text
    mark = CUT.format(n=len(raw) - limit)
    keep = raw[len(raw) - max(0, limit - len(mark.encode())) :]
    return mark + keep.decode("utf-8", "ignore")


def printable(text: object, limit: int = LOGGED_CHARS) -> str:
    """`text` on one line: control, format and separator characters escaped (`\\n`,
    `\\x1b`, `\\u2028`), at most `limit` characters (marked if cut)."""
    s = str(text)
    cut = len(s) > limit
    out = []
    for ch in s[:limit]:
        if ch == "\\":
            out.append("\\\\")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            out.append(ch.encode("unicode_escape", "backslashreplace").decode("ascii"))
        else:
            out.append(ch)
    return "".join(out) + (" [...]" if cut else "")


def log_failed(workflow: str, execution_id: str, status: str, failure: Failure) -> None:
    """The one line a failed (or timed-out) execution leaves in the server's log."""
    log.warning(
        "execution %s: workflow=%s id=%s step=%s attempt=%s error=%s: %s",
        status.lower().replace("_", " "),
        printable(workflow),
        execution_id,
        "-" if failure.step is None else printable(failure.step),
        "-" if failure.attempt is None else failure.attempt,
        printable(failure.type or "-"),
        printable(failure.message),
    )
