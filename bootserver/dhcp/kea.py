"""ISC Kea's configuration from the same rules and reservations (``bootserver dhcp --print kea``), for
sites whose DHCP server is Kea: a whole ``Dhcp4`` document that ``kea-dhcp4 -c`` loads as it is, or
whose ``client-classes`` and ``subnet4`` a site merges into its own.

Kea 2.2's documentation ("Client Classification", "Host Reservations in DHCPv4") is the reference:
each :class:`~bootserver.dhcp.rules.ClientClass` becomes a client class whose ``test`` reads the
user class (option 77, ``option[77].hex``) and the client architecture (option 93,
``option[93].hex``, two bytes); each rule's class sets ``boot-file-name`` (and ``next-server``: the TFTP
server, for loader files); each reservation is a ``reservations`` entry of the subnet with its
``hw-address``, ``ip-address``, ``hostname`` and its own router and name servers. Kea reads classes in
order and a later class's ``boot-file-name`` does not replace an earlier one's, so the iPXE class comes
first and the loader classes also test ``not member('ipxe')`` (the loop guard). A UEFI HTTP Boot class
also sends option 60 ``HTTPClient`` (``vendor-class-identifier``). The ``secure_boot`` nodes are the class
``secureboot`` (every MAC of theirs, :func:`~bootserver.dhcp.rules.node_macs`: ``pkt4.mac``, the
``chaddr`` field); each has its own classes, tested by its MACs, that hand its stream's signed shim over
UEFI PXE (the TFTP file) and over UEFI HTTP Boot (the URL, with option 60), and the classes that hand a
UEFI x86_64 firmware iPXE test ``not member('secureboot')``: every client is of one boot class at most,
so no order of classes hands a Secure Boot node iPXE. (Not the reservation's own ``boot-file-name``: it
would replace the HTTP Boot class's URL with a TFTP name, which the firmware does not take.)
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from ..config import Config
from ..inventory import inventory
from .reservations import Reservation
from .rules import (
    CLASSES,
    IPXE,
    SECURE_BOOT,
    BootRule,
    ClientClass,
    boot_rules,
    node_macs,
    secure_boot_macs,
    tag_of,
)


def class_test(cls: ClientClass, not_ipxe: bool) -> str:
    """Kea's test expression of client class ``cls`` (and, with ``not_ipxe``, of not being iPXE)."""
    return _test(cls.user_class, cls.arches, not_ipxe, cls.vendor_class)


def _test(user_class: str | None, arches: tuple[int, ...], not_ipxe: bool, vendor_class: str | None = None) -> str:
    parts = []
    if user_class is not None:
        parts.append(f"option[77].hex == '{user_class}'")
    if vendor_class is not None:
        parts.append(f"substring(option[60].hex,0,{len(vendor_class)}) == '{vendor_class}'")
    if arches:
        parts.append("(" + " or ".join(f"option[93].hex == 0x{a:04x}" for a in arches) + ")")
    if not_ipxe:
        parts.append("not member('ipxe')")
    return " and ".join(parts) if parts else "true"


def _mac_test(macs: tuple[str, ...]) -> str:
    tests = [f"pkt4.mac == 0x{mac.replace(':', '').lower()}" for mac in macs]
    return tests[0] if len(tests) == 1 else "(" + " or ".join(tests) + ")"


def _class_entry(rule: BootRule, name: str, test: str, next_server: str | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "test": test, "boot-file-name": rule.file}
    if not rule.url and next_server is not None:
        entry["next-server"] = next_server
    if rule.vendor_class is not None:
        entry["option-data"] = [{"name": "vendor-class-identifier", "data": rule.vendor_class}]
    return entry


def client_classes(config: Config, next_server: str | None) -> list[dict[str, Any]]:
    """The Kea client classes of the boot rules (:func:`~bootserver.dhcp.rules.boot_rules`): with
    ``secure_boot`` nodes, first the class ``secureboot`` (every MAC of theirs); one class per rule for
    all, iPXE's first, and after it each ``secure_boot`` node's own classes (``node-<name>-<class>``: one
    of its MACs and the client class; a class may only test classes defined before it). ``next_server``:
    the TFTP server's IPv4 address for loader files, or ``None``."""
    known_only = not config.server.discovery.enabled
    secure, nodes = secure_boot_macs(config), inventory(config)
    classes: list[dict[str, Any]] = []
    if secure:
        macs = " or ".join(f"pkt4.mac == 0x{mac.replace(':', '').lower()}" for _node, mac in secure)
        classes.append({"name": SECURE_BOOT, "test": macs})
    rules = boot_rules(config)
    order = {cls.name: i for i, cls in enumerate(CLASSES)}
    for rule in sorted((r for r in rules if r.node is None), key=lambda r: order[r.client.name]):
        test = class_test(rule.client, rule.not_ipxe)
        if rule.not_secure_boot and secure:
            test += f" and not member('{SECURE_BOOT}')"
        if known_only:
            test += " and member('KNOWN')"
        classes.append(_class_entry(rule, rule.client.name, test, next_server))
        if rule.client is IPXE:  # the nodes' own classes test member('ipxe'): after its definition
            for own, node in ((r, r.node) for r in rules if r.node is not None):
                test = f"{_mac_test(node_macs(nodes[node]))} and {class_test(own.client, own.not_ipxe)}"
                classes.append(_class_entry(own, f"{tag_of(node)}-{own.client.name}", test, next_server))
    return classes


def reservation_entry(r: Reservation) -> dict[str, Any]:
    """Reservation ``r`` as a Kea ``reservations`` entry (a node without a static IPv4 address: its MAC
    and host name only)."""
    entry: dict[str, Any] = {"hw-address": r.mac, "hostname": r.hostname}
    if r.ipv4 is not None:
        entry["ip-address"] = str(r.ipv4.ip)
        options = [{"name": "routers", "data": r.gateway or ""}] if r.gateway else []
        if r.dns:
            options.append({"name": "domain-name-servers", "data": ", ".join(r.dns)})
        if options:
            entry["option-data"] = options
    return entry


def kea_config(config: Config, subnet: ipaddress.IPv4Network, taken: tuple[Reservation, ...],
               next_server: str | None) -> dict[str, Any]:
    """The ``{"Dhcp4": ...}`` document for ``config`` on ``subnet``: the interface, the client classes,
    one subnet with the pool (``dhcp.range``; none: reserved machines only), ``dhcp.router``, ``dns``,
    ``domain`` and the reservations, ``valid-lifetime`` from ``dhcp.lease_time`` (seconds)."""
    dhcp = config.dhcp
    assert dhcp is not None
    options: list[dict[str, Any]] = []
    if dhcp.router:
        options.append({"name": "routers", "data": dhcp.router})
    if dhcp.dns:
        options.append({"name": "domain-name-servers", "data": ", ".join(dhcp.dns)})
    if dhcp.domain:
        options.append({"name": "domain-name", "data": dhcp.domain})
    sub: dict[str, Any] = {"id": 1, "subnet": str(subnet),
                           "pools": [{"pool": f"{dhcp.range[0]} - {dhcp.range[1]}"}] if dhcp.range else [],
                           "reservations": [reservation_entry(r) for r in taken]}
    if options:
        sub["option-data"] = options
    return {"Dhcp4": {
        "interfaces-config": {"interfaces": [dhcp.interface]},
        "valid-lifetime": dhcp.lease_time,
        "authoritative": True,
        "client-classes": client_classes(config, next_server),
        "subnet4": [sub],
    }}


def kea_text(config: Config, subnet: ipaddress.IPv4Network, taken: tuple[Reservation, ...],
             next_server: str | None) -> str:
    """:func:`kea_config` as indented JSON (what ``--print kea`` prints)."""
    return json.dumps(kea_config(config, subnet, taken, next_server), indent=2) + "\n"


__all__ = ["class_test", "client_classes", "kea_config", "kea_text", "reservation_entry"]
