"""The inventory: every node of one loaded config resolved once (:class:`Inventory`, one per config:
its *generation*), and which of them a request or a command concerns: by name, by selector (MAC,
SMBIOS UUID, hostname) and the asking address (a node's ``addresses``, ``selectable``, the ``default``
node). Every consumer (the service's answers, the page, the DHCP engine's reservations, provisioning,
``sync-images``, the stall watch, ``render``) takes a node from here as one
:class:`~bootserver.config.resolved.ResolvedNode`, never the config and a name.

Pure domain code: no aiohttp web layer.
"""

from __future__ import annotations

import functools
import ipaddress
import weakref
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType

from .config import FILE_SOURCE, Config
from .config.resolved import ResolvedNode, resolve_node, resolve_nodes
from .errors import UnknownNodeError, shown
from .values import normalize_mac

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class Inventory(Mapping[str, ResolvedNode]):
    """Every node of a loaded config resolved once (name -> :class:`ResolvedNode`, in config order),
    with its lookups by selector. Read-only; a config's inventory is :func:`inventory` (made once per
    config). ``source`` is the config's file name, for error messages."""

    def __init__(self, config: Config, nodes: Mapping[str, ResolvedNode] | None = None) -> None:
        """``nodes``: the config's nodes resolved already (:func:`carry_over`), else resolved here."""
        self.source = config.source
        self._nodes = MappingProxyType(dict(nodes) if nodes is not None else resolve_nodes(config))
        self._by_mac = {mac: n.name for n in self._nodes.values() for mac in n.mac}
        self._by_uuid = {n.uuid: n.name for n in self._nodes.values() if n.uuid is not None}
        self._default = next((n for n in self._nodes.values() if n.default), None)
        #: streams whose artifacts only their nodes get (``streams.<name>.private``): handed out by MAC alone
        self._private = frozenset(name for name, stream in config.streams.items() if stream.private)

    def __getitem__(self, name: str) -> ResolvedNode:
        return self._nodes[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    @property
    def default(self) -> ResolvedNode | None:
        """The node with ``default: true`` (at most one; see :meth:`select`), or ``None``."""
        return self._default

    def of_provider(self, provider: str) -> list[ResolvedNode]:
        """The nodes whose provider is ``provider`` (a registry name), in config order."""
        return [n for n in self._nodes.values() if n.provider == provider]

    def by_mac(self, mac: str) -> ResolvedNode | None:
        """The node with this MAC (any case, ``:`` or ``-``), or ``None``."""
        try:
            name = self._by_mac.get(normalize_mac(mac))
        except ValueError:
            return None
        return None if name is None else self._nodes[name]

    def by_uuid(self, uuid: str) -> ResolvedNode | None:
        """The node with this SMBIOS UUID (any case), or ``None``."""
        name = self._by_uuid.get(uuid.strip().lower())
        return None if name is None else self._nodes[name]

    def by_hostname(self, hostname: str) -> ResolvedNode | None:
        """The node whose hostname (its own, else its name) equals ``hostname`` (any case), or ``None``."""
        hostname = hostname.strip().lower()
        return next((n for n in self._nodes.values() if n.hostname.lower() == hostname), None)

    def find(self, *, name: str | None = None, mac: str | None = None, uuid: str | None = None,
             hostname: str | None = None) -> ResolvedNode:
        """The node matching the first selector given (name, mac, uuid, hostname). MACs match in any
        case with ``:`` or ``-``. Raises :class:`UnknownNodeError` with a reason a person can act on."""
        if name is not None:
            node = self._nodes.get(name)
            if node is not None:
                return node
            raise UnknownNodeError(f"no node {name!r} in {self.source}", public=f"no node {name!r}")
        for key, value, finder in (("mac", mac, self.by_mac), ("uuid", uuid, self.by_uuid),
                                   ("hostname", hostname, self.by_hostname)):
            if value:
                found = finder(value)
                if found is None:
                    raise UnknownNodeError(f"no node with {key} {value} in {self.source}")
                return found
        raise UnknownNodeError("no selector given: use ?mac=, ?uuid= or ?hostname=")

    def select(self, addr: Address | None, *, mac: str | None = None, uuid: str | None = None,
               hostname: str | None = None) -> ResolvedNode:
        """The node the generic entry (``/boot.ipxe?mac=|uuid=|hostname=``) may hand out to a client at
        ``addr``: the node matching the first selector given, when ``addr`` is in its ``addresses``, or
        it has none and is ``selectable``; otherwise the ``default`` node (matchbox's default group), when
        there is one and ``addr`` is in its ``addresses`` (if any). A node of a private stream
        (``streams.<name>.private``: an OpenShift agent's initramfs holds the cluster's secrets) is found
        by ``mac`` alone: its hostname or UUID selects nothing (a machine could name them without being it).

        Raises :class:`UnknownNodeError` with the same ``public`` text whether no node matches or a node
        matches but may not be handed out to ``addr`` (docs/design.md, "Identity and trust": the answer
        must not tell which MACs are registered); ``str(err)`` says which, for the server's log.
        """
        given = [(k, v) for k, v in (("mac", mac), ("uuid", uuid), ("hostname", hostname)) if v]
        if given:
            key, value = given[0]
            public = f"no node to boot for {key} {shown(value)} from this address"  # escaped: request text
            try:
                node = self.find(**{key: value})
            except UnknownNodeError as e:
                reason = str(e)
            else:
                if key != "mac" and node.stream in self._private:
                    reason = f"node {node.name} ({key} {value}) boots private stream {node.stream}: by its MAC alone"
                elif address_allowed(node, addr) if node.addresses else node.selectable:
                    return node
                else:
                    reason = f"node {node.name} ({key} {value}) is not selectable from {addr}"
        else:
            public = reason = "no selector given: use ?mac=, ?uuid= or ?hostname="
        fallback = self._default
        if fallback is not None and address_allowed(fallback, addr):
            return fallback
        raise UnknownNodeError(reason, public=public)


#: config id -> its inventory, while the config lives (a config is immutable: its inventory never changes).
_GENERATIONS: dict[int, Inventory] = {}


def inventory(config: Config) -> Inventory:
    """The inventory of loaded ``config`` (:class:`Inventory`): resolved on the first call for this
    config object, the same object on every further call while the config lives."""
    key = id(config)
    found = _GENERATIONS.get(key)
    if found is None:
        found = _GENERATIONS[key] = Inventory(config)
        weakref.finalize(config, _GENERATIONS.pop, key, None)
    return found


def carry_over(config: Config, before: Config, changed: Iterable[str]) -> Inventory:
    """The inventory of ``config`` (:func:`inventory`, kept for it as that one is), made from ``before``'s:
    the nodes not in ``changed`` taken as resolved there, the others resolved now. For a config that
    differs from ``before`` in the nodes ``changed`` only (the same profiles object: a store watch's swap,
    :mod:`bootserver.http.running`), so 10,000 store nodes are not resolved again for one that changed;
    any other config is resolved whole."""
    if config.profiles is not before.profiles or config.source != before.source:
        return inventory(config)
    old, fresh = inventory(before), set(changed)
    sources = config.node_sources
    nodes = {name: old[name] if name in old and name not in fresh else
             resolve_node(name, spec, config.profiles[spec.profile], sources.get(name) or
                          FILE_SOURCE + config.origins.get(f"nodes.{name}", config.source))
             for name, spec in config.nodes.items() if spec.profile in config.profiles}
    found = _GENERATIONS[id(config)] = Inventory(config, nodes)
    weakref.finalize(config, _GENERATIONS.pop, id(config), None)
    return found


@functools.lru_cache(maxsize=4096)
def cidr_network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """``ip_network(cidr)``, parsed once per distinct string (configs hold validated CIDRs)."""
    return ipaddress.ip_network(cidr)


def address_allowed(node: ResolvedNode, addr: Address | None) -> bool:
    """True when ``node`` has no ``addresses`` binding or ``addr`` lies in one of them (an IPv4-mapped
    IPv6 address counts as its IPv4 address; ``None``, an address that cannot be told, never matches)."""
    bound = node.addresses
    if not bound:
        return True
    if addr is None:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:
        addr = addr.ipv4_mapped
    return any(addr in cidr_network(n) for n in bound)


__all__ = ["Address", "Inventory", "ResolvedNode", "address_allowed", "cidr_network", "inventory"]
