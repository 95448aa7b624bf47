"""The fleet API as the provider calls it: the standard library's ``urllib.request`` against the admin
listener's base URL plus ``/api/v1`` (docs/api.md), bearer token, JSON in and out; every error answer an
:class:`ApiError` that carries the RFC 9457 problem details.

Not ``requests``: Terraform starts the provider process two or three times per command, and importing
``requests`` was about half of the process's start (0.3 s of 0.6 s, ``python -X importtime``); a
provider makes a handful of plain JSON requests, which ``urllib.request`` does as well.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

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
        self.headers = {"Accept": "application/json, application/problem+json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        context = ssl.create_default_context(cafile=ca_path) if ca_path else None
        self.opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context), _NoRedirect())

    def call(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
             content_type: str = "application/json") -> Any:
        """The decoded JSON answer (``None`` for an empty one); raises :class:`ApiError`."""
        hdrs = {**self.headers, **(headers or {})}
        data = None
        if body is not None:
            hdrs["Content-Type"] = content_type
            data = json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, headers=hdrs, method=method)
        try:
            with self.opener.open(request, timeout=TIMEOUT) as resp:
                raw = resp.read()
                status = resp.status
        except urllib.error.HTTPError as e:
            with e:
                raise self._problem(method, path, e.code, e.read()) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ApiError(f"{method} {path}: cannot reach {self.base}: {reason}") from None
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise ApiError(f"{method} {path}: the answer is not JSON (is {self.base} the admin listener?)",
                           status) from None

    @staticmethod
    def _problem(method: str, path: str, status: int, raw: bytes) -> ApiError:
        try:
            problem = json.loads(raw)
        except ValueError:
            problem = None
        if not isinstance(problem, dict):
            text = " ".join(raw.decode("utf-8", "replace").split())[:200] or "no body"
            return ApiError(f"{method} {path}: {status} error: {text}", status)
        kind = str(problem.get("type") or "").rstrip("/").rsplit("/", 1)[-1] or "error"
        detail = " ".join(str(problem.get("detail") or problem.get("title") or "").split())
        errors = [e for e in problem.get("errors") or [] if isinstance(e, dict)]
        line = f"{method} {path}: {status} {kind}: {detail}"
        if errors:
            line += " (" + "; ".join(f"{e.get('pointer', '')}: {e.get('detail', '')}" for e in errors) + ")"
        return ApiError(line, status, kind, errors)

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


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not followed (the API makes none; a proxy or a wrong URL might)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None
