"""Actor definitions: `yoke.Queue`, `yoke.Backoff`, the `Event` a `process()` receives, and the
registry that `@app.actor(...)` fills and that routes an appended event to its queue rows.

Everything here is checked when the actor is defined, so a bad definition fails at import time
and never inside a running worker. This module must never touch the store, a clock or asyncio.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from yoke.errors import BadType, BadValue
from yoke.store.text import MAX_TEXT, check_text

if TYPE_CHECKING:
    from yoke.actors.ctx import ActorCtx
    from yoke.store.actor_records import NewEvent, Target

# The store's records (`NewEvent`, `Target`) are imported where an append is made, in the
# worker: an executor imports this module to find its actors and never appends, and the
# records module (a score of dataclasses) is a good part of its boot.

DEFAULT_GROUP = ""
SINGLETON = "_"  # instance id of an actor defined with key=None


@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    """What `process(ctx, event)` receives: one queue row of the instance, decoded."""

    id: int  # the actor_queues row id; unique per fan-out target
    event_id: int  # the stream event; shared by every instance it fanned out to
    stream: str
    tenant: str
    data: Any
    group_id: str
    attempt: int  # 1 on the first try
    appended_at: float


Selector = Callable[[Sequence[Event]], "Event | int | None"]
GroupBy = str | Callable[[Any], Hashable] | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Queue:
    """How one instance's events are drained (the actors specification's `queue: {mode,
    concurrency}`).

    `fifo`: oldest first within a group. `custom`: `select` chooses among a group's pending
    events: a function over them (returning the event, its id, or None for none now), or a
    config `{"order_by": "data.field", "desc": bool}`. `concurrency` caps concurrent
    `process()` calls per (instance, group); `group_by` names the group: a data field, a
    function of the data, or None (one group per instance).
    """

    mode: Literal["fifo", "custom"] = "fifo"
    concurrency: int = 1
    group_by: GroupBy = None
    select: Selector | Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("fifo", "custom"):
            raise BadValue(f"queue mode must be 'fifo' or 'custom', got {self.mode!r}")
        c = self.concurrency
        if isinstance(c, bool) or not isinstance(c, int):
            raise BadType(f"queue concurrency must be an int, not {type(c).__name__}")
        if c < 1:
            raise BadValue(f"queue concurrency must be >= 1, got {c}")
        g = self.group_by
        if g is not None and not isinstance(g, str) and not callable(g):
            raise BadType("group_by must be a field name, a function or None")
        if self.mode == "custom":
            if self.select is None:
                raise BadValue("queue mode 'custom' needs a select function or config")
            object.__setattr__(self, "select", as_selector(self.select))
        elif self.select is not None:
            raise BadValue("select is only used with mode='custom'")

    def selector(self) -> Selector:
        assert callable(self.select)
        return self.select

    def group_of(self, data: Any) -> str:
        g = self.group_by
        if g is None:
            return DEFAULT_GROUP
        if callable(g):
            try:
                value = g(data)
            except Exception as exc:  # user code: this event cannot be routed
                raise BadValue(f"group_by failed on the event: {exc!r}") from None
        else:
            value = _field(data, g)
        return DEFAULT_GROUP if value is None else str(value)


@dataclass(frozen=True, kw_only=True, slots=True)
class Backoff:
    """Delay before retrying a failed event: `initial * factor**(n-1)`, at most `maximum`.

    `max_attempts` (None: unlimited, as the actors specification) moves the event to the dead
    letters after that many failed attempts.
    """

    initial: float = 0.1
    maximum: float = 30.0
    factor: float = 2.0
    max_attempts: int | None = None

    def __post_init__(self) -> None:
        for name in ("initial", "maximum", "factor"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise BadType(f"backoff {name} must be a number")
            if not math.isfinite(v) or v < 0:
                raise BadValue(f"backoff {name} must be a finite number >= 0, got {v}")
        if self.factor < 1:
            raise BadValue(f"backoff factor must be >= 1, got {self.factor}")
        m = self.max_attempts
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise BadValue(f"max_attempts must be an int >= 1 or None, got {m!r}")

    def delay(self, failures: int) -> float:
        """Seconds to wait after the `failures`-th failed attempt (1-based)."""
        if failures < 1:
            return 0.0
        exp = min(failures - 1, 64)  # 2**64 * anything is past every sane maximum
        return float(min(self.maximum, self.initial * self.factor**exp))

    def exhausted(self, failures: int) -> bool:
        return self.max_attempts is not None and failures >= self.max_attempts


Process = Callable[["ActorCtx", Event], Awaitable[None]]


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class ActorDef:
    name: str
    subscribe: tuple[str, ...]
    key: str | None
    queue: Queue
    backoff: Backoff
    process: Process = field(repr=False)

    def instance_of(self, data: Any) -> str:
        """The instance an event of this actor goes to: its key field, a string or an integer.
        Anything else (missing, null, a bool, a float, an object) names no instance it could
        mean, so the event is refused (`BadValue`) rather than stored to route nowhere."""
        if self.key is None:
            return SINGLETON
        value = _field(data, self.key)
        if type(value) is str:
            return value
        if type(value) is int:
            return str(value)
        got = "nothing" if value is None else type(value).__name__
        raise BadValue(
            f"an event for actor {self.name!r} must carry its key {self.key!r} as a string or "
            f"an integer, got {got}"
        )


class ActorRegistry:
    """The actors of one app, by name, and the subscriptions of each stream."""

    def __init__(self) -> None:
        self._actors: dict[str, ActorDef] = {}
        self._by_stream: dict[str, list[ActorDef]] = {}

    def __repr__(self) -> str:
        return f"ActorRegistry(actors={sorted(self._actors)})"

    def __len__(self) -> int:
        return len(self._actors)

    def actor(
        self,
        name: str | None = None,
        *,
        subscribe: Sequence[str],
        key: str | None = None,
        queue: Queue | None = None,
        backoff: Backoff | None = None,
    ) -> Callable[[Process], Process]:
        if isinstance(subscribe, str) or not all(isinstance(s, str) and s for s in subscribe):
            raise BadType("subscribe must be a list of non-empty stream names")
        if not subscribe:
            raise BadValue("an actor must subscribe to at least one stream")
        if key is not None and (not isinstance(key, str) or not key):
            raise BadType("key must be a field name (str) or None")
        if queue is not None and not isinstance(queue, Queue):
            raise BadType("queue must be a yoke.Queue")
        if backoff is not None and not isinstance(backoff, Backoff):
            raise BadType("backoff must be a yoke.Backoff")

        def register(fn: Process) -> Process:
            if not inspect.iscoroutinefunction(fn):
                raise BadType("an actor's process must be an `async def process(ctx, event)`")
            actor_name = name or fn.__name__
            if actor_name in self._actors:
                raise BadValue(f"actor {actor_name!r} is defined twice")
            d = ActorDef(
                name=actor_name,
                subscribe=tuple(dict.fromkeys(subscribe)),
                key=key,
                queue=queue or Queue(),
                backoff=backoff or Backoff(),
                process=fn,
            )
            self._actors[actor_name] = d
            for s in d.subscribe:
                self._by_stream.setdefault(s, []).append(d)
            return fn

        return register

    def get(self, name: str) -> ActorDef | None:
        return self._actors.get(name)

    def names(self) -> list[str]:
        return sorted(self._actors)

    def route(self, stream: str, data: Any) -> tuple[Target, ...]:
        """The queue rows an event on `stream` fans out to: one per subscriber (`BadValue` if
        the event lacks a subscriber's key)."""
        from yoke.store.actor_records import Target

        return _route(self._by_stream.get(stream, ()), data, Target)

    def new_event(self, stream: str, data: Any, *, tenant: str) -> NewEvent:
        (event,) = self.new_events(stream, (data,), tenant=tenant)
        return event

    def new_events(self, stream: str, items: Iterable[Any], *, tenant: str) -> list[NewEvent]:
        """The events to append for `items` on one stream and tenant, with their fan-out (the
        batch path of `append_many`: the checks and the subscriber lookup are made once)."""
        if not isinstance(stream, str) or not stream:
            raise BadType("stream must be a non-empty str")
        if not isinstance(tenant, str) or not tenant:
            raise BadType("tenant must be a non-empty str")
        check_text(stream, "stream")
        check_text(tenant, "tenant")
        from yoke.store.actor_records import NewEvent, Target

        subscribers = self._by_stream.get(stream, ())
        return [
            NewEvent(
                tenant=tenant,
                stream=stream,
                data=encode(data),
                targets=_route(subscribers, data, Target),
            )
            for data in items
        ]


def _route(subscribers: Sequence[ActorDef], data: Any, target: type[Target]) -> tuple[Target, ...]:
    """The event's queue rows. An instance id or group no store could keep, or the API
    address again, refuses the whole batch (`BadValue`) before anything is written: stored,
    it would fail its batch there (PostgreSQL) or every later claim of its owner (SQLite)."""
    out: list[Target] = []
    for d in subscribers:
        instance = d.instance_of(data)
        group = d.queue.group_of(data)
        # The common case (short ASCII) is decided here, once per event and subscriber.
        if not (0 < len(instance) <= MAX_TEXT and instance.isascii() and "\x00" not in instance):
            check_text(instance, f"event field {d.key!r} (the instance id of actor {d.name!r})")
        if group and not (len(group) <= MAX_TEXT and group.isascii() and "\x00" not in group):
            g = d.queue.group_by
            field_name = f"event field {g!r}" if isinstance(g, str) else "group_by's answer"
            check_text(group, f"{field_name} (the group of actor {d.name!r})", empty=True)
        out.append(target(actor=d.name, instance_id=instance, group_id=group))
    return tuple(out)


_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)  # built once: hot path
# The most an event's data or an instance's state may take, as JSON: what one ctx call of an
# executor may carry (a frame is 16 MiB), and what a store row holds without strain.
MAX_DATA_BYTES = 4 * 1024 * 1024


def encode(data: Any) -> str:
    """`data` as the JSON text a store keeps: `BadValue` if it is not JSON (NaN and infinities
    are not), or longer than `MAX_DATA_BYTES` (the encoding is ASCII: characters are bytes)."""
    try:
        text = _ENCODER.encode(data)
    except (TypeError, ValueError) as exc:
        raise BadValue(f"event data must be JSON-serialisable: {exc}") from None
    except RecursionError:
        raise BadValue("event data is nested too deeply to encode") from None
    if len(text) > MAX_DATA_BYTES:
        raise BadValue(f"event data or state must be at most {MAX_DATA_BYTES} bytes of JSON")
    return text


def _field(data: Any, path: str) -> Any:
    """`a.b.c` into nested mappings; None when any step is missing."""
    if type(data) is dict and "." not in path:
        return data.get(path)  # the common case, once per event and subscriber: no split
    cur = data
    for part in path.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return cur


def as_selector(select: Selector | Mapping[str, Any]) -> Selector:
    if callable(select):
        return select
    if isinstance(select, Mapping):
        return select_from_config(select)
    raise BadType("select must be a function or a config mapping")


def select_from_config(config: Mapping[str, Any]) -> Selector:
    """The actors specification's `queueSelectFromConfig`:
    `{"order_by": "data.field" | "id" | ..., "desc": b}`.

    Events missing the field sort last; ties (and missing fields) go oldest first."""
    unknown = set(config) - {"order_by", "desc"}
    if unknown:
        raise BadValue(f"unknown select config keys: {sorted(unknown)}")
    order_by = config.get("order_by", "id")
    desc = config.get("desc", False)
    if not isinstance(order_by, str) or not order_by:
        raise BadType("select order_by must be a non-empty str")
    if not isinstance(desc, bool):
        raise BadType("select desc must be a bool")
    head, _, rest = order_by.partition(".")
    if head not in ("data", "id", "event_id", "appended_at", "attempt"):
        raise BadValue(
            f"select order_by must start with 'data.' or name an event field, got {order_by!r}"
        )
    if head != "data" and rest:
        raise BadValue(f"select order_by {order_by!r}: only data has sub-fields")

    def value(e: Event) -> Any:
        return _field(e.data, rest) if head == "data" else getattr(e, head)

    def select(events: Sequence[Event]) -> Event | None:
        best: Event | None = None
        best_v: Any = None
        for e in events:  # already oldest first
            v = value(e)
            if v is None:
                continue
            try:
                better = best is None or (v > best_v if desc else v < best_v)
            except TypeError:
                better = False  # incomparable values: keep the older one
            if better:
                best, best_v = e, v
        return best if best is not None else (events[0] if events else None)

    return select
