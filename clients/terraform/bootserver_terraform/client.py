"""The fleet API as the provider calls it: ``requests`` against the admin listener's base URL plus
``/api/v1`` (docs/api.md), bearer token, JSON in and out; every error answer an :class:`ApiError` that
carries the RFC 9457 problem details."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import requests

#: Seconds one request may take (connect and each read).
TIMEOUT = 30.0


@dataclass
class ApiError(Exception):
    """A failed request: ``line`` says it in one line (``METHOD PATH: STATUS KIND: DETAIL``), ``status`` is
    the HTTP status (``None``: the server was not reached), ``errors`` the problem's
    ``[{"pointer", "detail"}]`` (the keys at fault, RFC 6901 pointers into the body sent)."""

    line: str
    status: int | None = None
    kind: str | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)

    def __str__(self) -> str:
        return self.line


class FleetClient:
    """The API at ``url`` (the admin listener's base URL; ``/api/v1`` is added) with ``token``;
    ``ca_path``: a CA bundle (PEM) to verify an HTTPS listener with (default: the system's)."""

    def __init__(self, url: str, token: str | None, ca_path: str | None = None) -> None:
        self.base = url.rstrip("/") + "/api/v1"
        self.session = requests.Session()
        self.session.headers["Accept"] = "application/json, application/problem+json"
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"
        if ca_path:
            self.session.verify = ca_path

    def call(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
             content_type: str = "application/json") -> Any:
        """The decoded JSON answer (``None`` for an empty one); raises :class:`ApiError`."""
        hdrs = dict(headers or {})
        if body is not None:
            hdrs["Content-Type"] = content_type
        try:
            resp = self.session.request(method, self.base + path, json=body, headers=hdrs, timeout=TIMEOUT,
                                        allow_redirects=False)
        except requests.RequestException as e:
            raise ApiError(f"{method} {path}: cannot reach {self.base}: {e}") from None
        if resp.status_code >= 400:
            raise self._problem(method, path, resp)
        if not resp.content:
            return None
        try:
            return resp.json()
        except ValueError:
            raise ApiError(f"{method} {path}: the answer is not JSON (is {self.base} the admin listener?)",
                           resp.status_code) from None

    @staticmethod
    def _problem(method: str, path: str, resp: requests.Response) -> ApiError:
        try:
            problem = resp.json()
        except ValueError:
            problem = None
        if not isinstance(problem, dict):
            text = " ".join(resp.text.split())[:200] or "no body"
            return ApiError(f"{method} {path}: {resp.status_code} error: {text}", resp.status_code)
        kind = str(problem.get("type") or "").rstrip("/").rsplit("/", 1)[-1] or "error"
        detail = " ".join(str(problem.get("detail") or problem.get("title") or "").split())
        errors = [e for e in problem.get("errors") or [] if isinstance(e, dict)]
        line = f"{method} {path}: {resp.status_code} {kind}: {detail}"
        if errors:
            line += " (" + "; ".join(f"{e.get('pointer', '')}: {e.get('detail', '')}" for e in errors) + ")"
        return ApiError(line, resp.status_code, kind, errors)

    @staticmethod
    def node_path(name: str) -> str:
        """``/nodes/<name>``, the name escaped as a path segment."""
        return "/nodes/" + quote(name, safe="")

    def get_node(self, name: str) -> dict[str, Any] | None:
        """The node's representation, ``None`` when there is none (404)."""
        try:
            node: dict[str, Any] = self.call("GET", self.node_path(name))
        except ApiError as e:
            if e.status == 404:
                return None
            raise
        return node

    def create_node(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """``PUT`` with ``If-None-Match: *`` (create only: a node of that name is a 412)."""
        node: dict[str, Any] = self.call("PUT", self.node_path(name), body, {"If-None-Match": "*"})
        return node

    def patch_node(self, name: str, patch: dict[str, Any], generation: int | None) -> dict[str, Any]:
        """RFC 7396 merge patch, ``If-Match`` on ``generation`` (the one Terraform last read)."""
        headers = {} if generation is None else {"If-Match": f'"{generation}"'}
        node: dict[str, Any] = self.call("PATCH", self.node_path(name), patch, headers,
                                         content_type="application/merge-patch+json")
        return node

    def delete_node(self, name: str, generation: int | None) -> None:
        """``DELETE`` (``If-Match`` on ``generation``); a node already gone is no error."""
        headers = {} if generation is None else {"If-Match": f'"{generation}"'}
        try:
            self.call("DELETE", self.node_path(name), headers=headers)
        except ApiError as e:
            if e.status != 404:
                raise

    def get_profile(self, name: str) -> dict[str, Any]:
        """The profile's keys and ``name``; raises :class:`ApiError` (404 for an unknown profile)."""
        profile: dict[str, Any] = self.call("GET", "/profiles/" + quote(name, safe=""))
        return profile
