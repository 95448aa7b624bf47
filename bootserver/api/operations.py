"""Every operation of the fleet API declared once (:data:`OPERATIONS`): method, path below ``/api/v1``,
the scope it needs, what the frame resolves before the handler runs, its query and body models, its
answers and the problem kinds it may answer. The aiohttp side (:mod:`bootserver.http.api`) serves each
with the handler of its ``name``; the OpenAPI document (:mod:`bootserver.api.openapi`) is written from
the same declarations, so the two cannot drift.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from . import models

#: The API's base path on the admin listener.
PREFIX = "/api/v1"

#: A token's scopes (docs/api.md, "Tokens and scopes"): ``read`` reads everything but secrets; ``write``
#: changes nodes (and reads); ``actions`` runs provision, deprovision, reinstall and adopt (and reads);
#: ``admin`` does everything.
Scope = Literal["read", "write", "actions", "admin"]
SCOPES: tuple[str, ...] = ("read", "write", "actions", "admin")

#: What each scope grants (a token holds one or more scopes).
GRANTS: Mapping[str, frozenset[str]] = {
    "read": frozenset({"read"}),
    "write": frozenset({"read", "write"}),
    "actions": frozenset({"read", "actions"}),
    "admin": frozenset(SCOPES),
}

#: What an operation needs resolved before its handler runs: nothing, an existing node named by the
#: ``{name}`` path segment (404 otherwise), a node name that may not exist yet (PUT), an existing
#: profile.
ACTIONS = ("reinstall", "provision", "deprovision")
Resolve = Literal["none", "node", "node_name", "profile"]

JSON = "application/json"


@dataclass(frozen=True)
class Link:
    """An OpenAPI link from an answer to ``operation``, passing the answer's (or request's) values as its
    parameters (``{"name": "$response.body#/name"}``): the chains a stateful test follows."""

    operation: str
    parameters: Mapping[str, str]
    description: str = ""


@dataclass(frozen=True)
class Operation:
    """One operation: ``name`` (its ``operationId`` and handler's name), ``method``, ``path`` (below
    :data:`PREFIX`, ``{name}``/``{mac}`` segments), the ``scope`` a token needs, what the frame
    ``resolve``\\ s, the ``query`` and ``body`` models (the body's media types in ``media``), the
    ``answers`` (status -> model, ``None``: no body), ``headers`` of the answers (name -> description),
    the ``problems`` it may answer beyond those every operation may (:data:`COMMON_PROBLEMS`), and
    ``links`` per status."""

    name: str
    method: str
    path: str
    scope: Scope
    summary: str
    answers: Mapping[int, type[BaseModel] | None]
    resolve: Resolve = "none"
    query: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    media: tuple[str, ...] = (JSON,)
    #: Request headers: name -> (description, JSON Schema of the value).
    request_headers: Mapping[str, tuple[str, Mapping[str, Any]]] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    links: Mapping[int, Mapping[str, Link]] = field(default_factory=dict)
    #: Whether the operation is answered without a token (the OpenAPI document itself).
    open: bool = False
    #: Whether the answer is a stream of Server-Sent Events (``text/event-stream``).
    stream: bool = False

    @property
    def full_path(self) -> str:
        """The path on the admin listener (``/api/v1/nodes/{name}``)."""
        return PREFIX + self.path


#: The problems every authenticated operation may answer.
COMMON_PROBLEMS = ("unauthorized", "forbidden", "unavailable")

_ETAG = {"ETag": "the node's generation, quoted (RFC 9110 section 8.8.3)"}
_CREATED = {**_ETAG, "Location": "the node's URL (201 only)"}
_IF_MATCH = {"If-Match": ('the node\'s generation as its ETag ("3"), or *: the write holds only for that '
                          "generation (412 otherwise, also for a value that names no generation; RFC 9110 "
                          "section 13.1.1)", {"type": "string"})}
_IF_NONE_MATCH = {"If-None-Match": ("*: create only (412 when the node exists; RFC 9110 section 13.1.2)",
                                    {"type": "string", "enum": ["*"]})}
_WRITE_PROBLEMS = ("not-found", "file-managed", "conflict", "precondition-failed", "invalid-node",
                   "malformed-json", "unsupported-media-type", "payload-too-large", "invalid-parameter")
MERGE_PATCH = "application/merge-patch+json"
_NAME = {"name": "$response.body#/name"}
#: What a stateful client can do next with a node it wrote (OpenAPI links).
_NODE_LINKS = {
    "GetNode": Link("getNode", _NAME, "read the node back"),
    "PatchNode": Link("patchNode", _NAME, "change some of its keys"),
    "DeleteNode": Link("deleteNode", _NAME, "delete it"),
    "GetTimeline": Link("getNodeTimeline", _NAME, "its history"),
}

#: Every operation of the API, in the OpenAPI document's order.
OPERATIONS: tuple[Operation, ...] = (
    Operation("getOpenapi", "GET", "/openapi.json", "read", "This OpenAPI 3.1 document", {200: None},
              open=True),
    Operation("listNodes", "GET", "/nodes", "read", "The nodes (both sources), a page at a time",
              {200: models.NodeList}, query=models.NodeListQuery, problems=("invalid-parameter",)),
    Operation("getNode", "GET", "/nodes/{name}", "read", "One node", {200: models.NodeView},
              resolve="node", headers=_ETAG, problems=("not-found",)),
    Operation("putNode", "PUT", "/nodes/{name}", "write", "Create or replace a store node",
              {201: models.NodeView, 200: models.NodeView}, resolve="node_name", body=models.NodeBody,
              request_headers={**_IF_MATCH, **_IF_NONE_MATCH}, headers=_CREATED, problems=_WRITE_PROBLEMS,
              links={201: _NODE_LINKS, 200: _NODE_LINKS}),
    Operation("patchNode", "PATCH", "/nodes/{name}", "write", "Change a store node (JSON merge patch, RFC 7396)",
              {200: models.NodeView}, resolve="node", body=models.NodePatch, media=(MERGE_PATCH,),
              request_headers=_IF_MATCH, headers=_ETAG, problems=_WRITE_PROBLEMS,
              links={200: _NODE_LINKS}),
    Operation("deleteNode", "DELETE", "/nodes/{name}", "write", "Delete a store node", {204: None},
              resolve="node", request_headers=_IF_MATCH,
              problems=("not-found", "file-managed", "precondition-failed", "invalid-parameter")),
    Operation("getNodeTimeline", "GET", "/nodes/{name}/timeline", "read",
              "The node's history (what `nodes show` prints)", {200: models.Timeline}, resolve="node",
              query=models.TimelineQuery, problems=("not-found", "invalid-parameter")),
    Operation("listProfiles", "GET", "/profiles", "read", "The profiles", {200: models.ProfileList}),
    Operation("getProfile", "GET", "/profiles/{name}", "read", "One profile", {200: models.ProfileView},
              resolve="profile", problems=("not-found",)),
    Operation("listDiscovered", "GET", "/discovered", "read", "The machines that reported themselves",
              {200: models.DiscoveredList}),
    Operation("postNodeAction", "POST", "/nodes/{name}/actions/{action}", "actions",
              "Reinstall, provision or deprovision a node (202: follow Location and its stage)",
              {202: models.ActionAccepted}, resolve="node",
              headers={"Location": "the node's URL: follow its stage"},
              problems=("not-found", "unprocessable")),
    Operation("adoptDiscovered", "POST", "/discovered/{mac}/adopt", "actions",
              "Make a discovered machine a store node (as bootserver nodes adopt)",
              {201: models.NodeView}, body=models.AdoptBody, headers=_CREATED,
              problems=("not-found", "conflict", "unprocessable", "invalid-node", "malformed-json",
                        "unsupported-media-type", "payload-too-large"),
              links={201: _NODE_LINKS}),
    Operation("listAudit", "GET", "/audit", "read", "The audit trail of writes and actions, newest first",
              {200: models.AuditList}, query=models.AuditQuery, problems=("invalid-parameter",)),
    Operation("watch", "GET", "/watch", "read",
              "Server-Sent Events: one per node added, changed, deleted or changing stage",
              {200: None}, query=models.WatchQuery, problems=("gone", "invalid-parameter"),
              stream=True),
)
