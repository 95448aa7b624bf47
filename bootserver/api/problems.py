"""The fleet API's errors as RFC 9457 problem details (``application/problem+json``): one stable ``type``
URI per kind (:data:`KINDS`), and :class:`Problem`, the exception a handler raises to answer one.

The kinds are the contract (docs/api.md, "Errors"): a client branches on ``type``, never on ``title``
or ``detail`` (words for a person). ``detail`` and each ``errors[].detail`` never carry a secret, a local
path or a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: The base of every problem ``type`` URI (``BASE + kind``). The URIs identify the kinds; they are not
#: fetched (RFC 9457 section 3.1.1 allows a non-dereferenceable URI).
BASE = "https://bootserver.dev/problems/"

#: The media type of every error answer (RFC 9457 section 3).
MEDIA_TYPE = "application/problem+json"


@dataclass(frozen=True)
class Kind:
    """One problem kind: its ``type`` suffix (``kind``), HTTP ``status`` and ``title`` (the same for every
    occurrence, RFC 9457 section 3.1.3)."""

    kind: str
    status: int
    title: str

    @property
    def type(self) -> str:
        """The ``type`` URI."""
        return BASE + self.kind


#: Every problem kind of the API, by ``kind`` (docs/api.md lists them with when each is answered).
KINDS: dict[str, Kind] = {k.kind: k for k in (
    Kind("malformed-json", 400, "The request body is not valid JSON"),
    Kind("invalid-parameter", 400, "A query parameter or header is invalid"),
    Kind("unauthorized", 401, "No valid token"),
    Kind("forbidden", 403, "The token's scopes do not allow this"),
    Kind("not-found", 404, "No such resource"),
    Kind("method-not-allowed", 405, "Method not allowed on this resource"),
    Kind("file-managed", 409, "The node is defined in a config file"),
    Kind("conflict", 409, "Another node holds this name, MAC, UUID or address"),
    Kind("gone", 410, "The revision asked for is no longer kept"),
    Kind("precondition-failed", 412, "The precondition does not hold"),
    Kind("payload-too-large", 413, "The request body is too large"),
    Kind("unsupported-media-type", 415, "Unsupported content type"),
    Kind("invalid-node", 422, "The node is refused by the config's checks"),
    Kind("unprocessable", 422, "The request is refused"),
    Kind("internal-error", 500, "Internal error"),
    Kind("unavailable", 503, "Not available now, retry later"),
)}


@dataclass(frozen=True)
class FieldError:
    """One refused part of a body: its JSON Pointer (RFC 6901, ``/redfish/address``) and what is wrong,
    in the words ``check-config`` uses."""

    pointer: str
    detail: str


class Problem(Exception):
    """An API answer that is an error: kind ``kind`` (a key of :data:`KINDS`), ``detail`` for a person,
    ``errors`` (the body's refused parts, :class:`FieldError`), ``headers`` to add (``Allow``,
    ``Retry-After``, ``WWW-Authenticate``) and ``extra`` members (e.g. ``conflicting_node``)."""

    def __init__(self, kind: str, detail: str, *, errors: Sequence[FieldError] = (),
                 headers: dict[str, str] | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.kind = KINDS[kind]
        self.detail = detail
        self.errors = tuple(errors)
        self.headers = headers or {}
        self.extra = extra

    def body(self, instance: str | None = None) -> dict[str, Any]:
        """The problem details object (RFC 9457 section 3.1) with ``instance`` when given."""
        out: dict[str, Any] = {"type": self.kind.type, "title": self.kind.title, "status": self.kind.status,
                               "detail": self.detail}
        if instance is not None:
            out["instance"] = instance
        if self.errors:
            out["errors"] = [{"pointer": e.pointer, "detail": e.detail} for e in self.errors]
        out.update(self.extra)
        return out


def pointer(loc: Sequence[Any]) -> str:
    """A JSON Pointer (RFC 6901) of the location ``loc`` (keys and list indexes): ``("redfish",
    "address")`` -> ``/redfish/address``; ``~`` and ``/`` escaped as ``~0`` and ``~1``."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in loc)
