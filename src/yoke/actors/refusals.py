"""What the drain does with a write of a claimed row that the store refuses for good.

A completion, requeue, release, crash charge or dead letter is retried while the store does not
answer (`retry.until_done`, `errors.TRANSIENT`), its group slot held so nothing of its group
overtakes it. A permanent refusal (a constraint, a value the store does not take: a text
PostgreSQL cannot hold, a number out of its range) would get the same answer forever, and the
slot would be held until the worker stops. Instead the row becomes a dead letter whose error is
the refusal (`bury`): the event is not run again, `dead_letters` shows why, and its group goes
on. If the store refuses that too, the failure is logged and the row is left claimed: this
worker's `stop_worker` (or a takeover) puts it back to pending.

This module must never touch the drain's kernels; it only writes and logs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from yoke.actors.protocol import ActorStore
from yoke.errors import YokeError
from yoke.retry import RetryPolicy, until_done
from yoke.store.actor_records import Completion

log = logging.getLogger("yoke.actors.drain")

MAX_REFUSAL_TEXT = 2000  # characters of the refusal a dead letter keeps


def refusal_text(what: str, refusal: YokeError) -> str:
    """The error a buried row records: what was refused and the store's reason (no NUL, which
    PostgreSQL's text refuses, and bounded)."""
    text = f"the store refused {what}: {type(refusal).__name__}: {refusal}"
    return text.replace("\x00", "\\x00")[:MAX_REFUSAL_TEXT]


async def bury(
    store: ActorStore,
    worker_id: str,
    done: Completion,
    *,
    refusal: YokeError,
    what: str,
    now: float,
    policy: RetryPolicy,
    stopping: Callable[[], bool],
) -> bool:
    """Make the row of `done`, whose write (`what`) the store refused with `refusal`, a dead
    letter recording that refusal. True if it is one now; False if it was not written (fenced,
    given up while stopping, or refused as well: then it stays claimed until this worker
    stops)."""
    text = refusal_text(what, refusal)
    try:
        stored = await until_done(
            lambda: store.dead_letter(worker_id, done, error=text, now=now),
            policy=policy,
            what=f"burying event {done.queue_id}",
            stopping=stopping,
            log=log,
        )
    except YokeError as exc:  # permanent as well: nothing more to try
        log.error(
            "event %d: the store refused %s (%s) and its dead letter (%s); it stays claimed "
            "until this worker stops",
            done.queue_id,
            what,
            refusal,
            exc,
        )
        return False
    buried = stored is not None and stored[0]
    if buried:
        log.error("event %d is a dead letter: %s", done.queue_id, text)
    return buried
