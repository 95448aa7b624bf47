"""ISC Kea's DHCPv6 configuration from the same rules and reservations (``bootserver dhcp --print
kea6``, with ``dhcp.ipv6``), for sites whose DHCP server is Kea: a whole ``Dhcp6`` document that
``kea-dhcp6 -c`` loads as it is (Kea runs DHCPv4 and DHCPv6 as two daemons with a file each: ``--print
kea`` is the ``Dhcp4`` one), or whose ``client-classes`` and ``subnet6`` a site merges into its own.

Kea 2.2's documentation ("Client Classification", "Host Reservations in DHCPv6", "DHCPv6 Server
Configuration") is the reference. Each rule of :func:`~bootserver.dhcp.rules.boot6_rules` becomes a client
class whose ``test`` reads, over DHCPv6, the user class (option 15: a 2-byte length, then the class; iPXE
sends ``iPXE``, src/net/udp/dhcpv6.c), the vendor class (option 16, ``vendor-class[343].data``: its
first class data, edk2's ``HTTPClient:Arch:00016:...``) and the client architecture (option 61), and
whose ``option-data`` is option 59 ``bootfile-url`` (commas escaped ``\\,`` as Kea's CSV option data
wants), and for UEFI HTTP Boot the vendor class option 16 back (enterprise 343, class data ``HTTPClient``:
edk2's HttpBootDhcp6.c takes no offer without it), sent always. The iPXE class comes first (the HTTP Boot
class tests ``not member('ipxe')``).

Each reservation is a ``reservations`` entry of the subnet by ``hw-address`` with its ``hostname`` and its
static IPv6 address (``ip-addresses``); ``host-reservation-identifiers`` is ``hw-address``: Kea learns a
DHCPv6 client's MAC from its DUID (DUID-LL, DUID-LLT), its EUI-64 link-local source address (only of a
universally administered MAC: Kea 2.2 wants the interface identifier's u-bit set) or a relay's client
link-layer address option (``mac-sources`` ``any``, Kea's default). edk2 and iPXE send a DUID-UUID, so
on a local link a machine is known by its link-local address: one with a locally administered MAC (a VM's
``52:54:00:...``) is not matched to its reservation. A ``secure_boot`` node gets no boot file over DHCPv6: every MAC of
it (:func:`~bootserver.dhcp.rules.node_macs`) has a reservation that carries the class ``secureboot``
(Kea 2.2 has no packet field for a DHCPv6 client's MAC, so reservations tell it; Kea evaluates again,
after the host lookup, every class that tests another), and the HTTP Boot class tests ``not
member('secureboot')``. Kea sends no router advertisements: the prefix's router must advertise it with
the managed flag (iPXE runs DHCPv6 only then), as ``bootserver dhcp``'s dnsmasq does.
"""

from __future__ import annotations

import json
from typing import Any

from ..config import Config
from ..errors import ConfigError
from .iface import InterfaceAddresses
from .reservations import Reservation, check_subnet6, subnet6_of
from .rules import HTTP6_ENTERPRISE, IPXE, SECURE_BOOT, BootRule, ClientClass, boot6_rules, secure_boot_macs


def class_test6(cls: ClientClass, not_ipxe: bool) -> str:
    """Kea's DHCPv6 test expression of client class ``cls`` (and, with ``not_ipxe``, of not being iPXE):
    ``user_class`` as option 15's one class (a 2-byte length, then the class), ``vendor_class`` as the
    start of the first class data of option 16 of enterprise
    :data:`~bootserver.dhcp.rules.HTTP6_ENTERPRISE`, ``arches`` as option 61 (RFC 5970: 2 bytes each)."""
    parts = []
    if cls.user_class is not None:
        data = cls.user_class.encode()
        parts.append(f"option[15].hex == 0x{len(data):04x}{data.hex()}")
    if cls.vendor_class is not None:
        parts.append(f"vendor-class[{HTTP6_ENTERPRISE}].exists and "
                     f"substring(vendor-class[{HTTP6_ENTERPRISE}].data,0,{len(cls.vendor_class)}) == "
                     f"'{cls.vendor_class}'")
    if cls.arches:
        parts.append("(" + " or ".join(f"option[61].hex == 0x{a:04x}" for a in cls.arches) + ")")
    if not_ipxe:
        parts.append(f"not member('{IPXE.name}')")
    return " and ".join(parts) if parts else "true"


def vendor_class6(value: str) -> str:
    """Option 16's data for class data ``value`` as hex (enterprise number, 2-byte length, data: RFC 8415
    section 21.16), what Kea's ``option-data`` takes with ``csv-format`` false."""
    data = value.encode()
    return f"{HTTP6_ENTERPRISE:08x}{len(data):04x}{data.hex()}"


def _class_entry(rule: BootRule, test: str) -> dict[str, Any]:
    options: list[dict[str, Any]] = [{"name": "bootfile-url", "data": rule.file.replace(",", "\\,")}]
    if rule.vendor_class is not None:
        options.append({"name": "vendor-class", "csv-format": False, "data": vendor_class6(rule.vendor_class),
                        "always-send": True})
    return {"name": rule.client.name, "test": test, "option-data": options}


def client_classes6(config: Config) -> list[dict[str, Any]]:
    """The Kea DHCPv6 client classes of :func:`~bootserver.dhcp.rules.boot6_rules`: with ``secure_boot``
    nodes, first the class ``secureboot`` (no test: their reservations carry it, :func:`reservations6`);
    then one class per rule, iPXE's first (a class may only test classes defined before it). With
    ``server.discovery`` off, each also tests ``member('KNOWN')`` (machines with a reservation)."""
    known_only = not config.server.discovery.enabled
    secure = bool(secure_boot_macs(config))
    classes: list[dict[str, Any]] = [{"name": SECURE_BOOT}] if secure else []
    for rule in sorted(boot6_rules(config), key=lambda r: r.client is not IPXE):
        test = class_test6(rule.client, rule.not_ipxe)
        if rule.not_secure_boot and secure:
            test += f" and not member('{SECURE_BOOT}')"
        if known_only:
            test += " and member('KNOWN')"
        classes.append(_class_entry(rule, test))
    return classes


def reservations6(config: Config, taken: tuple[Reservation, ...]) -> list[dict[str, Any]]:
    """The ``reservations`` of the DHCPv6 subnet: one per reservation of ``taken`` (``hw-address``,
    ``hostname``, ``ip-addresses`` with its static IPv6 address where it has one), and one per other MAC
    of a ``secure_boot`` node (``hw-address`` alone); every MAC of a ``secure_boot`` node's carries
    ``client-classes`` ``secureboot``."""
    entries: dict[str, dict[str, Any]] = {}
    for r in taken:
        entry: dict[str, Any] = {"hw-address": r.mac, "hostname": r.hostname}
        if r.ipv6 is not None:
            entry["ip-addresses"] = [str(r.ipv6.ip)]
        entries[r.mac] = entry
    for _node, mac in secure_boot_macs(config):
        entries.setdefault(mac, {"hw-address": mac})["client-classes"] = [SECURE_BOOT]
    return list(entries.values())


def kea6_config(config: Config, found: InterfaceAddresses | None, taken: tuple[Reservation, ...]) -> dict[str, Any]:
    """The ``{"Dhcp6": ...}`` document for ``config``: the interface, ``hw-address`` reservations, the
    client classes, one subnet on the interface's IPv6 prefix (:func:`~bootserver.dhcp.reservations.subnet6_of`;
    ``found``: the interface's addresses when it is on this machine) with the pool ``dhcp.range6`` (none:
    reserved machines only) and the reservations, ``valid-lifetime`` and ``preferred-lifetime`` from
    ``dhcp.lease_time`` (seconds). Raises :class:`~bootserver.errors.ConfigError` (one line, naming the key)
    without ``dhcp.ipv6``, when no prefix can be told, or when a reservation's IPv6 address or
    ``dhcp.range6`` lies outside it."""
    dhcp = config.dhcp
    assert dhcp is not None
    if not dhcp.ipv6:
        raise ConfigError(config.source, "dhcp.ipv6", "not set: --print kea6 is Kea's DHCPv6 configuration; set "
                          "ipv6: true (mode: full) to answer DHCPv6, or print Kea's DHCPv4 one with --print kea")
    prefix = subnet6_of(config, found, taken)
    if prefix is None:
        raise ConfigError(config.source, "dhcp.interface", f"{dhcp.interface} is not on this machine (or has no "
                          "global IPv6 address) and neither the reservations' IPv6 addresses nor dhcp.range6 "
                          "tell one IPv6 prefix to answer DHCPv6 on")
    check_subnet6(config, prefix, taken)
    sub: dict[str, Any] = {"id": 1, "subnet": str(prefix), "interface": dhcp.interface,
                           "pools": [{"pool": f"{dhcp.range6[0]} - {dhcp.range6[1]}"}] if dhcp.range6 else [],
                           "reservations": reservations6(config, taken)}
    return {"Dhcp6": {
        "interfaces-config": {"interfaces": [dhcp.interface]},
        "host-reservation-identifiers": ["hw-address"],
        "preferred-lifetime": dhcp.lease_time,
        "valid-lifetime": dhcp.lease_time,
        "client-classes": client_classes6(config),
        "subnet6": [sub],
    }}


def kea6_text(config: Config, found: InterfaceAddresses | None, taken: tuple[Reservation, ...]) -> str:
    """:func:`kea6_config` as indented JSON (what ``--print kea6`` prints)."""
    return json.dumps(kea6_config(config, found, taken), indent=2) + "\n"


__all__ = ["class_test6", "client_classes6", "kea6_config", "kea6_text", "reservations6", "vendor_class6"]
