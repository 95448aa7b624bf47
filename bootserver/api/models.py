"""The pydantic models of every body and answer of the fleet API (docs/api.md): the OpenAPI document
(:mod:`bootserver.api.openapi`) is generated from them, and request bodies and query strings are
validated with them.

A node's representation is the config's node schema (:class:`bootserver.config.Node`, the same keys and
checks as a file's ``nodes.<name>``) plus the read-only ``name``, ``source``, ``generation``, ``stage`` and
``since``; inside ``redfish`` and ``ipmi`` the write-only ``password`` is never shown, ``password_set``
says whether one is set. Times are RFC 3339 (``2026-12-02T03:04:05.678Z``, UTC).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel
from pydantic.json_schema import SkipJsonSchema

from ..config import Node, Profile
from ..config.ipmi_settings import IpmiSettings
from ..config.redfish_settings import RedfishSettings
from ..timeline import STAGES
from ..values import NAME_RE

#: A node's, profile's or token's name in a path (:data:`bootserver.values.NAME_RE`).
NamePath = Annotated[str, Field(pattern=NAME_RE, min_length=1, max_length=63)]

#: The stages a node can be in (docs/design.md, "Stage order").
Stage = Literal[STAGES]  # type: ignore[valid-type]


def _read_only(description: str, **default: Any) -> Any:
    return Field(description=description, json_schema_extra={"readOnly": True}, **default)


def rfc3339(at: float | None) -> str | None:
    """Unix seconds as RFC 3339 in UTC with milliseconds (``2026-12-02T03:04:05.678Z``); ``None`` as is."""
    if at is None:
        return None
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Answer(BaseModel):
    """Base of the answers' models: the keys listed, no others."""

    model_config = ConfigDict(extra="forbid")


class FieldErrorModel(Answer):
    """One refused part of a body: its JSON Pointer (RFC 6901) and what is wrong (check-config's words)."""

    pointer: str
    detail: str


class ProblemModel(BaseModel):
    """An error (RFC 9457 problem details, ``application/problem+json``): ``type`` is stable per kind
    (docs/api.md, "Errors"), ``title`` and ``detail`` are for a person."""

    model_config = ConfigDict(extra="allow", title="Problem")

    type: str = Field(description="https://bootserver.dev/problems/<kind>")
    title: str
    status: int
    detail: str
    instance: str | None = None
    errors: list[FieldErrorModel] | None = Field(
        default=None, description="invalid-node, unprocessable: each refused part of the body")
    conflicting_node: str | None = Field(default=None, description="conflict: the node that holds it")


_PASSWORD_SET = "whether a BMC password is set (password, password_file or password_env); never the password"
_PASSWORD = ("the BMC password (write-only: kept sealed, never shown; null removes it; left out of a PUT "
             "that names no password source, the kept one stays)")


class RedfishView(RedfishSettings):
    """A node's ``redfish`` mapping as shown: its keys, and whether a password is set (never the password)."""

    password_sealed: SkipJsonSchema[str | None] = None
    password_set: bool | None = _read_only(_PASSWORD_SET, default=None)


class IpmiView(IpmiSettings):
    """A node's ``ipmi`` mapping as shown: its keys, and whether a password is set (never the password)."""

    password_sealed: SkipJsonSchema[str | None] = None
    password_set: bool | None = _read_only(_PASSWORD_SET, default=None)


class RedfishBody(RedfishSettings):
    """A node's ``redfish`` mapping as written: its keys and the write-only ``password``."""

    model_config = ConfigDict(title="RedfishInput")

    password_sealed: SkipJsonSchema[str | None] = None
    password: str | None = Field(default=None, min_length=1, max_length=1024, description=_PASSWORD,
                                 json_schema_extra={"writeOnly": True})
    password_set: bool | None = _read_only(_PASSWORD_SET + " (ignored in a body)", default=None)


class IpmiBody(IpmiSettings):
    """A node's ``ipmi`` mapping as written: its keys and the write-only ``password``."""

    model_config = ConfigDict(title="IpmiInput")

    password_sealed: SkipJsonSchema[str | None] = None
    password: str | None = Field(default=None, min_length=1, max_length=1024, description=_PASSWORD,
                                 json_schema_extra={"writeOnly": True})
    password_set: bool | None = _read_only(_PASSWORD_SET + " (ignored in a body)", default=None)


class NodeView(Node):
    """A node as the API shows it: the config's node keys (those at their defaults left out) and the
    read-only ``name``, ``source`` (``store`` or ``file:PATH``), ``generation`` (the ``ETag``), ``stage``
    and ``since`` (when it entered that stage; ``null``: never booted)."""

    model_config = ConfigDict(title="Node", strict=False)

    redfish: RedfishView = Field(default_factory=RedfishView)
    ipmi: IpmiView = Field(default_factory=IpmiView)
    name: NamePath = _read_only("the node's name")
    source: str = _read_only("store, or file:PATH for a node of a config file (read-only here)")
    generation: int = _read_only("increases with every change; the node's ETag")
    stage: Stage = _read_only("the node's stage (docs/design.md, Stage order)")
    since: datetime | None = _read_only("when the node entered its stage (RFC 3339); null: never booted")


class NodeBody(Node):
    """A node as ``PUT`` writes it: the config's node keys (checked as ``check-config`` checks a file
    node), the write-only ``redfish.password`` / ``ipmi.password``; the read-only keys of a representation
    may be sent back and are ignored."""

    model_config = ConfigDict(title="NodeInput", strict=False)

    redfish: RedfishBody = Field(default_factory=RedfishBody)
    ipmi: IpmiBody = Field(default_factory=IpmiBody)
    name: str | None = _read_only("ignored (the path names the node)", default=None)
    source: str | None = _read_only("ignored", default=None)
    generation: int | None = _read_only("ignored (If-Match is the precondition)", default=None)
    stage: str | None = _read_only("ignored", default=None)
    since: str | None = _read_only("ignored", default=None)


class NodePatch(RootModel[dict[str, Any]]):
    """A JSON merge patch of a node (RFC 7396): the keys to set, ``null`` to remove one; nested mappings
    (``redfish``, ``metal``...) merge the same way."""

    model_config = ConfigDict(title="NodeMergePatch")


class NodeList(Answer):
    """A page of nodes, ordered by name; ``next_page_token`` fetches the next (``null``: the last page)."""

    items: list[NodeView]
    next_page_token: str | None


class NodeListQuery(BaseModel):
    """``GET /api/v1/nodes``'s query: every filter given must hold (``source``: ``store``, ``file`` or
    ``file:PATH``; ``mac``: any of the node's MACs, any case and separator)."""

    model_config = ConfigDict(extra="forbid")

    profile: NamePath | None = None
    source: Annotated[str, Field(min_length=1, max_length=500)] | None = None
    stage: Stage | None = None
    mac: Annotated[str, Field(pattern=r"^[0-9A-Fa-f]{2}([:-][0-9A-Fa-f]{2}){5}$")] | None = None
    limit: Annotated[int, Field(ge=1, le=1000)] = 100
    page_token: Annotated[str, Field(pattern=r"^([0-9a-f]{2}){1,100}$")] | None = None


class TimelineQuery(BaseModel):
    """``GET /api/v1/nodes/{name}/timeline``'s query: ``limit``, the last N events (default: every kept one)."""

    model_config = ConfigDict(extra="forbid")

    limit: Annotated[int, Field(ge=1, le=100000)] | None = None


class TimelineEvent(Answer):
    """One row of a node's history (what ``nodes show`` prints): ``event`` happened ``count`` times, the
    first at ``at``, the last at ``last_at``; ``ip`` the client's address; ``detail`` the event's facts."""

    at: datetime
    event: str
    ip: str | None
    detail: dict[str, Any]
    count: int
    last_at: datetime


class Timeline(Answer):
    """A node's history, oldest first, with its current ``stage`` and ``since``; ``dropped_events``: how
    many older rows ``timeline.keep_events`` removed."""

    name: str
    stage: Stage
    since: datetime | None
    dropped_events: int
    items: list[TimelineEvent]


class ProfileView(Profile):
    """A profile as the API shows it: its keys (those at their defaults left out) and its ``name``."""

    model_config = ConfigDict(title="ProfileView", strict=False)

    name: NamePath = _read_only("the profile's name")


class ProfileList(Answer):
    """Every profile, ordered by name."""

    items: list[ProfileView]


class DiscoveredView(Answer):
    """A machine that reported itself and is no node (``GET /discover``): its MAC (the key), SMBIOS UUID,
    the facts iPXE reported (each its first non-empty value), the address of its last report, every
    address that reported it (in the order they first did) and whether they are more than one (a
    conflict: two machines claim the MAC; adopting it needs the address to trust), its first and last
    report and their count, its architecture as the page shows it."""

    mac: str
    uuid: str | None
    facts: dict[str, str]
    address: str | None
    addresses: list[str]
    conflict: bool
    first_seen: datetime
    last_seen: datetime
    reports: int
    arch: str | None


class DiscoveredList(Answer):
    """Every discovered machine, newest report first."""

    items: list[DiscoveredView]



class ActionAccepted(Answer):
    """An action accepted (202): which, on which node, the request's id, and when. Follow ``Location`` (the
    node) and its ``stage``; the node's timeline records how the action ended (``provision``,
    ``provision-failed``, ...)."""

    action: Literal["reinstall", "provision", "deprovision"]
    node: str
    request_id: str
    accepted_at: datetime


class AdoptBody(BaseModel):
    """``POST /api/v1/discovered/{mac}/adopt``: the new node's ``name`` and ``profile``; ``addresses`` it
    may boot from (default: the address the machine reported from), or ``anywhere`` (any address,
    ``selectable``), as ``bootserver nodes adopt`` takes them."""

    model_config = ConfigDict(extra="forbid")

    name: NamePath
    profile: NamePath
    addresses: list[Annotated[str, Field(min_length=1, max_length=64)]] | None = None
    anywhere: bool = False


class AuditQuery(BaseModel):
    """``GET /api/v1/audit``'s query: one node's or one token's entries, the newest ``limit``."""

    model_config = ConfigDict(extra="forbid")

    node: NamePath | None = None
    token: Annotated[str, Field(min_length=1, max_length=63)] | None = None
    limit: Annotated[int, Field(ge=1, le=1000)] = 100


class AuditItem(Answer):
    """One write or action: when, the token's name, the client's address, the request id, the method, the
    node, the action (``created``, ``replaced``, ``patched``, ``deleted``, ``reinstall``, ``provision``,
    ``deprovision``, ``adopted``, ``token-created``, ``token-revoked``), the changed keys (never a value)
    and the answer's status."""

    at: datetime
    token: str
    client: str | None
    request_id: str
    method: str
    node: str | None
    action: str
    changed: list[str]
    status: int


class AuditList(Answer):
    """Audit entries, newest first."""

    items: list[AuditItem]


class WatchQuery(BaseModel):
    """``GET /api/v1/watch``'s query: the store revision to resume after (default: now)."""

    model_config = ConfigDict(extra="forbid")

    since: Annotated[int, Field(ge=0, le=2**62)] | None = None
