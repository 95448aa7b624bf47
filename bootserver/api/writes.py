"""A node written through the fleet API, before and after the store (docs/api.md, "Nodes"): the body made
into the mapping the store keeps (read-only keys dropped, a write-only BMC password sealed:
:mod:`bootserver.sealing`), a JSON merge patch applied (RFC 7396), the changed keys an audit entry names
(never a value), and the store's and the config's refusals as problem details.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import (
    ConfigError,
    FileNodeError,
    InputError,
    NodeCheckError,
    NodeConflictError,
    PreconditionFailedError,
    UnknownStoreNodeError,
)
from ..sealing import seal
from .problems import FieldError, Problem
from .views import BMC_KEYS

#: The read-only keys of a representation, ignored in a body.
READ_ONLY = ("name", "source", "generation", "stage", "since")
#: A BMC mapping's password sources (one at a time).
PASSWORD_SOURCES = ("password_file", "password_env", "password_sealed")


def merge_patch(target: Any, patch: Any) -> Any:
    """``patch`` applied to ``target`` as RFC 7396 section 2 says: a mapping patch merges key by key
    (``null`` removes the key), anything else replaces the target. ``target`` is not changed."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def password_patch(patch: Any) -> Any:
    """A merge patch's BMC passwords made to merge with a stored mapping: ``password: null`` removes the
    sealed one, a ``password_file`` or ``password_env`` set replaces it (RFC 7396 alone would keep it)."""
    if not isinstance(patch, dict):
        return patch
    out = dict(patch)
    for key in BMC_KEYS:
        bmc = out.get(key)
        if not isinstance(bmc, dict):
            continue
        bmc = dict(bmc)
        if "password" in bmc and bmc["password"] is None:
            del bmc["password"]
            bmc["password_sealed"] = None
        if any(bmc.get(k) is not None for k in ("password_file", "password_env")):
            bmc["password_sealed"] = None
        out[key] = bmc
    return out


def _refuse(pointer: str, detail: str, name: str) -> Problem:
    return Problem("invalid-node", f"node {name}: {detail}", errors=[FieldError(pointer, detail)])


def spec_of(name: str, body: Any, state_dir: Path, kept: Mapping[str, Any] | None, *, keep: bool = True,
            sealer: Callable[[Path, str, str, str], str] = seal) -> dict[str, Any]:
    """The mapping the store keeps for node ``name`` from a body (a ``PUT``'s, or a stored mapping with a
    merge patch applied): the read-only keys and each BMC mapping's ``password_set`` dropped, a
    ``password`` sealed into ``password_sealed`` (``state_dir``'s key; it replaces ``password_file`` and
    ``password_env``), ``password: null`` dropping it; a BMC mapping that names no password source keeps
    the sealed password of ``kept`` (the stored mapping; ``None``: a new node) when ``keep`` (a ``PUT``; a
    merge patch kept it already unless it removed it). Raises :class:`Problem`
    (``invalid-node``) for a body that is no mapping, a password that is no string, or a
    ``password_sealed`` sent in (it is the server's)."""
    if not isinstance(body, dict):
        raise _refuse("", f"expected a JSON object, got {type(body).__name__}", name)
    spec = {k: v for k, v in body.items() if k not in READ_ONLY}
    for key in BMC_KEYS:
        given = spec.get(key)
        if not isinstance(given, Mapping):
            continue
        bmc = dict(given)
        bmc.pop("password_set", None)
        if "password_sealed" in bmc and (kept is None or bmc["password_sealed"] != _sealed(kept, key)):
            raise _refuse(f"/{key}/password_sealed", "is the server's: send the password as password", name)
        if "password" in bmc:
            password = bmc.pop("password")
            for other in PASSWORD_SOURCES:
                bmc.pop(other, None)
            if password is not None:
                if not isinstance(password, str) or not password or len(password) > 1024 or "\n" in password:
                    raise _refuse(f"/{key}/password", "expected a string of 1 to 1024 characters, one line", name)
                bmc["password_sealed"] = sealer(state_dir, name, key, password)
        elif keep and not any(bmc.get(k) is not None for k in PASSWORD_SOURCES):
            sealed = _sealed(kept, key)
            if sealed is not None:
                bmc["password_sealed"] = sealed
        spec[key] = bmc
    return spec


def _sealed(spec: Mapping[str, Any] | None, key: str) -> str | None:
    bmc = (spec or {}).get(key)
    return bmc.get("password_sealed") if isinstance(bmc, Mapping) else None


def changed_keys(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None, prefix: str = "") -> list[str]:
    """The key paths (``redfish.address``, ``mac``) whose values differ between two node mappings, a
    sealed password named ``<bmc>.password``; never a value."""
    a, b = before or {}, after or {}
    out: list[str] = []
    for key in sorted(set(a) | set(b)):
        shown = "password" if key == "password_sealed" else key
        path = f"{prefix}{shown}"
        if a.get(key) == b.get(key):
            continue
        if isinstance(a.get(key), Mapping) and isinstance(b.get(key), Mapping) and key != "network":
            out += changed_keys(a[key], b[key], path + ".")
        else:
            out.append(path)
    return out


_INDEX = re.compile(r"\[(\d+)\]")


def pointer_of(keypath: str, name: str) -> str:
    """A config key path (``nodes.web-1.redfish.address``, ``nodes.web-1.mac[0]``) as a JSON Pointer
    into the node's body (``/redfish/address``, ``/mac/0``)."""
    head = f"nodes.{name}"
    rest = keypath[len(head):] if keypath == head or keypath.startswith((head + ".", head + "[")) else keypath
    parts = [p for p in _INDEX.sub(r".\1", rest).split(".") if p]
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def problem_of(e: InputError, name: str) -> Problem:
    """The problem details of a refused write of node ``name`` (the store's and the config's typed
    errors): 404, 409 ``file-managed`` or ``conflict`` (naming the other node), 412, 422 ``invalid-node``
    with each error's JSON Pointer and the words ``check-config`` uses."""
    if isinstance(e, FileNodeError):
        return Problem("file-managed", f"node {name} is defined in a config file ({e.source}): change it there")
    if isinstance(e, NodeConflictError):
        what = "name" if e.key == "name" else {"mac": "MAC", "uuid": "SMBIOS UUID"}.get(e.key, e.key)
        detail = (f"node {name} already exists" if e.key == "name" else
                  f"{what} {e.value} is already node {e.holder}'s")
        return Problem("conflict", detail, conflicting_node=e.holder)
    if isinstance(e, PreconditionFailedError):
        have = "it does not exist" if e.actual is None else f"it is at generation {e.actual}"
        want = "that it does not exist (If-None-Match: *)" if e.expected is None else f"generation {e.expected}"
        return Problem("precondition-failed", f"node {name}: expected {want}, {have}")
    if isinstance(e, UnknownStoreNodeError):
        return Problem("not-found", f"no node {name}")
    if isinstance(e, NodeCheckError):
        errors = [FieldError(pointer_of(path, name), message) for path, message in e.errors]
        return Problem("invalid-node", f"node {name}: {len(errors)} error{'s' if len(errors) != 1 else ''}: "
                       f"{errors[0].detail}", errors=errors)
    if isinstance(e, ConfigError):
        return Problem("invalid-node", f"node {name}: {e.message}",
                       errors=[FieldError(pointer_of(e.keypath, name), e.message)])
    return Problem("invalid-node", f"node {name}: {e}")
