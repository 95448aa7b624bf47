"""A node's boot interface for its boot image: which NIC (by MAC), and its static IPv4 address,
gateway and DNS, from the node's ``network`` (an NMState document, ``provider``'s device record, or
DHCP); the image's loaders set these without DHCP (docs/design.md, "Boot without DHCP")."""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..config import Config, ResolvedNode
from ..errors import ConfigError, InputError
from ..grub import GrubUnsupported, grub_path
from ..inventory import inventory
from ..network import node_network
from ..nmstate import Interface, NetworkConfigError, NetworkState, check_network


class IsoError(InputError):
    """A node's boot image cannot say what its network needs (exit 2; the message names the node and
    the key): e.g. an interface that has only IPv6 addresses, which the image's iPXE cannot set."""


@dataclass(frozen=True)
class BootNetwork:
    """How the image brings up the node's boot interface.

    ``interface``: its name in the node's ``network`` (for messages; ``""`` without a network); ``mac``:
    the MAC the image's iPXE finds the NIC by (lower case, ``:``-separated; ``None``: the first NIC,
    ``net0``); ``address``/``prefix``: the static IPv4 address and its prefix length in bits (``None``:
    DHCP); ``gateway``: the IPv4 default route's next hop, or ``None``; ``dns``: IPv4 name servers.
    """

    interface: str
    mac: str | None
    address: str | None = None
    prefix: int = 0
    gateway: str | None = None
    dns: tuple[str, ...] = ()

    @property
    def dhcp(self) -> bool:
        """Whether the image asks DHCP for an address (the node has no static IPv4 address)."""
        return self.address is None

    @property
    def netmask(self) -> str:
        """The prefix as a dotted netmask (``255.255.255.0``), as iPXE's ``netmask`` setting takes it."""
        return str(ipaddress.IPv4Network(f"0.0.0.0/{self.prefix}").netmask)

    def describe(self) -> str:
        """One phrase for a person: ``static 10.0.2.15/24 via 10.0.2.2 on nic0 (52:54:00:...)``."""
        nic = f"{self.interface} ({self.mac})" if self.interface and self.mac else self.mac or self.interface or "net0"
        if self.dhcp:
            return f"no static network: the image asks DHCP for an address on {nic}"
        via = f" via {self.gateway}" if self.gateway else ""
        return f"static {self.address}/{self.prefix}{via} on {nic}"


def _ethernets_with_mac(state: NetworkState) -> list[Interface]:
    return [i for i in state.interfaces if i.type == "ethernet" and i.mac_address]


def boot_interface(state: NetworkState, macs: Iterable[str]) -> tuple[Interface, Interface, str | None]:
    """The boot interface of a checked NMState document for a node with MACs ``macs``.

    Returns ``(nic, carrier, mac)``: the ethernet interface the image finds by its MAC, the interface
    whose addresses it sets (the NIC itself, or the bond it is a port of), and the MAC (the NIC's
    ``mac-address``, else the node's first MAC, else ``None``). The rule: the ethernet interface whose
    ``mac-address`` is one of the node's; else, when no interface names one of the node's MACs, the only
    interface that has addresses (a bond: its first port).

    Raises :class:`~bootserver.nmstate.NetworkConfigError` (path relative to ``network``) when the
    boot interface cannot be told: interfaces pinned to MACs none of which is the node's, or several
    interfaces with addresses and none with the node's MAC.
    """
    macs = tuple(macs)
    pinned = _ethernets_with_mac(state)
    ports = {p: i for i in state.interfaces if i.link_aggregation for p in i.link_aggregation.port}
    by_name = {i.name: i for i in state.interfaces}
    nic = next((i for i in pinned if i.mac_address in macs), None)
    if nic is None and macs and pinned:
        named = ", ".join(f"{i.name} {i.mac_address}" for i in pinned)
        raise NetworkConfigError("interfaces", f"no interface has the node's MAC ({', '.join(macs)}); "
                                 f"mac-address names {named}: set mac-address on the boot interface")
    if nic is None:
        addressed = [i for i in state.interfaces if i.ipv4.on or i.ipv6.on]
        if len(addressed) != 1:
            raise NetworkConfigError("interfaces", f"{len(addressed)} interfaces have addresses and none has the "
                                     "node's MAC: set mac-address (one of the node's mac) on the boot interface")
        carrier = addressed[0]
        if carrier.type == "bond" and carrier.link_aggregation is not None:
            nic = by_name[carrier.link_aggregation.port[0]]
        elif carrier.type == "vlan" and carrier.vlan is not None:
            nic = by_name[carrier.vlan.base_iface]
            if nic.link_aggregation is not None:
                nic = by_name[nic.link_aggregation.port[0]]
        else:
            nic = carrier
    carrier = ports.get(nic.name, nic)
    return nic, carrier, nic.mac_address or (macs[0] if macs else None)


def boot_network(config_file: str, resolved: ResolvedNode, device: Mapping[str, Any] | None = None) -> BootNetwork:
    """How the image of a node (as resolved; of config file ``config_file``) brings up its boot interface:
    from its ``network`` (``device``, its device record in the state store, for ``network: provider``), see
    :func:`boot_interface`. A node with ``network: dhcp`` (the default), or whose boot interface has
    ``dhcp: true``, gets DHCP on its first MAC.

    Raises :class:`~bootserver.errors.ConfigError` naming the config file, node and key when the boot
    interface cannot be told (``nodes.<n>.network.interfaces: no interface has the node's MAC ...``), and
    :class:`IsoError` naming the node when the image cannot set what the interface needs: addresses only
    on a VLAN (the image does not tag), or only IPv6 (neither loader sets a static IPv6 address).
    Raises :class:`~bootserver.errors.DeviceRecordError` as :func:`~bootserver.network.node_network`.
    """
    node, macs, where = resolved.name, resolved.mac, resolved.network_key
    state = node_network(resolved, device)
    if state is None or not state.interfaces:
        return BootNetwork("", macs[0] if macs else None)
    try:
        plan = check_network(state)
        _nic, carrier, mac = boot_interface(state, macs)
    except NetworkConfigError as e:
        raise ConfigError(config_file, f"{where}.{e.path}", e.message) from None
    if not (carrier.ipv4.on or carrier.ipv6.on):
        vlans = [i.name for i in state.interfaces if i.vlan is not None and i.vlan.base_iface == carrier.name]
        if vlans:
            raise IsoError(f"node {node}: {where}: its addresses are on VLAN {vlans[0]} over {carrier.name}; "
                           "the boot image does not tag VLANs (use an untagged boot interface)")
        raise IsoError(f"node {node}: {where}: the boot interface {carrier.name} has no address")
    if carrier.ipv4.dhcp or (not carrier.ipv4.address and carrier.ipv6.dhcp):
        return BootNetwork(carrier.name, mac)
    if not carrier.ipv4.address:
        raise IsoError(f"node {node}: {where}: the boot interface {carrier.name} has only IPv6 addresses; the "
                       "boot image sets a static IPv4 address only (add one, or boot it over PXE)")
    gw_index, gateway = plan.gateways.get((carrier.name, 4), (0, None))
    address = carrier.ipv4.address[gw_index if gw_index >= 0 else 0]
    dns = tuple(s for s in state.dns_resolver.config.server if ipaddress.ip_address(s).version == 4)
    return BootNetwork(carrier.name, mac, address.ip, address.prefix_length, gateway, dns)


def check_boot_networks(config: Config) -> None:
    """``check-config``'s look at every node's boot image: the boot interface of each node with an
    NMState ``network`` can be told (:func:`boot_network`). Raises
    :class:`~bootserver.errors.ConfigError` naming the config file, node and key. What only the image
    cannot do (IPv6 only, a VLAN; :class:`IsoError`; a base URL GRUB cannot fetch, https or IPv6) fails
    only for the nodes that ``provision`` boots from their image (:attr:`ResolvedNode.boots_image
    <bootserver.config.ResolvedNode.boots_image>`), and for every node in ``bootserver iso``.
    ``secure_boot`` nodes are left out: their image sets no network."""
    for resolved in inventory(config).values():
        if resolved.secure_boot:
            continue  # its image is the vendor's GRUB and kernel with kargs, nothing of the netboot image
        node, network = resolved.name, resolved.network
        if resolved.boots_image and network != "provider":
            boot_network(config.source, resolved)
            facility = resolved.facility
            bases = [("server.base_url", config.server.effective_base_url)]
            if facility is not None and (facility_base := config.facilities[facility].base_url_for(None)):
                bases.append((f"facilities.{facility}.base_url", facility_base))
            for key, base in bases:
                try:
                    grub_path(f"{base}/")
                except GrubUnsupported:
                    raise ConfigError(config.source, key, f"node {node} boots its image (redfish.boot_source: "
                                      f"virtual-media), whose GRUB fetches plain http only, not {base}") from None
        elif isinstance(network, NetworkState):
            with contextlib.suppress(IsoError):
                boot_network(config.source, resolved)
