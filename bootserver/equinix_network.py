"""``network: provider`` on Equinix Metal: a device's network from its device record, as an NMState document.

The record is what ``bootserver provision`` stores for the node's device (the state store's
``devices`` table, :attr:`Current.device <bootserver.timeline.Current.device>`), the Equinix Metal
API's ``Device``; the result is a :class:`~bootserver.nmstate.NetworkState` like the one an operator
writes, turned into kernel arguments by :func:`bootserver.nmstate.dracut_kargs`. The bond, its options,
the routes and the resolvers are those of Equinix's own images and of Afterburn's ``packet`` provider.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from bootserver.errors import DeviceRecordError
from bootserver.nmstate import NetworkState

#: Equinix Metal device network types whose bond0 carries the device's layer 3 addresses.
EQUINIX_NETWORK_TYPES = ("layer3", "hybrid-bonded")

#: Bond options of Equinix's own images and of Afterburn's packet provider (802.3ad over every NIC).
EQUINIX_BOND_OPTIONS = {"lacp_rate": "fast", "xmit_hash_policy": "layer3+4", "miimon": "100"}

#: Equinix Metal's recursive resolvers (https://deploy.equinix.com/developers/docs/metal/networking/).
EQUINIX_NAMESERVERS = ("147.75.207.207", "147.75.207.208")

#: The private network Equinix routes through a device's private IPv4 gateway.
EQUINIX_PRIVATE_NETWORK = "10.0.0.0/8"

def equinix_network(device: Mapping[str, Any], node: str = "") -> NetworkState:
    """The network of an Equinix Metal device, from the record ``bootserver provision`` stores (the
    node's device record in the state store, :attr:`Current.device
    <bootserver.timeline.Current.device>`: ``ip_addresses[]`` with ``address``,
    ``address_family``, ``cidr``, ``gateway``, ``public``; ``network_ports[]`` with ``type``, ``name``,
    ``data.mac``, ``bond.name``, ``network_type``, as the Equinix Metal OpenAPI spec's ``IPAssignment``
    and ``Port`` name them).

    The result: the bonded ``NetworkPort``s pinned to their MACs as ``nic0``, ``nic1``, ... (in the order
    of their API names, ``eth0``, ``eth1``; dracut forbids the kernel's own names), ``bond0`` in mode
    802.3ad with :data:`EQUINIX_BOND_OPTIONS`; on the bond, the public IPv4 with its gateway as the IPv4
    default route, the private IPv4 without a gateway and a route to :data:`EQUINIX_PRIVATE_NETWORK`
    through its gateway, the public IPv6 with its gateway as the IPv6 default route; DNS
    :data:`EQUINIX_NAMESERVERS`. A pure function of ``device``.

    Raises :class:`DeviceRecordError` for a device whose bond's ``network_type`` is not ``layer3`` or
    ``hybrid-bonded`` (naming it), or a record without ports, MACs, prefix lengths or gateways (written
    before bootserver stored them: run ``bootserver provision`` again).
    """
    who = f"node {node}: " if node else ""
    stale = f"{who}the device record lacks {{}}; run `bootserver provision {node or 'NODE'}` again to refresh it"
    ports = [p for p in device.get("network_ports") or () if isinstance(p, Mapping)]
    bonds = [p for p in ports if p.get("type") == "NetworkBondPort"]
    if not bonds:
        raise DeviceRecordError(stale.format("network_ports (a bond port)"))
    bond = next((b for b in bonds if b.get("name") == "bond0"), bonds[0])
    bond_name = str(bond.get("name") or "")
    network_type = bond.get("network_type") or "layer3"
    if network_type not in EQUINIX_NETWORK_TYPES:
        raise DeviceRecordError(f"{who}device network type {network_type} is not supported by network: "
                                f"provider (supported: {', '.join(EQUINIX_NETWORK_TYPES)})")
    members = sorted((p for p in ports if p.get("type") == "NetworkPort"
                      and isinstance(p.get("bond"), Mapping) and p["bond"].get("name") == bond_name),
                     key=lambda p: _natural(str(p.get("name") or "")))
    if not members:
        raise DeviceRecordError(stale.format(f"the NICs of {bond_name}"))
    interfaces: list[dict[str, Any]] = []
    for n, port in enumerate(members):
        mac = (port.get("data") or {}).get("mac") if isinstance(port.get("data"), Mapping) else None
        if not mac:
            raise DeviceRecordError(stale.format(f"the MAC of port {port.get('name')}"))
        interfaces.append({"name": f"nic{n}", "type": "ethernet", "mac-address": mac})
    v4: list[dict[str, Any]] = []
    v6: list[dict[str, Any]] = []
    routes: list[dict[str, Any]] = []
    for a in device.get("ip_addresses") or ():
        if not isinstance(a, Mapping) or not isinstance(a.get("address"), str):
            continue
        family = a.get("address_family") or a.get("family")
        if not isinstance(a.get("cidr"), int):
            raise DeviceRecordError(stale.format(f"the prefix length (cidr) of {a['address']}"))
        entry = {"ip": a["address"], "prefix-length": a["cidr"]}
        gateway = a.get("gateway")
        public = bool(a.get("public"))
        if family == 6:
            v6.append(entry)
        else:
            v4.append(entry)
        if not gateway:
            continue
        if public and not any(r["destination"] == ("::/0" if family == 6 else "0.0.0.0/0") for r in routes):
            routes.append({"destination": "::/0" if family == 6 else "0.0.0.0/0",
                           "next-hop-address": gateway, "next-hop-interface": bond_name})
        elif not public and family == 4 and not any(r["destination"] == EQUINIX_PRIVATE_NETWORK for r in routes):
            routes.append({"destination": EQUINIX_PRIVATE_NETWORK, "next-hop-address": gateway,
                           "next-hop-interface": bond_name})
    if not v4 and not v6:
        raise DeviceRecordError(stale.format("ip_addresses"))
    bond_iface: dict[str, Any] = {
        "name": bond_name, "type": "bond",
        "link-aggregation": {"mode": "802.3ad", "port": [i["name"] for i in interfaces],
                             "options": dict(EQUINIX_BOND_OPTIONS)},
        "ipv4": {"enabled": True, "address": v4} if v4 else {"enabled": False},
        "ipv6": {"enabled": True, "address": v6} if v6 else {"enabled": False},
    }
    try:
        return NetworkState.model_validate({
            "interfaces": [*interfaces, bond_iface],
            "routes": {"config": routes},
            "dns-resolver": {"config": {"server": list(EQUINIX_NAMESERVERS)}},
        })
    except ValueError as e:  # pydantic's ValidationError is a ValueError
        raise DeviceRecordError(f"{who}the device record does not describe a network: {_first_error(e)}") from None


def _natural(name: str) -> tuple[str, int]:
    m = re.match(r"^(.*?)([0-9]*)$", name)
    assert m is not None
    return m.group(1), int(m.group(2) or -1)


def _first_error(e: ValueError) -> str:
    errors = getattr(e, "errors", None)
    if callable(errors):
        first = errors()[0]
        return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    return str(e)
