"""Which configured node a request or a command concerns: by name, by selector (MAC, SMBIOS UUID,
hostname) and the asking address (a node's ``addresses``, ``selectable``, the ``default`` node).

Pure domain code: no aiohttp web layer.
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass

from .config import Config, Node, Profile
from .config.providers import provider_of
from .errors import UnknownNodeError, shown
from .nmstate import NetworkState


@dataclass(frozen=True, slots=True)
class NodeContext:
    """A configured node resolved once, as a request carries it down (matchbox keeps the profile in
    the request context): its ``name``, its settings (``spec``: ``nodes.<name>``), its profile's name
    and settings, its provider (``None``: none; :func:`~bootserver.config.providers.provider_of`), its
    ``hostname`` (its own, else its name) and its ``network`` (its own, else its profile's, else
    ``"dhcp"``: ``"dhcp"``, ``"provider"`` or an NMState document)."""

    name: str
    spec: Node
    profile_name: str
    profile: Profile
    provider: str | None
    hostname: str
    network: str | NetworkState


def node_context(config: Config, name: str) -> NodeContext:
    """Configured node ``name`` of ``config`` resolved (:class:`NodeContext`). Raises ``KeyError`` for an
    unknown node (use :func:`find_node` first)."""
    spec = config.nodes[name]
    profile = config.profiles[spec.profile]
    network = spec.network if spec.network is not None else profile.network
    return NodeContext(name, spec, spec.profile, profile, provider_of(config, name), config.node_hostname(name),
                       "dhcp" if network is None else network)


def node_contexts(config: Config) -> dict[str, NodeContext]:
    """Every configured node of ``config`` resolved (:class:`NodeContext`); a loaded config never
    changes, so this is built once per service."""
    return {name: node_context(config, name) for name in config.nodes}


def find_node(config: Config, *, name: str | None = None, mac: str | None = None,
              uuid: str | None = None, hostname: str | None = None) -> str:
    """Return the name of the node matching the first selector given (name, mac, uuid, hostname).

    MACs match in any case with ``:`` or ``-``. Raises :class:`UnknownNodeError` with a reason a
    person can act on.
    """
    if name is not None:
        if name in config.nodes:
            return name
        raise UnknownNodeError(f"no node {name!r} in {config.source}", public=f"no node {name!r}")
    for key, value, finder in (("mac", mac, config.node_by_mac), ("uuid", uuid, config.node_by_uuid),
                               ("hostname", hostname, config.node_by_hostname)):
        if value:
            found = finder(value)
            if found is None:
                raise UnknownNodeError(f"no node with {key} {value} in {config.source}")
            return found
    raise UnknownNodeError("no selector given: use ?mac=, ?uuid= or ?hostname=")


Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@functools.lru_cache(maxsize=4096)
def cidr_network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """``ip_network(cidr)``, parsed once per distinct string (configs hold validated CIDRs)."""
    return ipaddress.ip_network(cidr)


def address_allowed(config: Config, node: str, addr: Address | None) -> bool:
    """True when ``node`` has no ``addresses`` binding or ``addr`` lies in one of them (an IPv4-mapped
    IPv6 address counts as its IPv4 address; ``None``, an address that cannot be told, never matches)."""
    bound = config.nodes[node].addresses
    if not bound:
        return True
    if addr is None:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:
        addr = addr.ipv4_mapped
    return any(addr in cidr_network(n) for n in bound)


def select_node(config: Config, addr: Address | None, *, mac: str | None = None, uuid: str | None = None,
                hostname: str | None = None) -> str:
    """The node the generic entry (``/boot.ipxe?mac=|uuid=|hostname=``) may hand out to a client at
    ``addr``: the node matching the first selector given, when ``addr`` is in its ``addresses``, or it
    has none and is ``selectable``; otherwise the ``default`` node (matchbox's default group), when
    there is one and ``addr`` is in its ``addresses`` (if any).

    Raises :class:`UnknownNodeError` with the same ``public`` text whether no node matches or a node
    matches but may not be handed out to ``addr`` (docs/design.md, "Identity and trust": the answer must
    not tell which MACs are registered); ``str(err)`` says which, for the server's log.
    """
    given = [(k, v) for k, v in (("mac", mac), ("uuid", uuid), ("hostname", hostname)) if v]
    if given:
        key, value = given[0]
        public = f"no node to boot for {key} {shown(value)} from this address"  # escaped: request text
        try:
            node = find_node(config, **{key: value})
        except UnknownNodeError as e:
            reason = str(e)
        else:
            n = config.nodes[node]
            if address_allowed(config, node, addr) if n.addresses else n.selectable:
                return node
            reason = f"node {node} ({key} {value}) is not selectable from {addr}"
    else:
        public = reason = "no selector given: use ?mac=, ?uuid= or ?hostname="
    fallback = default_node(config)
    if fallback is not None and address_allowed(config, fallback, addr):
        return fallback
    raise UnknownNodeError(reason, public=public)


def default_node(config: Config) -> str | None:
    """The node with ``default: true`` (at most one; see :func:`select_node`), or ``None``."""
    return next((name for name, n in config.nodes.items() if n.default), None)
