"""A small HTTP client of the v1 API, for the `yoke` command's client verbs.

It speaks only HTTP: what it knows of yoke is the API, never the Python objects behind it. An
error answer becomes `ApiError` with the problem's status, title and detail, so the command can
print it and exit non-zero; an unreachable server is `ApiError` with status 0.
This module must never import the scheduler.
"""

from __future__ import annotations

import json
from typing import Any

import httpx


class ApiError(Exception):
    def __init__(self, status: int, title: str, detail: str | None = None) -> None:
        super().__init__(f"{status} {title}" + (f": {detail}" if detail else ""))
        self.status = status
        self.title = title
        self.detail = detail


class Client:
    def __init__(self, url: str, token: str | None = None, *, timeout: float = 90.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.close()

    def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        query = {k: v for k, v in (params or {}).items() if v is not None}
        headers = dict(headers or {})
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            response = self._http.request(
                method,
                path,
                params=query,
                headers=headers,
                content=None if body is None else json.dumps(body).encode(),
            )
        except httpx.HTTPError as exc:
            raise ApiError(0, "Cannot reach the server", str(exc) or type(exc).__name__) from None
        try:
            data = response.json()
        except ValueError:
            data = response.text
        if response.status_code >= 400:
            if isinstance(data, dict):
                raise ApiError(
                    response.status_code, str(data.get("title", "Error")), data.get("detail")
                )
            raise ApiError(response.status_code, response.reason_phrase, str(data)[:200])
        return response.status_code, data
