"""Reservations from the inventory, and the checks of the ``dhcp:`` mapping that span keys.

Every node with a MAC gets a reservation for its boot MAC (the NIC its ``network``'s boot interface
is, :func:`bootserver.images.network.boot_interface`; else its first ``mac``): in ``full`` mode with the
static IPv4 address of that interface (and its static IPv6 address with ``dhcp.ipv6``), its hostname,
and its own gateway and name servers, as its ``network`` says ("DHCP, but every address reserved").
A node whose network is ``dhcp`` or ``provider`` gets a reservation without an address: it is known
(``server.discovery: false`` answers known machines only) and takes a pool address in ``full`` mode.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..config import Config, ResolvedNode
from ..errors import ConfigError
from ..images.network import boot_interface
from ..inventory import inventory
from ..nmstate import NetworkConfigError, NetworkState, check_network
from .iface import InterfaceAddresses, NoInterface, interface_addresses


@dataclass(frozen=True)
class Reservation:
    """Node ``node``'s reservation: its boot ``mac`` (lower case, ``:``), ``hostname`` (its first
    label: DHCP's host name option), and from its ``network`` (``None``/``()`` where it has none):
    ``ipv4`` (with its prefix), ``gateway``, ``dns`` (IPv4 name servers), ``ipv6`` (with its prefix);
    ``key``: the config key of its network (``nodes.<n>.network`` or its profile's), for error messages."""

    node: str
    mac: str
    hostname: str
    key: str
    ipv4: ipaddress.IPv4Interface | None = None
    gateway: str | None = None
    dns: tuple[str, ...] = ()
    ipv6: ipaddress.IPv6Interface | None = None


def reservation(node: ResolvedNode, source: str) -> Reservation | None:
    """The reservation of ``node`` (as resolved, of the config file ``source``), or ``None`` when it has
    no MAC. Raises :class:`~bootserver.errors.ConfigError` naming the node's ``network`` key when its boot
    interface cannot be told."""
    if not node.mac:
        return None
    name, key, hostname, network = node.name, node.network_key, node.hostname.split(".")[0], node.network
    if not isinstance(network, NetworkState) or not network.interfaces:
        return Reservation(name, node.mac[0], hostname, key)
    try:
        plan = check_network(network)
        _nic, carrier, mac = boot_interface(network, node.mac)
    except NetworkConfigError as e:
        raise ConfigError(source, f"{key}.{e.path}", e.message) from None
    ipv4 = ipv6 = None
    gateway = None
    if carrier.ipv4.address and not carrier.ipv4.dhcp:
        index, gateway = plan.gateways.get((carrier.name, 4), (0, None))
        chosen = carrier.ipv4.address[index if index >= 0 else 0]
        ipv4 = ipaddress.IPv4Interface(f"{chosen.ip}/{chosen.prefix_length}")
    if carrier.ipv6.address and not carrier.ipv6.dhcp:
        first = carrier.ipv6.address[0]
        ipv6 = ipaddress.IPv6Interface(f"{first.ip}/{first.prefix_length}")
    dns = tuple(s for s in network.dns_resolver.config.server if ipaddress.ip_address(s).version == 4)
    return Reservation(name, mac or node.mac[0], hostname, key, ipv4, gateway, dns, ipv6)


def reservations(config: Config) -> tuple[Reservation, ...]:
    """Every node's :func:`reservation`, in the config's node order (nodes without a MAC left out)."""
    return tuple(r for node in inventory(config).values() if (r := reservation(node, config.source)) is not None)


def subnet_of(config: Config, found: InterfaceAddresses | None, taken: tuple[Reservation, ...]) -> \
        ipaddress.IPv4Network | None:
    """The IPv4 subnet addresses are handed out of: ``dhcp.interface``'s (``found``), else, where the
    interface is not on this machine (``--print`` for another one), the one subnet every reservation's
    address lies in; ``None`` when neither tells."""
    if found is not None and found.ipv4 is not None:
        return found.ipv4.network
    nets = {r.ipv4.network for r in taken if r.ipv4 is not None}
    return nets.pop() if len(nets) == 1 else None


def subnet6_of(config: Config, found: InterfaceAddresses | None, taken: tuple[Reservation, ...]) -> \
        ipaddress.IPv6Network | None:
    """The IPv6 prefix DHCPv6 hands addresses out of (``dhcp.ipv6``): of ``dhcp.interface``'s global
    prefixes (``found``, loopback left out), the first that holds ``dhcp.range6`` and every reservation's
    IPv6 address (else its first); where the interface is not on this machine or has no global IPv6
    address, the one prefix of the reservations' IPv6 addresses (or the ``/64`` of ``dhcp.range6`` when
    none has one). ``None`` when neither tells."""
    dhcp = config.dhcp
    assert dhcp is not None
    pool = [ipaddress.IPv6Address(a) for a in dhcp.range6] if dhcp.range6 is not None else []
    wanted = [*pool, *(r.ipv6.ip for r in taken if r.ipv6 is not None)]
    nets = list(dict.fromkeys(a.network for a in found.ipv6 if not a.ip.is_loopback)) if found is not None else []
    if nets:
        return next((net for net in nets if all(a in net for a in wanted)), nets[0])
    prefixes = {r.ipv6.network for r in taken if r.ipv6 is not None}
    if not prefixes and pool:
        prefixes = {ipaddress.IPv6Network(f"{pool[0]}/64", strict=False)}
    return prefixes.pop() if len(prefixes) == 1 else None


def check_subnet6(config: Config, prefix: ipaddress.IPv6Network, taken: tuple[Reservation, ...]) -> None:
    """Raise :class:`~bootserver.errors.ConfigError` naming the key when a reservation's IPv6 address
    (``nodes.<n>.network``) or ``dhcp.range6`` lies outside ``prefix`` (:func:`subnet6_of`): a DHCPv6 server
    answering on that prefix cannot hand it out there."""
    dhcp = config.dhcp
    assert dhcp is not None
    for r in taken:
        if r.ipv6 is not None and r.ipv6.ip not in prefix:
            raise ConfigError(config.source, r.key, f"node {r.node}'s IPv6 address {r.ipv6.ip} is "
                              f"outside {dhcp.interface}'s IPv6 prefix {prefix}: DHCPv6 cannot hand it out there")
    if dhcp.range6 is not None and not all(ipaddress.IPv6Address(a) in prefix for a in dhcp.range6):
        raise ConfigError(config.source, "dhcp.range6", f"{dhcp.range6[0]}-{dhcp.range6[1]} is not inside "
                          f"{dhcp.interface}'s IPv6 prefix {prefix}")


def check_dhcp(config: Config, *, local: bool = True) -> tuple[Reservation, ...]:
    """``check-config``'s look at ``dhcp:`` (nothing when it is absent); returns the reservations.

    Refused, each with one :class:`~bootserver.errors.ConfigError` naming the key: a ``server.base_url``
    on loopback (``localhost``, ``127.0.0.0/8``: the chain URL machines get must reach us), two nodes with one
    address (``nodes.<n>.network``, naming the other node), two nodes with one MAC; and, against the
    interface's subnet (``local``: the interface must be on this machine; else a reservation's subnet
    stands in for it, :func:`subnet_of`): ``dhcp.interface`` missing (``local``) or without an IPv4
    address in ``full`` mode, a reservation outside the subnet, ``dhcp.range`` outside the subnet or
    overlapping a reservation, ``dhcp.router`` outside the subnet.
    """
    dhcp = config.dhcp
    if dhcp is None:
        return ()
    host = urlsplit(config.server.effective_base_url).hostname or ""
    if host == "localhost" or (host.replace(".", "").isdigit() and ipaddress.ip_address(host).is_loopback):
        raise ConfigError(config.source, "server.base_url", f"{config.server.effective_base_url} is this machine's "
                          f"loopback: machines on {dhcp.interface} would be handed a chain URL they cannot reach "
                          "(set server.base_url to the address they reach bootserver at)")
    taken = reservations(config)
    by_address: dict[ipaddress.IPv4Address | ipaddress.IPv6Address, str] = {}
    by_mac: dict[str, str] = {}
    for r in taken:
        if r.mac in by_mac:
            raise ConfigError(config.source, f"nodes.{r.node}.mac", f"{r.mac} is also node {by_mac[r.mac]}'s boot "
                              "MAC: one machine cannot have two reservations")
        by_mac[r.mac] = r.node
        for address in (r.ipv4, r.ipv6):
            if address is None:
                continue
            if address.ip in by_address:
                raise ConfigError(config.source, r.key, f"address {address.ip} is also node "
                                  f"{by_address[address.ip]}'s: two reservations cannot share an address")
            by_address[address.ip] = r.node
    found = None
    try:
        found = interface_addresses(dhcp.interface)
    except NoInterface:
        if local:
            raise ConfigError(config.source, "dhcp.interface",
                              f"no interface {dhcp.interface} on this machine") from None
    if not dhcp.full:
        return taken
    if local and (found is None or found.ipv4 is None):
        raise ConfigError(config.source, "dhcp.interface", f"mode: full needs an IPv4 address on {dhcp.interface} "
                          "(the subnet addresses are handed out of), and it has none")
    subnet = subnet_of(config, found, taken)
    if subnet is None:
        raise ConfigError(config.source, "dhcp.interface", f"{dhcp.interface} is not on this machine and the "
                          "reservations do not tell one subnet to hand addresses out of")
    for r in taken:
        if r.ipv4 is not None and r.ipv4.ip not in subnet:
            raise ConfigError(config.source, r.key, f"node {r.node}'s address {r.ipv4.ip} is "
                              f"outside {dhcp.interface}'s subnet {subnet}: DHCP cannot hand it out there")
    if dhcp.range is not None:
        start, end = (ipaddress.IPv4Address(a) for a in dhcp.range)
        if start not in subnet or end not in subnet:
            raise ConfigError(config.source, "dhcp.range", f"{start}-{end} is not inside {dhcp.interface}'s "
                              f"subnet {subnet}")
        for r in taken:
            if r.ipv4 is not None and start <= r.ipv4.ip <= end:
                raise ConfigError(config.source, "dhcp.range", f"{start}-{end} holds node {r.node}'s reserved "
                                  f"address {r.ipv4.ip}: keep the pool apart from the reservations")
    if dhcp.range6 is not None:
        start6, end6 = (ipaddress.IPv6Address(a) for a in dhcp.range6)
        for r in taken:
            if r.ipv6 is not None and start6 <= r.ipv6.ip <= end6:
                raise ConfigError(config.source, "dhcp.range6", f"{start6}-{end6} holds node {r.node}'s reserved "
                                  f"address {r.ipv6.ip}: keep the pool apart from the reservations")
    if dhcp.router is not None and ipaddress.IPv4Address(dhcp.router) not in subnet:
        raise ConfigError(config.source, "dhcp.router", f"{dhcp.router} is outside {dhcp.interface}'s subnet {subnet}")
    return taken


def unselectable(config: Config, taken: tuple[Reservation, ...]) -> tuple[str, ...]:
    """One warning line per reserved node the generic entry ``/boot.ipxe?mac=`` (every DHCP-booted
    machine's URL, :func:`bootserver.dhcp.rules.chain_url`) will never hand its own script: no ``addresses``
    and ``selectable`` false (:meth:`bootserver.inventory.Inventory.select`). Such a machine gets the DHCP
    engine's answer, then boots as a machine no node has (the ``default`` node, or discovery). Each line
    names the node's key and says what to add: ``addresses`` with its reserved address when it has one."""
    lines = []
    nodes = inventory(config)
    for r in taken:
        node = nodes[r.node]
        if node.addresses or node.selectable:
            continue
        fix = (f"addresses: [{r.ipv4.ip}] (its reserved address)" if r.ipv4 is not None else
               "addresses: [the subnet it boots from]") + " or selectable: true"
        origin = node.source.removeprefix("file:")
        lines.append(f"{origin}: nodes.{r.node}: the DHCP engine reserves "
                     f"{r.mac} for it, but /boot.ipxe hands its script to no address (no addresses, not "
                     f"selectable): it would boot as a machine no node has; add {fix}")
    return tuple(lines)


__all__ = ["Reservation", "check_dhcp", "check_subnet6", "reservation", "reservations", "subnet6_of", "subnet_of",
           "unselectable"]
