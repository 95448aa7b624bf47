"""The NMState subset a boot network needs, its checks and the dracut kernel arguments it becomes.

A node's or profile's ``network`` (:mod:`bootserver.network`) is ``dhcp``, ``provider`` or an NMState
document (https://nmstate.io/devel/yaml_api.html, the format of OpenShift's ``hosts[].networkConfig`` in
install-config and agent-config). This module owns the key's type (:data:`NetworkSetting`) and the
document: the models of the subset of keys a boot network needs, which refuse the rest by its key:

* ``interfaces[]``: ``name``, ``type`` (``ethernet``, ``bond``, ``vlan``), ``state: up``,
  ``mac-address``, ``ipv4``/``ipv6`` (``enabled``, ``dhcp``, ``autoconf``, ``address[]`` of ``ip`` and
  ``prefix-length``), ``link-aggregation`` (``mode``, ``port[]``, ``options``), ``vlan`` (``base-iface``,
  ``id``);
* ``routes.config[]``: ``destination``, ``next-hop-address``, ``next-hop-interface``, ``table-id`` (254,
  the main table);
* ``dns-resolver.config.server[]``.

The models check the shape of each value (pydantic, frozen, unknown keys refused); :func:`check_network`
checks what spans keys (names that must exist, gateways inside a subnet, one default route per family)
and names the key at fault. :func:`dracut_kargs` writes the arguments NetworkManager's initrd generator
(``nm-initrd-generator``, run by the live initramfs of RHCOS 4.6+ and Fedora CoreOS) reads, and that
coreos-installer forwards to the installed system's first boot (docs/design.md, domain rule 10):
``rd.neednet=1``, ``ifname=``, ``bond=``, ``vlan=``, ``ip=``, ``rd.route=``, ``nameserver=`` in that
order (dracut.cmdline(7), "Network").

The generator keeps, per interface and family, the gateway of the last ``ip=`` that names one, so only
the address carrying its family's default route names a gateway; every other route is an ``rd.route=``.
Pure functions of the document: no config, no provider, no device record.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, field_validator

from .ipxe import check_script_word
from .values import unicast_mac

#: A Linux interface name (at most IFNAMSIZ - 1 = 15 bytes) that also fits the ``:``/``,``-separated
#: dracut arguments: letters, digits, ``_``, ``-`` and ``.``, not starting with ``.`` or ``-``.
_IFNAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$")
#: The kernel's own names, which ``ifname=`` must not use (dracut.cmdline(7): they race the kernel).
_KERNEL_NAME_RE = re.compile(r"^eth[0-9]+$")
_OPTION_KEY_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_OPTION_VALUE_RE = re.compile(r"^[A-Za-z0-9_.+/-]+$")


class NetworkConfigError(ValueError):
    """A network document is wrong at ``path`` (relative to its ``network`` key, e.g.
    ``interfaces[2].link-aggregation.port[1]``); ``message`` says what is wrong."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)


# ------------------------------------------------------------------------------------------ models


class _Model(BaseModel):
    # The settings base of bootserver.config, restated: bootserver.config imports this module (through
    # bootserver.network) for the ``network`` field, so this module cannot import it back.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _list_to_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _ip(value: str) -> str:
    if "/" in value:
        raise ValueError(f"{value!r}: write the address without '/'; the prefix goes in prefix-length")
    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        raise ValueError(f"not an IP address: {value!r}") from None


def _mac(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        raise ValueError("put MAC addresses in quotes: YAML reads an unquoted 52:54:00:12:34:56 as a number")
    return unicast_mac(value) if isinstance(value, str) else value


_Tuple = BeforeValidator(_list_to_tuple)


class Address(_Model):
    """``ipv4.address[]`` / ``ipv6.address[]``: one static address, ``ip`` and ``prefix-length`` (bits)."""

    ip: str
    prefix_length: int = Field(alias="prefix-length", ge=0, le=128)

    @field_validator("ip")
    @classmethod
    def _address(cls, value: str) -> str:
        return _ip(value)

    @property
    def interface(self) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
        """The address with its subnet."""
        return ipaddress.ip_interface(f"{self.ip}/{self.prefix_length}")


class IPSettings(_Model):
    """``ipv4`` / ``ipv6`` of an interface: ``enabled``, ``dhcp``, ``autoconf`` (IPv6 router
    advertisements) and static ``address[]``."""

    enabled: bool | None = None
    dhcp: bool = False
    autoconf: bool = False
    address: Annotated[tuple[Address, ...], _Tuple] = ()

    @property
    def on(self) -> bool:
        """Whether the family is configured at all (``enabled`` defaults to "has dhcp or an address")."""
        return self.enabled if self.enabled is not None else bool(self.dhcp or self.autoconf or self.address)


class LinkAggregation(_Model):
    """``link-aggregation`` of a bond: ``mode``, ``port[]`` (interface names), ``options`` (bonding
    driver options, e.g. ``miimon: 100``)."""

    #: the bond modes of the Linux bonding driver (NMState ``link-aggregation.mode``)
    mode: Literal["balance-rr", "active-backup", "balance-xor", "broadcast", "802.3ad", "balance-tlb",
                  "balance-alb"]
    port: Annotated[tuple[str, ...], _Tuple] = ()
    options: dict[str, str | int] = Field(default_factory=dict)

    @field_validator("options")
    @classmethod
    def _options(cls, value: dict[str, str | int]) -> dict[str, str | int]:
        for key, v in value.items():
            if not _OPTION_KEY_RE.match(key):
                raise ValueError(f"{key!r} is not a bonding option name")
            if key == "mode":
                raise ValueError("mode goes in link-aggregation.mode, not in options")
            if not _OPTION_VALUE_RE.match(str(v)):
                raise ValueError(f"{key}: {v!r} cannot be written in the bond= kernel argument "
                                 "(letters, digits and _ . + / - only)")
        return value


class Vlan(_Model):
    """``vlan`` of a VLAN interface: ``base-iface`` (the parent interface) and ``id`` (1-4094)."""

    base_iface: str = Field(alias="base-iface")
    id: int = Field(ge=1, le=4094)


class Interface(_Model):
    """``interfaces[]``: one interface of type ``ethernet``, ``bond`` or ``vlan``, always ``state: up``."""

    name: str
    type: Literal["ethernet", "bond", "vlan"]
    state: Literal["up"] = "up"
    mac_address: Annotated[str | None, BeforeValidator(_mac)] = Field(default=None, alias="mac-address")
    ipv4: IPSettings = Field(default_factory=IPSettings)
    ipv6: IPSettings = Field(default_factory=IPSettings)
    link_aggregation: LinkAggregation | None = Field(default=None, alias="link-aggregation")
    vlan: Vlan | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _IFNAME_RE.match(value):
            raise ValueError(f"{value!r} is not an interface name (1-15 letters, digits, '_', '.' or '-')")
        return value


class Route(_Model):
    """``routes.config[]``: ``destination`` (CIDR), ``next-hop-address``, ``next-hop-interface``, and
    ``table-id`` only as the main table (``254``, or ``0``: NMState's default), which dracut's routes
    go to anyway (OpenShift's examples write ``table-id: 254``)."""

    destination: str
    next_hop_address: str | None = Field(default=None, alias="next-hop-address")
    next_hop_interface: str | None = Field(default=None, alias="next-hop-interface")
    table_id: Literal[0, 254] | None = Field(default=None, alias="table-id")

    @field_validator("destination")
    @classmethod
    def _destination(cls, value: str) -> str:
        try:
            return str(ipaddress.ip_network(value.strip()))
        except ValueError:
            raise ValueError(f"not a network in CIDR notation (host bits zero), e.g. 10.0.0.0/8: {value!r}") from None

    @field_validator("next_hop_address")
    @classmethod
    def _next_hop(cls, value: str | None) -> str | None:
        return None if value is None else _ip(value)

    @property
    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        """``destination`` as a network."""
        return ipaddress.ip_network(self.destination)


class Routes(_Model):
    """``routes``: only ``config[]``."""

    config: Annotated[tuple[Route, ...], _Tuple] = ()


class DnsConfig(_Model):
    """``dns-resolver.config``: only ``server[]`` (addresses)."""

    server: Annotated[tuple[str, ...], _Tuple] = ()

    @field_validator("server")
    @classmethod
    def _servers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        out = []
        for i, v in enumerate(value):
            try:
                out.append(_ip(v))
            except ValueError as e:
                raise ValueError(f"item {i}: {e}") from None
        return tuple(out)


class DnsResolver(_Model):
    """``dns-resolver``: only ``config``."""

    config: DnsConfig = Field(default_factory=DnsConfig)


class NetworkState(_Model):
    """An NMState document, the subset of keys described in the module docstring."""

    interfaces: Annotated[tuple[Interface, ...], _Tuple] = ()
    routes: Routes = Field(default_factory=Routes)
    dns_resolver: DnsResolver = Field(default_factory=DnsResolver, alias="dns-resolver")


# ------------------------------------------------------------------------------------------ the key


#: The ``network`` modes that are not an NMState document.
MODES = ("dhcp", "provider")

def _mode(value: str) -> str:
    if value not in MODES:
        raise ValueError(f"must be dhcp, provider or an NMState mapping (interfaces, routes, dns-resolver), "
                         f"got {value!r}")
    return value


#: The type of the ``network`` key: ``"dhcp"``, ``"provider"`` or a :class:`NetworkState`. The union
#: tags are written ``<...>``, which config error messages leave out of key paths.
NetworkSetting = Annotated[
    Annotated[Annotated[str, BeforeValidator(lambda v: _mode(v) if isinstance(v, str) else v)], Tag("<mode>")]
    | Annotated[NetworkState, Tag("<NMState>")],
    Discriminator(lambda v: "<mode>" if isinstance(v, str) else "<NMState>"),
]


# ------------------------------------------------------------------------------------------ checks


@dataclass(frozen=True)
class _Plan:
    """What :func:`check_network` resolved: per (interface, family) the address index that carries
    the default route's gateway, and the other routes with their interface."""

    gateways: dict[tuple[str, int], tuple[int, str]]
    routes: tuple[tuple[Route, str], ...]


def _section(iface: Interface, family: int) -> IPSettings:
    return iface.ipv4 if family == 4 else iface.ipv6


def _check_ip(iface: Interface, i: int, family: int) -> None:
    key = f"ipv{family}"
    where = f"interfaces[{i}].{key}"
    ip = _section(iface, family)
    for j, a in enumerate(ip.address):
        addr = ipaddress.ip_address(a.ip)
        if addr.version != family:
            raise NetworkConfigError(f"{where}.address[{j}].ip", f"{a.ip} is not an IPv{family} address")
        if a.prefix_length > addr.max_prefixlen:
            raise NetworkConfigError(f"{where}.address[{j}].prefix-length",
                                     f"{a.prefix_length} is longer than {addr.max_prefixlen} bits")
    if ip.enabled is False and (ip.dhcp or ip.autoconf or ip.address):
        raise NetworkConfigError(f"{where}.enabled", "is false, but dhcp, autoconf or an address is set")
    if ip.enabled and not (ip.dhcp or ip.autoconf or ip.address):
        raise NetworkConfigError(f"{where}", "enabled without dhcp or an address: set dhcp: true or list "
                                 "an address, or set enabled: false")
    if (ip.dhcp or ip.autoconf) and ip.address:
        raise NetworkConfigError(f"{where}.address", "static addresses together with dhcp or autoconf "
                                 "cannot be written as kernel arguments; use one or the other")
    if family == 4 and ip.autoconf:
        raise NetworkConfigError(f"{where}.autoconf", "IPv4 has no autoconf; use dhcp")
    if family == 6 and ip.autoconf and not ip.dhcp:
        raise NetworkConfigError(f"{where}.autoconf", "autoconf without dhcp is not supported (as in NMState)")


def check_network(state: NetworkState) -> _Plan:
    """Check what spans keys in an NMState document; return the resolved plan.

    Raises :class:`NetworkConfigError` naming the key at fault: interface names unique and not the
    kernel's own (``eth0``) when pinned to a MAC, MACs unique, bond ports and VLAN bases that are
    interfaces, a VLAN name the id can be read from (``bond0.100`` or ``vlan100``: ``vlan=`` carries no
    id), addresses of the right family, next hops inside the subnet of one of the interface's
    addresses, at most one default route per family, DNS servers.
    """
    names: dict[str, Interface] = {}
    macs: dict[str, str] = {}
    port_of: dict[str, str] = {}
    for i, iface in enumerate(state.interfaces):
        if iface.name in names:
            raise NetworkConfigError(f"interfaces[{i}].name", f"{iface.name} is listed twice")
        names[iface.name] = iface
        if iface.mac_address is not None:
            if iface.type != "ethernet":
                raise NetworkConfigError(f"interfaces[{i}].mac-address",
                                         f"only an ethernet interface is found by its MAC, not a {iface.type}")
            if _KERNEL_NAME_RE.match(iface.name):
                raise NetworkConfigError(f"interfaces[{i}].name", f"{iface.name} is a name the kernel gives "
                                         "itself; an interface found by its MAC needs another name (e.g. nic0), "
                                         "or the renaming races the kernel (dracut.cmdline(7), ifname=)")
            if iface.mac_address in macs:
                raise NetworkConfigError(f"interfaces[{i}].mac-address",
                                         f"{iface.mac_address} is already the MAC of {macs[iface.mac_address]}")
            macs[iface.mac_address] = iface.name
        if iface.type != "bond" and iface.link_aggregation is not None:
            raise NetworkConfigError(f"interfaces[{i}].link-aggregation", "only a bond has link-aggregation")
        if iface.type != "vlan" and iface.vlan is not None:
            raise NetworkConfigError(f"interfaces[{i}].vlan", "only a vlan interface has vlan")
        if iface.type == "bond" and iface.link_aggregation is None:
            raise NetworkConfigError(f"interfaces[{i}].link-aggregation", "a bond needs link-aggregation")
        if iface.type == "vlan" and iface.vlan is None:
            raise NetworkConfigError(f"interfaces[{i}].vlan", "a vlan interface needs vlan (base-iface, id)")
        for family in (4, 6):
            _check_ip(iface, i, family)
    for i, iface in enumerate(state.interfaces):
        if iface.link_aggregation is not None:
            if not iface.link_aggregation.port:
                raise NetworkConfigError(f"interfaces[{i}].link-aggregation.port", "a bond needs at least one port")
            for j, port in enumerate(iface.link_aggregation.port):
                where = f"interfaces[{i}].link-aggregation.port[{j}]"
                if port not in names:
                    raise NetworkConfigError(where, f"no interface named {port}")
                if names[port].type != "ethernet":
                    raise NetworkConfigError(where, f"{port} is a {names[port].type}; bond ports are ethernet")
                if port in port_of:
                    raise NetworkConfigError(where, f"{port} is already a port of {port_of[port]}")
                port_of[port] = iface.name
        if iface.vlan is not None:
            base = iface.vlan.base_iface
            if base not in names:
                raise NetworkConfigError(f"interfaces[{i}].vlan.base-iface", f"no interface named {base}")
            if base in port_of:
                raise NetworkConfigError(f"interfaces[{i}].vlan.base-iface",
                                         f"{base} is a port of {port_of[base]}; put the VLAN on the bond")
            if names[base].type == "vlan":
                raise NetworkConfigError(f"interfaces[{i}].vlan.base-iface", f"{base} is itself a VLAN")
            if _vlan_id_of_name(iface.name) != iface.vlan.id:
                raise NetworkConfigError(f"interfaces[{i}].name", f"the kernel argument vlan= reads the VLAN id "
                                         f"from the name: call it {base}.{iface.vlan.id} or vlan{iface.vlan.id}")
    for i, iface in enumerate(state.interfaces):
        if iface.name in port_of and (iface.ipv4.on or iface.ipv6.on):
            family = 4 if iface.ipv4.on else 6
            raise NetworkConfigError(f"interfaces[{i}].ipv{family}",
                                     f"{iface.name} is a port of {port_of[iface.name]}; a bond port has no addresses")

    gateways: dict[tuple[str, int], tuple[int, str]] = {}
    defaults: dict[int, int] = {}
    routes: list[tuple[Route, str]] = []
    for k, route in enumerate(state.routes.config):
        where = f"routes.config[{k}]"
        net = route.network
        if route.next_hop_address is None:
            raise NetworkConfigError(f"{where}.next-hop-address", "required key is missing")
        hop = ipaddress.ip_address(route.next_hop_address)
        if hop.version != net.version:
            raise NetworkConfigError(f"{where}.next-hop-address",
                                     f"{hop} is IPv{hop.version}, the destination IPv{net.version}")
        if route.next_hop_interface is not None and route.next_hop_interface not in names:
            raise NetworkConfigError(f"{where}.next-hop-interface", f"no interface named {route.next_hop_interface}")
        candidates = [names[route.next_hop_interface]] if route.next_hop_interface else list(state.interfaces)
        found = None
        for iface in candidates:
            for j, a in enumerate(_section(iface, net.version).address):
                if hop in a.interface.network:
                    found = (iface.name, j)
                    break
            if found:
                break
        is_default = net.prefixlen == 0
        if found is None:
            dynamic = [c for c in candidates if _section(c, net.version).dhcp]
            if route.next_hop_interface and dynamic and not is_default:
                found = (route.next_hop_interface, -1)  # a DHCP subnet: unknown here, trusted
            else:
                who = f"address of {route.next_hop_interface}" if route.next_hop_interface else "address"
                raise NetworkConfigError(f"{where}.next-hop-address",
                                         f"gateway {hop} is outside the subnet of every static IPv{net.version} {who}")
        if is_default:
            if net.version in defaults:
                raise NetworkConfigError(f"{where}.destination", f"a second IPv{net.version} default route "
                                         f"(routes.config[{defaults[net.version]}] is one)")
            defaults[net.version] = k
            gateways[(found[0], net.version)] = (found[1], str(hop))
        else:
            routes.append((route, found[0]))
    for i, server in enumerate(state.dns_resolver.config.server):
        if not any(_section(f, ipaddress.ip_address(server).version).on for f in state.interfaces):
            raise NetworkConfigError(f"dns-resolver.config.server[{i}]",
                                     f"{server}: no interface has IPv{ipaddress.ip_address(server).version}")
    return _Plan(gateways, tuple(routes))


def _vlan_id_of_name(name: str) -> int | None:
    """The VLAN id NetworkManager's initrd generator reads from a VLAN interface name: the digits after
    the last ``.`` (``bond0.100``) or after a leading ``vlan`` (``vlan100``)."""
    m = re.match(r"^.+\.0*([0-9]+)$", name) or re.match(r"^vlan0*([0-9]+)$", name)
    return int(m.group(1)) if m else None


# --------------------------------------------------------------------------------------- arguments


def _bracket(value: str) -> str:
    return f"[{value}]" if ":" in value else value


def dracut_kargs(state: NetworkState, hostname: str) -> tuple[str, ...]:
    """The dracut network kernel arguments of a checked NMState document, in a stable order.

    ``rd.neednet=1``; ``ifname=<name>:<mac>`` per interface with a ``mac-address``; ``bond=<name>:<ports>:
    mode=<mode>[,<option>=<value>...]``; ``vlan=<name>:<base>``; per interface, first one ``ip=`` per
    static address (``ip=<ip>::<gateway>:<prefix>:<hostname>:<name>:none``, IPv6 in brackets; the gateway
    only on the address of its family's default route, the hostname on the interface's first ``ip=``),
    then one ``ip=`` for DHCP (``dhcp``, ``dhcp6``, ``auto6``; both families in one argument, as the
    generator resets the other family on a second dynamic ``ip=``); ``rd.route=<net>:<next hop>:<name>``;
    ``nameserver=<ip>``. An empty document gives ``()`` (DHCP, as without ``network``).

    Raises :class:`NetworkConfigError` as :func:`check_network` and ``UnsafeValueError`` for a word
    iPXE would not read literally (which the checks above leave no room for).
    """
    if not state.interfaces:
        return ()
    plan = check_network(state)
    args = ["rd.neednet=1"]
    args += [f"ifname={i.name}:{i.mac_address}" for i in state.interfaces if i.mac_address]
    for i in state.interfaces:
        if i.link_aggregation is not None:
            la = i.link_aggregation
            options = ",".join([f"mode={la.mode}"] + [f"{k}={v}" for k, v in la.options.items()])
            args.append(f"bond={i.name}:{','.join(la.port)}:{options}")
    args += [f"vlan={i.name}:{i.vlan.base_iface}" for i in state.interfaces if i.vlan is not None]
    for i in state.interfaces:
        first = True
        for family in (4, 6):
            gw_index, gw = plan.gateways.get((i.name, family), (None, ""))
            for j, a in enumerate(_section(i, family).address):
                gateway = _bracket(gw) if j == gw_index else ""
                args.append(
                    f"ip={_bracket(a.ip)}::{gateway}:{a.prefix_length}:{hostname if first else ''}:{i.name}:none"
                )
                first = False
        methods = []
        if i.ipv4.dhcp:
            methods.append("dhcp")
        if i.ipv6.dhcp:
            methods.append("auto6" if i.ipv6.autoconf else "dhcp6")
        if methods:
            args.append(f"ip=::::{hostname}:{i.name}:{','.join(methods)}" if first else
                        f"ip={i.name}:{','.join(methods)}")
    for route, name in plan.routes:
        net = route.network
        dest = f"[{net}]" if net.version == 6 else str(net)
        args.append(f"rd.route={dest}:{_bracket(route.next_hop_address or '')}:{name}")
    args += [f"nameserver={_bracket(s)}" for s in state.dns_resolver.config.server]
    for word in args:
        check_script_word(word)
    return tuple(args)

