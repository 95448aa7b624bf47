"""The attributes of ``bootserver_node`` (the config's node keys, docs/config.md, plus ``name``) and
``bootserver_profile``, and the values between Terraform's form and the API's.

A mapping such as ``redfish`` is a nested block of nesting SINGLE, ``redfish { address = "..." }``, each
inner attribute optional (:class:`Nested`: ``tf`` leaves a block's value form to the provider).

Equality is what the server means, not the spelling: MACs in any case and separator, an address and
its ``/32``, ``selectable = false`` and a key left out, an NMState document in JSON or YAML with its keys
in any order are equal, so a plan after an apply shows no change (:func:`same`).
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import yaml
from tf import types
from tf.schema import Attribute, Block, NestedBlock, NestMode

#: The node keys whose value is a mapping of settings (nested attributes), with their inner attributes.
BMC_COMMON: dict[str, types.TfType] = {
    "address": types.String(), "username": types.String(), "password": types.String(),
    "password_file": types.String(), "password_env": types.String(), "boot_mode": types.String(),
    "boot_source": types.String(), "timeout": types.Number(),
}
NESTED: dict[str, dict[str, types.TfType]] = {
    "redfish": {**BMC_COMMON, "system": types.String(), "verify_tls": types.String()},
    "ipmi": {**BMC_COMMON, "port": types.Number(), "persistent": types.Bool(), "cipher_suite": types.Number()},
    "metal": {
        "plan": types.String(), "metro": types.String(), "facility": types.List(types.String()),
        "billing_cycle": types.String(), "tags": types.List(types.String()), "spot_instance": types.Bool(),
        "spot_price_max": types.Number(), "hardware_reservation_id": types.String(),
        "project_ssh_keys": types.List(types.String()), "customdata": types.String(),
        "always_pxe": types.Bool(),
    },
}

#: What each key of a node is in Terraform (the nested mappings apart).
PLAIN: dict[str, types.TfType] = {
    "profile": types.String(), "facility": types.String(), "mac": types.List(types.String()),
    "uuid": types.String(), "hostname": types.String(), "provider": types.String(),
    "addresses": types.List(types.String()), "selectable": types.Bool(), "default": types.Bool(),
    "network": types.String(), "secure_boot": types.Bool(),
}

#: Node keys named otherwise in Terraform: ``provider`` is a meta-argument of every resource block.
TF_NAMES = {"provider": "machine_provider"}


def tf_name(key: str) -> str:
    """The Terraform attribute of node key ``key`` (the key itself but for :data:`TF_NAMES`)."""
    return TF_NAMES.get(key, key)


#: A key's value when the API's representation leaves it out.
DEFAULTS: dict[str, Any] = {"mac": [], "addresses": [], "selectable": False, "default": False}

DESCRIPTIONS = {
    "name": "The node's name (changing it replaces the node).",
    "profile": "The profile the node boots.",
    "facility": "The facility whose cache the node fetches its artifacts from.",
    "mac": "The node's MAC addresses.",
    "uuid": "The node's SMBIOS UUID.",
    "hostname": "The host name the node calls itself (default: its name).",
    "provider": "The node key provider (named machine_provider here: provider is a meta-argument of every "
                "Terraform resource): how provision reaches the machine, equinix, redfish or ipmi.",
    "addresses": "IP addresses or CIDRs allowed to fetch the node's script and configs.",
    "selectable": "Whether /boot.ipxe hands the node's script to any address.",
    "default": "Whether the node is the generic entry's fallback (live mode only).",
    "network": "dhcp, provider, or an NMState document as JSON or YAML text (jsonencode, yamlencode, file).",
    "secure_boot": "Whether the node's boot image is the Secure Boot one.",
    "redfish": "The node's Redfish BMC; password is write-only: sent, never read back.",
    "ipmi": "The node's IPMI BMC; password is write-only: sent, never read back.",
    "metal": "Equinix Metal device settings; customdata is JSON text.",
    "generation": "The node's generation on the server (its ETag), as last read.",
    "source": "store, or file:PATH for a node of a config file (not writable through the API).",
}

SECRET = "password"


class Nested(NestedBlock):
    """A nested block of nesting SINGLE (``redfish { address = "..." }``) whose attributes are all
    optional (``password`` sensitive); its value is a mapping of every inner name (``None``: unset), or
    ``None`` when the block is left out.

    A block rather than a protocol 6 nested attribute (``redfish = { ... }``): Terraform 1.0.3 crashes
    planning a nested attribute whose prior value is null (``objchange.proposedNewNestedType``: interface
    conversion, nil), which every create is."""

    def __init__(self, name: str, inner: dict[str, types.TfType], description: str) -> None:
        attributes = [Attribute(k, t, f"{name}.{k}", optional=True, sensitive=k == SECRET)
                      for k, t in inner.items()]
        super().__init__(name, NestMode.Single, Block(attributes=attributes, description=description))
        self.inner = inner

    def encode(self, value: Any) -> Any:
        if value is None or value is types.Unknown:
            return value
        return {k: value.get(k) for k in self.inner}

    def decode(self, value: Any) -> Any:
        return value

    def semantically_equal(self, a_decoded: Any, b_decoded: Any) -> bool:
        return bool(a_decoded == b_decoded)


def node_blocks() -> list[NestedBlock]:
    """``bootserver_node``'s blocks: the node keys whose value is a mapping (``redfish``, ``ipmi``, ``metal``)."""
    return [Nested(key, inner, DESCRIPTIONS[key]) for key, inner in NESTED.items()]


def node_attributes() -> list[Attribute]:
    """``bootserver_node``'s attributes: ``name`` (replaces the node when changed), every node key of the
    config's schema but the mappings (:func:`node_blocks`; optional, ``profile`` required), and the
    read-only ``generation`` and ``source``."""
    attrs = [Attribute("name", types.String(), DESCRIPTIONS["name"], required=True, requires_replace=True)]
    for key, kind in PLAIN.items():
        attrs.append(Attribute(tf_name(key), kind, DESCRIPTIONS[key], required=key == "profile",
                               optional=key != "profile"))
    attrs.append(Attribute("generation", types.Number(), DESCRIPTIONS["generation"], computed=True))
    attrs.append(Attribute("source", types.String(), DESCRIPTIONS["source"], computed=True))
    return attrs


#: ``bootserver_profile``'s attributes besides ``name``: (key, type) as the API shows a profile.
PROFILE_KEYS: dict[str, types.TfType] = {
    "stream": types.String(), "arch": types.String(), "mode": types.String(), "install_dev": types.String(),
    "ignition": types.String(), "ignition_version": types.String(), "kargs": types.List(types.String()),
    "console": types.String(), "platform_id": types.String(), "provider": types.String(),
    "boot_once": types.Bool(), "checkin": types.Bool(), "secure_boot": types.Bool(), "network": types.String(),
}


def profile_attributes() -> list[Attribute]:
    """``bootserver_profile``'s attributes: ``name`` (required) and the profile's keys (read-only), and
    ``json``: the whole profile as the API shows it, as JSON text."""
    attrs = [Attribute("name", types.String(), "The profile's name.", required=True)]
    attrs += [Attribute(k, t, f"The profile's {k}.", computed=True) for k, t in PROFILE_KEYS.items()]
    attrs.append(Attribute("json", types.String(), "The whole profile as the API shows it (JSON).", computed=True))
    return attrs


# --- values: Terraform <-> API ---------------------------------------------------------------------


def _json_text(value: Any) -> str:
    """JSON as Terraform's ``jsonencode`` writes it (keys sorted, no spaces)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _document(text: Any) -> Any:
    """A text attribute holding a document (JSON or YAML) as its data; other text as is."""
    if not isinstance(text, str) or text in ("dhcp", "provider"):
        return text
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _cidr(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value.strip(), strict=False))
    except ValueError:
        return value


def _number(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def normal(key: str, value: Any) -> Any:
    """A node key's value in one form for comparing (Terraform's or the API's alike)."""
    if key in NESTED:
        value = {k: normal_inner(key, k, v) for k, v in (value or {}).items()
                 if k not in ("password_set", SECRET) and v is not None}
        return value or None
    if value is None:
        value = DEFAULTS.get(key)
    if key == "mac" and value is not None:
        return [m.strip().lower().replace("-", ":") for m in value]
    if key == "addresses" and value is not None:
        return [_cidr(a) for a in value]
    if key == "uuid" and isinstance(value, str):
        return value.lower()
    if key == "network":
        return _document(value)
    return _number(value)


def normal_inner(key: str, inner: str, value: Any) -> Any:
    """An inner value of a nested mapping in one form (``verify_tls`` as a bool where it is one,
    ``customdata`` and ``facility`` of ``metal`` as data, numbers without ``.0``)."""
    if inner == "verify_tls" and isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if key == "metal" and inner == "customdata":
        return _document(value)
    if key == "metal" and inner == "facility" and isinstance(value, str):
        return [value]
    return _number(value)


def same(key: str, a: Any, b: Any) -> bool:
    """Whether two values of node key ``key`` mean the same to the server (passwords aside)."""
    return bool(normal(key, a) == normal(key, b))


def to_api(state: dict[str, Any]) -> dict[str, Any]:
    """The node keys of a Terraform value as the API's body: unset keys left out, documents as data,
    passwords included."""
    body: dict[str, Any] = {}
    for key in PLAIN:
        value = state.get(tf_name(key))
        if value is None:
            continue
        body[key] = _document(value) if key == "network" else _number(value)
    for key in NESTED:
        mapping = state.get(key)
        if not mapping:
            continue
        inner = {k: v if k == SECRET else normal_inner(key, k, v) for k, v in mapping.items() if v is not None}
        if inner:
            body[key] = inner
    return body


def from_api(node: dict[str, Any], prior: dict[str, Any] | None) -> dict[str, Any]:
    """A node's representation as Terraform's value, keeping ``prior``'s form of every value that means
    the same (so no plan shows a change of spelling), and ``prior``'s password where the API says one is
    set (it is never read back; none set: ``null``, so a password in the configuration shows as a change)."""
    prior = prior or {}
    state: dict[str, Any] = {"name": node.get("name", prior.get("name")), "generation": node.get("generation"),
                             "source": node.get("source")}
    for key in PLAIN:
        value, name = node.get(key), tf_name(key)
        if same(key, prior.get(name), value):
            state[name] = prior.get(name)
        elif key == "network" and value is not None and not isinstance(value, str):
            state[name] = _json_text(value)
        else:  # a key at its default is null (left out of the configuration), else the API's value
            state[name] = None if key in DEFAULTS and normal(key, value) == DEFAULTS[key] else value
    for key, inner in NESTED.items():
        state[key] = _block_from_api(key, inner, node.get(key) or {}, prior.get(key))
    return state


def _block_from_api(key: str, inner: dict[str, types.TfType], mapping: dict[str, Any],
                    prior: dict[str, Any] | None) -> dict[str, Any] | None:
    """A nested mapping (``redfish``, ``ipmi``, ``metal``) as Terraform's block value; ``None`` when nothing
    is set (unless the configuration wrote the block empty)."""
    before = prior or {}
    out: dict[str, Any] = {}
    for k in inner:
        value = mapping.get(k)
        if k == SECRET:
            out[k] = before.get(SECRET) if mapping.get("password_set") else None
        elif normal_inner(key, k, before.get(k)) == normal_inner(key, k, value):
            out[k] = before.get(k)
        elif k == "customdata" and value is not None:
            out[k] = _json_text(value)
        elif k == "verify_tls" and isinstance(value, bool):
            out[k] = "true" if value else "false"
        else:
            out[k] = value
    if any(v is not None for v in out.values()):
        return out
    return before if prior is not None and not any(v is not None for v in before.values()) else None


def replacing_patch(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The RFC 7396 merge patch that turns ``before`` into exactly ``after`` (keys gone become ``null``;
    mappings patched key by key; anything else replaced whole)."""
    patch: dict[str, Any] = {}
    for key, value in after.items():
        old = before.get(key)
        if value == old:
            continue
        patch[key] = replacing_patch(old, value) if isinstance(value, dict) and isinstance(old, dict) else value
    for key, old in before.items():
        if key not in after and old is not None:
            patch[key] = None
    return patch
