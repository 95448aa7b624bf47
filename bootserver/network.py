"""A node's network: the ``network`` key of nodes and profiles, and the dracut kernel arguments it becomes.

``network`` is ``dhcp`` (the default: no network kargs), ``provider`` (derived from the node's provisioned
device, :func:`bootserver.equinix_network.equinix_network`) or an NMState document
(:mod:`bootserver.nmstate`, which owns its models, its checks and its kargs, and the key's type,
``NetworkSetting``). This module answers for a node of a loaded config: which of the three it has
(:attr:`bootserver.config.ResolvedNode.network`), its NMState document (:func:`node_network`), its kargs
(:func:`node_kargs`), each for the node as resolved once (:class:`~bootserver.config.ResolvedNode`).
The config checks every ``network`` key at load (:func:`bootserver.config.loader.check_network_settings`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from .config import ResolvedNode
from .equinix_network import equinix_network
from .errors import DeviceRecordError
from .nmstate import NetworkConfigError, NetworkState, dracut_kargs
from .values import host_family

# ------------------------------------------------------------------------------------------ a node


def node_network(resolved: ResolvedNode, device: Mapping[str, Any] | None) -> NetworkState | None:
    """The NMState document of a node as resolved, ``None`` for ``dhcp``. For ``provider``, derived
    from ``device``, the node's device record as the state store holds it (:attr:`Current.device
    <bootserver.timeline.Current.device>`; ``None`` without one) by :func:`equinix_network`.

    Raises :class:`DeviceRecordError` (503, exit 1) when a ``provider`` node has no usable device record.
    """
    node, network = resolved.name, resolved.network
    if network == "dhcp":
        return None
    if network == "provider":
        if not isinstance(device, Mapping):
            raise DeviceRecordError(f"node {node}: network: provider needs its provisioned device's record, "
                                    f"and there is none yet; run `bootserver provision {node}` first")
        if device.get("provider", "equinix") != "equinix":
            raise DeviceRecordError(f"node {node}: network: provider reads Equinix Metal device records, "
                                    f"not {device.get('provider')}")
        return equinix_network(device, node)
    assert isinstance(network, NetworkState)
    return network


def node_kargs(resolved: ResolvedNode, device: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The dracut network kernel arguments of a node (``()`` for ``dhcp``), with its hostname; ``device``
    is its device record (``None`` without one), read by ``network: provider`` only.

    Raises :class:`DeviceRecordError` as :func:`node_network`.
    """
    state = node_network(resolved, device)
    if state is None:
        return ()
    try:
        return dracut_kargs(state, resolved.hostname)
    except NetworkConfigError as e:  # a provider record that does not add up
        raise DeviceRecordError(f"node {resolved.name}: the device record does not describe a network: {e}") from None



@functools.lru_cache(maxsize=4096)  # per request: a parse costs 1.8 us, a hit 0.1 (issue 43)
def client_family(client: str | None) -> int | None:
    """The address family (``4``, ``6``) of a request's client address (an IPv4-mapped IPv6 address is
    ``4``); ``None`` when unknown (no address, a Unix socket)."""
    return host_family(client) if client else None


#: What a ``network: dhcp`` node that asked over IPv6 boots with: dracut brings the network up by
#: DHCPv6 (``ip=dhcp6``), so the live system reaches the IPv6 URLs it was handed (rootfs, Ignition).
DHCP6_KARGS = ("rd.neednet=1", "ip=dhcp6")


def family_kargs(kargs: tuple[str, ...], family: int | None) -> tuple[str, ...]:
    """A node's network kargs (:func:`node_kargs`) for a machine asking over address family ``family``:
    :data:`DHCP6_KARGS` for a DHCP node (no kargs) asking over IPv6, else ``kargs`` unchanged (an
    NMState ``network`` says itself how each family comes up: its static IPv6 address, ``dhcp6``)."""
    return DHCP6_KARGS if family == 6 and not kargs else kargs
