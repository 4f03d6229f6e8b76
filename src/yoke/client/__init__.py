"""`yoke.client`: the v1 HTTP API of a yoke server, typed, for sync and async callers.

```python
from yoke.client import Client

with Client() as yoke:  # YOKE_URL (else http://127.0.0.1:8000) and YOKE_TOKEN
    done = yoke.run("report", {"day": "2026-01-02"}, timeout=60)
```

`Client` and `AsyncClient` have the same methods (the sync one is generated from the async one);
they return yoke's own values (`Start`, `Execution`, `Page`, `Limits`, `AuditEntry`) or the frozen
dataclasses of this package, and raise an error answer as the `YokeError` it names (`NotFound`,
`LimitExceeded` with `retry_after`, `Forbidden`, `Unauthorized`, `NotLeader`...), with the
problem JSON as `exc.problem`. What is retried, and how, is `calls.Retries`.
"""

from __future__ import annotations

from yoke.client.actors import (
    Actor,
    ActorList,
    DeadLetter,
    Executor,
    Executors,
    Instance,
    InstancePage,
    InstanceSummary,
    Worker,
    Workers,
)
from yoke.client.aio import AsyncClient
from yoke.client.calls import Retries
from yoke.client.problems import ApiError, ServerUnreachable
from yoke.client.sync import Client
from yoke.client.values import (
    Appended,
    AuditPage,
    ExecutionSteps,
    Ha,
    Step,
    Tenant,
    Why,
)
from yoke.client.views import Fairness, Overview, QueueView, Scheduler, Series, Timer

__all__ = [
    "Actor",
    "ActorList",
    "ApiError",
    "Appended",
    "AsyncClient",
    "AuditPage",
    "Client",
    "DeadLetter",
    "ExecutionSteps",
    "Executor",
    "Executors",
    "Fairness",
    "Ha",
    "Instance",
    "InstancePage",
    "InstanceSummary",
    "Overview",
    "QueueView",
    "Retries",
    "Scheduler",
    "Series",
    "ServerUnreachable",
    "Step",
    "Tenant",
    "Timer",
    "Why",
    "Worker",
    "Workers",
]
