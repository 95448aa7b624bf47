"""What the fleet API shows: a node, a profile, a discovered machine, a node's history, as the JSON-able
dicts its answers carry (shaped as :mod:`bootserver.api.models` says; built as plain dicts, not through
the models, so a page of 1,000 nodes costs no validation), and the paging of the node list.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..config import STORE_SOURCE, Node, Profile, ResolvedNode, normalize_mac
from ..discovery import Discovered
from ..timeline import Event, NodeState
from .models import rfc3339
from .problems import Problem

#: The BMC mappings that may hold a write-only password.
BMC_KEYS = ("redfish", "ipmi")


def is_file_node(node: ResolvedNode | None) -> bool:
    """Whether ``node`` (a node of the running config as resolved, ``None``: none) is one of the config's
    files (not of the store)."""
    return node is not None and node.source != STORE_SOURCE


def node_view(node: ResolvedNode, written: Node, state: NodeState) -> dict[str, Any]:
    """A file node (as resolved, and its settings as ``written`` in its file) as the API shows it
    (:class:`~bootserver.api.models.NodeView`): its keys not at their defaults, as :func:`stored_view`
    shows them, ``generation`` 0."""
    return shown(node.name, written.model_dump(mode="json", exclude_defaults=True), node.source, 0, state)


def stored_view(name: str, spec: Mapping[str, Any], generation: int, state: NodeState) -> dict[str, Any]:
    """Store node ``name`` as the API shows it, from its stored mapping ``spec`` (see :func:`shown`)."""
    return shown(name, spec, STORE_SOURCE, generation, state)


def shown(name: str, spec: Mapping[str, Any], source: str, generation: int, state: NodeState) -> dict[str, Any]:
    """A node's mapping ``spec`` as the API shows it: its keys as given, each BMC mapping's sealed
    password left out and ``password_set`` in its place (whether any password source is set), and the
    read-only ``name``, ``source``, ``generation``, ``stage`` and ``since`` (``state``: its timeline state)."""
    out: dict[str, Any] = dict(spec)
    for key in BMC_KEYS:
        settings = out.get(key)
        if isinstance(settings, Mapping):
            bmc = {k: v for k, v in settings.items() if k != "password_sealed"}
            bmc["password_set"] = any(settings.get(k) is not None
                                      for k in ("password_sealed", "password_file", "password_env"))
            out[key] = bmc
    out.update(name=name, source=source, generation=generation, stage=state.stage, since=rfc3339(state.stage_at))
    return out


def profile_view(name: str, profile: Profile) -> dict[str, Any]:
    """Profile ``name`` (its settings ``profile``) as the API shows it: its keys not at their defaults and
    its ``name``."""
    return {**profile.model_dump(mode="json", exclude_defaults=True), "name": name}


def discovered_view(machine: Discovered) -> dict[str, Any]:
    """A discovered machine as the API shows it (times as RFC 3339)."""
    out = machine.as_dict()
    out["first_seen"] = rfc3339(machine.first_seen)
    out["last_seen"] = rfc3339(machine.last_seen)
    return out


def timeline_view(name: str, state: NodeState, events: Sequence[Event]) -> dict[str, Any]:
    """Node ``name``'s history (oldest first) with its current stage, as the API shows it."""
    return {"name": name, "stage": state.stage, "since": rfc3339(state.stage_at), "dropped_events": state.dropped,
            "items": [{"at": rfc3339(e.at), "event": e.event, "ip": e.ip, "detail": dict(e.detail), "count": e.count,
                       "last_at": rfc3339(e.at if e.last_at is None else e.last_at)} for e in events]}


def page_token(after: str) -> str:
    """The opaque token of the page that starts after node ``after`` (hex of its UTF-8: every token of
    :data:`PAGE_TOKEN` is one this server could give)."""
    return after.encode().hex()


#: What a page token looks like (the query parameter's schema).
PAGE_TOKEN = r"^([0-9a-f]{2}){1,100}$"


def page_after(token: str | None) -> str | None:
    """The name a page token starts after (``None``: the first page). Raises :class:`Problem`
    ``invalid-parameter`` for a token that is not of :data:`PAGE_TOKEN`'s form."""
    if token is None:
        return None
    if not re.match(PAGE_TOKEN, token):
        raise Problem("invalid-parameter", "page_token is not a token this server gave")
    return bytes.fromhex(token).decode(errors="replace")


def mac_matches(node: ResolvedNode, mac: str) -> bool:
    """Whether ``mac`` (any case and separator) is one of ``node``'s MACs."""
    try:
        return normalize_mac(mac) in node.mac
    except ValueError:
        return False
