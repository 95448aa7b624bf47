# -*- coding: utf-8 -*-
# Copyright: bootserver developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What the node module wants against what the fleet API has: the node's keys (the config's node schema,
docs/config.md), their defaults and normal forms, and the RFC 7396 merge patch that takes the one to
the other.

Semantics (module ``bootserver.fleet.node``): a top-level key the task does not give is left as it is;
inside ``redfish`` and ``ipmi`` a sub-key not given is left as it is; ``metal`` and ``network`` are whole
values (a document given replaces the one there). A BMC password is never read back: the API says only
``password_set``; it is sent when ``update_password`` is ``always``, or when the node has none yet.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import ipaddress

#: The BMC mappings' own keys (bootserver.config.bmc_settings, redfish_settings, ipmi_settings).
BMC_COMMON = dict(
    address=dict(type="str"),
    username=dict(type="str"),
    password=dict(type="str", no_log=True),
    password_file=dict(type="str"),
    password_env=dict(type="str", no_log=False),
    boot_mode=dict(type="str", choices=["uefi", "legacy"]),
    boot_source=dict(type="str", choices=["pxe", "virtual-media", "http"]),
    timeout=dict(type="float"),
)
REDFISH_ARGS = dict(BMC_COMMON, system=dict(type="str"), verify_tls=dict(type="raw"))
IPMI_ARGS = dict(BMC_COMMON, port=dict(type="int"), persistent=dict(type="bool"), cipher_suite=dict(type="int"))

#: Every node key of the config's schema (bootserver.config.schema.Node) as module options.
NODE_ARGS = dict(
    profile=dict(type="str"),
    facility=dict(type="str"),
    mac=dict(type="list", elements="str"),
    uuid=dict(type="str"),
    hostname=dict(type="str"),
    provider=dict(type="str", choices=["equinix", "redfish", "ipmi"]),
    metal=dict(type="dict"),
    redfish=dict(type="dict", options=REDFISH_ARGS),
    ipmi=dict(type="dict", options=IPMI_ARGS),
    addresses=dict(type="list", elements="str"),
    selectable=dict(type="bool"),
    default=dict(type="bool"),
    network=dict(type="raw"),
    secure_boot=dict(type="bool"),
)

#: A key's value when the representation leaves it out (keys at their defaults may be omitted).
DEFAULTS = {"mac": [], "addresses": [], "selectable": False, "default": False, "metal": {}, "redfish": {},
            "ipmi": {}}

#: Keys whose given sub-keys are merged into what is there (the others are replaced whole).
MERGED = ("redfish", "ipmi")
SECRETS = ("redfish", "ipmi")


def _mac(value):
    return value.strip().lower().replace("-", ":")


def _network(value):
    try:
        return str(ipaddress.ip_network(u"%s" % value.strip(), strict=False))
    except ValueError:
        return value


def normal(key, value):
    """``value`` of node key ``key`` in the form the server keeps it (MACs lower-case with colons,
    addresses as CIDRs, ``uuid`` lower-case), so that equal values compare equal."""
    if value is None:
        return DEFAULTS.get(key)
    if key == "mac":
        return [_mac(v) for v in ([value] if isinstance(value, str) else value)]
    if key == "addresses":
        return [_network(v) for v in ([value] if isinstance(value, str) else value)]
    if key == "uuid" and isinstance(value, str):
        return value.lower()
    if key in MERGED and isinstance(value, dict):
        return dict((k, v) for k, v in value.items() if v is not None)
    return value


def current_view(node):
    """The writable keys of a node's representation, defaults filled in, ``password_set`` kept aside:
    ``(view, {"redfish": bool, "ipmi": bool})``."""
    view, password_set = {}, {}
    for key in NODE_ARGS:
        value = copy.deepcopy(normal(key, node.get(key)))
        if key in SECRETS:
            value = dict(value or {})
            password_set[key] = bool(value.pop("password_set", False))
            value.pop("password", None)
        view[key] = value
    return view, password_set


def wanted_view(before, params):
    """``before`` with the task's keys applied (:data:`MERGED` keys merged one level, the rest replaced);
    passwords left out: ``(after, {"redfish": password or None, ...})``."""
    after, passwords = copy.deepcopy(before), {}
    for key in NODE_ARGS:
        given = params.get(key)
        if given is None:
            continue
        value = normal(key, copy.deepcopy(given))
        if key in MERGED:
            passwords[key] = value.pop("password", None)
            merged = dict(after.get(key) or {})
            merged.update(value)
            after[key] = merged
        else:
            after[key] = value
    return after, passwords


def replacing_patch(before, after):
    """The RFC 7396 merge patch that turns ``before`` into exactly ``after`` (keys gone become ``null``,
    nested mappings patched key by key, anything else replaced whole); ``{}`` when they are equal."""
    patch = {}
    for key, value in after.items():
        old = before.get(key)
        if value == old:
            continue
        if isinstance(value, dict) and isinstance(old, dict) and value:
            patch[key] = replacing_patch(old, value)
        else:
            patch[key] = value
    for key in before:
        if key not in after and before[key] is not None:
            patch[key] = None
    return patch


def plan(node, params, update_password):
    """What to send for the task ``params`` given the node read (``None``: absent).

    Returns ``(patch_or_body, diff)``: for an absent node the whole body to create it (defaults left
    out); else the merge patch (``{}``: nothing to change). A password is sent when
    ``update_password == "always"`` or the node has none in that mapping. ``diff`` is Ansible's
    ``{"before": ..., "after": ...}`` with passwords shown only as ``password_set``.
    """
    before, password_set = current_view(node or {})
    after, passwords = wanted_view(before, params)
    if node is None:
        body = copy.deepcopy(dict((k, v) for k, v in after.items() if v != DEFAULTS.get(k) and v is not None))
        for key, password in passwords.items():
            if password is not None:
                body.setdefault(key, {})["password"] = password
        return body, _diff({}, {}, after, dict((k, p is not None) for k, p in passwords.items()))
    patch = replacing_patch(before, after)
    will_set = dict(password_set)
    for key, password in passwords.items():
        if password is not None and (update_password == "always" or not password_set.get(key)):
            patch.setdefault(key, {})["password"] = password
            will_set[key] = True
    return patch, _diff(before, password_set, after, will_set)


def _diff(before, before_set, after, after_set):
    def shown(view, flags):
        out = copy.deepcopy(view)
        for key, flag in flags.items():
            if flag:
                out[key] = dict(out.get(key) or {}, password_set=True)
        return dict((k, v) for k, v in out.items() if v not in (None, [], {}))
    return {"before": shown(before, before_set) if before else {}, "after": shown(after, after_set)}
