"""`/v1/actors`, `/v1/actors/{name}/instances[/{instance_id}]`, `/v1/workers`: what the actor
runtime holds, read from the store.

Tenants: an instance belongs to the tenant its events were appended in. A principal without
OPERATOR or ADMIN sees only its home tenant (the one its appends go to): counts and lists are
of that tenant, a list asked for another tenant is empty, and another tenant's instance is 404
as if absent. A privileged principal sees every tenant (`?tenant=` narrows it); an instance is
addressed by (tenant, id), its tenant being `?tenant=` or the caller's home tenant, since ids
are only unique within a tenant. Workers are the deployment (hosts, pids, who owns what) rather
than any tenant's data, so `/v1/workers` needs OPERATOR or ADMIN.

This module must never change the runtime or the store: every route here only reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from yoke.actors.inspection import ActorInspector, no_instance
from yoke.executions import Principal
from yoke.server.auth import home_tenant, principal_of, privileged
from yoke.server.models_actors import (
    actor_json,
    decode_cursor,
    encode_cursor,
    instance_json,
    instance_summary_json,
    worker_json,
)
from yoke.server.state import ServerState, json_response, query_int
from yoke.store.text import check_text


@dataclass(frozen=True, kw_only=True, slots=True)
class _Scope:
    """The tenants a list covers."""

    tenant: str | None  # None: every tenant
    hidden: bool = False  # another tenant's, asked by a caller who may not see it: show nothing


class ActorsRoutes:
    def __init__(self, state: ServerState) -> None:
        self.s = state

    @property
    def inspect(self) -> ActorInspector:
        return self.s.app.actors.inspect

    @property
    def placement(self) -> str:
        return self.s.app.actors.settings.placement

    @staticmethod
    def _scope(p: Principal, request: Request) -> _Scope:
        asked = request.query_params.get("tenant")
        if asked is not None:
            asked = check_text(asked, "tenant")
        if privileged(p):
            return _Scope(tenant=asked)
        home = home_tenant(p)
        return _Scope(tenant=asked or home, hidden=asked is not None and asked != home)

    async def actors(self, request: Request) -> Response:
        scope = self._scope(principal_of(request), request)
        if scope.hidden:
            views = self.inspect.uncounted()
        else:
            views = await self.inspect.actors(tenant=scope.tenant)
        return json_response({"tenant": scope.tenant, "items": [actor_json(v) for v in views]})

    async def instances(self, request: Request) -> Response:
        name = check_text(request.path_params["name"], "actor name")
        self.inspect.definition(name)  # an unknown actor is 404 whatever the parameters
        scope = self._scope(principal_of(request), request)
        limit = query_int(request, "limit", default=100, low=1, high=1000)
        cursor = request.query_params.get("cursor")
        after = None if cursor is None else decode_cursor(cursor, name)
        if scope.hidden:
            return json_response({"items": [], "next_cursor": None})
        page = await self.inspect.instances(name, tenant=scope.tenant, after=after, limit=limit)
        following = page.next_after
        return json_response(
            {
                "items": [instance_summary_json(i) for i in page.items],
                "next_cursor": None if following is None else encode_cursor(following),
            }
        )

    async def instance(self, request: Request) -> Response:
        p = principal_of(request)
        name = check_text(request.path_params["name"], "actor name")
        instance_id = check_text(request.path_params["instance_id"], "instance id")
        asked = request.query_params.get("tenant")
        tenant = home_tenant(p) if asked is None else check_text(asked, "tenant")
        if not privileged(p) and tenant != home_tenant(p):
            self.inspect.definition(name)
            # The answer of a missing instance: a tenant cannot learn another's ids exist.
            raise no_instance(name, instance_id)
        view = await self.inspect.instance(name, instance_id, tenant=tenant)
        return json_response(instance_json(view))

    async def workers(self, _: Request) -> Response:
        views = await self.inspect.workers()
        return json_response(
            {
                "stale_after": self.inspect.stale_after,
                "forget_after": self.inspect.forget_after,
                "placement": self.placement,
                "moves": sum(w.moving_out for w in views),
                "items": [worker_json(w) for w in views],
            }
        )
