"""The sync `Client` is the async one made sync (sync.py is generated from aio.py), and both
clients answer in the shapes the server describes: each value's fields are those of the answer
schema of its route (`/openapi.json`'s models), so a field the server adds or renames fails
here until the client has it."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from pydantic import BaseModel

from yoke.client import AsyncClient, Client, actors, values, views
from yoke.client.unasync import SOURCE, TARGET, generate
from yoke.executions import AuditEntry, Execution, Limits, Start
from yoke.executions.schedules import Schedule
from yoke.server import models as m
from yoke.server import models_actors as ma
from yoke.server.ui import models as um


def test_the_sync_client_is_generated_from_the_async_one() -> None:
    assert TARGET.read_text() == generate(SOURCE.read_text()), (
        "src/yoke/client/sync.py is out of date: run python src/yoke/client/unasync.py"
    )


def test_both_clients_have_the_same_methods_with_the_same_parameters() -> None:
    def methods(cls: type) -> dict[str, list[str]]:
        return {
            name: list(inspect.signature(fn).parameters)
            for name, fn in vars(cls).items()
            if callable(fn) and not name.startswith("_")
        }

    sync, both = methods(Client), methods(AsyncClient)
    both["close"] = both.pop("aclose")
    assert sync == both
    assert len(sync) > 30
    for name in sync:
        if name != "close":
            assert inspect.iscoroutinefunction(getattr(AsyncClient, name)), name


# Each value of the client, and the server's model of the answer it is read from.
SHAPES: list[tuple[type, type[BaseModel], set[str]]] = [
    (Start, m.StartOut, set()),
    (Execution, m.ExecutionOut, {"links"}),  # links are paths the client builds itself
    (Limits, m.LimitsOut, set()),
    (AuditEntry, m.AuditOut, set()),
    (values.Why, m.WhyOut, set()),
    (values.Fix, m.FixOut, set()),
    (values.Tenant, m.TenantOut, set()),
    (Schedule, m.ScheduleOut, set()),
    (values.TenantValues, m.TenantValuesOut, set()),
    (values.TenantExecutions, m.TenantExecutionsOut, set()),
    (values.TenantActors, m.TenantActorsOut, set()),
    (values.Appended, m.EventOut, set()),
    (values.Step, um.StepOut, set()),
    (values.Link, um.LinkOut, set()),
    (values.Rerun, um.RerunOut, set()),
    (values.Lineage, um.LineageOut, set()),
    (values.AuditPage, um.AuditRecentOut, set()),
    (views.Scheduler, m.SchedulerOut, set()),
    (views.SessionLoad, m.SessionOut, set()),
    (views.OthersLoad, m.OthersOut, set()),
    (views.Pick, m.PickOut, set()),
    (views.Overview, um.OverviewOut, set()),
    (views.QueueView, um.AdmissionOut, set()),
    (views.QueueItem, um.QueueItemOut, set()),
    (views.ScheduledStart, um.ScheduledStartOut, set()),
    (views.QueueLimits, um.QueueLimitsOut, set()),
    (views.Fairness, um.FairnessOut, set()),
    (views.FairnessItem, um.FairnessItemOut, set()),
    (views.FairnessTenant, um.FairnessTenantOut, set()),
    (views.Refused, um.RefusedOut, set()),
    (views.Folded, um.FoldedOut, set()),
    (views.ActorFairness, um.ActorFairnessOut, set()),
    (views.ActorTenant, um.ActorTenantOut, set()),
    (views.Series, um.SeriesOut, set()),
    (views.Timer, um.TimerOut, set()),
    (actors.Actor, ma.ActorOut, set()),
    (actors.ActorList, ma.ActorListOut, set()),
    (actors.QueueSettings, ma.QueueOut, set()),
    (actors.BackoffSettings, ma.BackoffOut, set()),
    (actors.ActorCounts, ma.ActorCountsOut, set()),
    (actors.InstanceSummary, ma.InstanceSummaryOut, {"links"}),
    (actors.InstancePage, ma.InstancePageOut, set()),
    (actors.Instance, ma.InstanceOut, {"links"}),
    (actors.DeadLetter, ma.DeadLetterOut, set()),
    (actors.Worker, ma.WorkerOut, set()),
    (actors.Workers, ma.WorkerListOut, set()),
    (actors.Executor, ma.ExecutorOut, set()),
    (actors.Executors, ma.ExecutorListOut, set()),
]


@pytest.mark.parametrize(
    ("value", "model", "left_out"), SHAPES, ids=[v.__name__ for v, _, _ in SHAPES]
)
def test_a_value_has_the_fields_of_its_answer(
    value: type, model: type[BaseModel], left_out: set[str]
) -> None:
    fields = {f.name for f in dataclasses.fields(value)}
    assert fields == set(model.model_fields) - left_out


def test_the_steps_answer_is_an_execution_and_its_steps() -> None:
    fields = {f.name for f in dataclasses.fields(values.ExecutionSteps)} - {"execution"}
    added = set(um.ExecutionDetailOut.model_fields) - set(m.ExecutionOut.model_fields)
    assert fields == added


def test_every_value_of_the_client_is_checked_here() -> None:
    checked = {v for v, _, _ in SHAPES} | {values.ExecutionSteps, values.Ha, values.Leader}
    defined = {
        obj
        for module in (values, views, actors)
        for obj in vars(module).values()
        if dataclasses.is_dataclass(obj)
        and isinstance(obj, type)
        and obj.__module__ == module.__name__
    }
    assert defined <= checked, defined - checked
