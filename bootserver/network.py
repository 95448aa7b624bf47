"""A node's network: the ``network`` key of nodes and profiles, and the dracut kernel arguments it becomes.

``network`` is ``dhcp`` (the default: no network kargs), ``provider`` (derived from the node's provisioned
device, :func:`bootserver.providers.equinix_network.equinix_network`) or an NMState document
(:mod:`bootserver.nmstate`, which owns its models, its checks and its kargs). This module answers for a
node of a loaded config: which of the three it has (:func:`effective_network`), its NMState document
(:func:`node_network`), its kargs (:func:`node_kargs`); and checks every ``network`` key of the config
at load (:func:`check_network_settings`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BeforeValidator, Discriminator, Tag

from .errors import ConfigError
from .ipxe import NETWORK_KARGS
from .nmstate import NetworkConfigError, NetworkState, check_network, dracut_kargs
from .providers.base import DeviceRecordError, provider_of
from .providers.equinix_network import equinix_network

if TYPE_CHECKING:  # a type only: config sits above this module (docs/design.md, Layers)
    from .config import Config

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


# ------------------------------------------------------------------------------------------ a node


def effective_network(config: Config, node: str) -> str | NetworkState:
    """The node's ``network``: its own, else its profile's, else ``"dhcp"``."""
    spec = config.nodes[node]
    if spec.network is not None:
        return spec.network
    profile = config.node_profile(node)
    return profile.network if profile.network is not None else "dhcp"


def node_network(config: Config, node: str, device: Mapping[str, Any] | None) -> NetworkState | None:
    """The NMState document of a node in a loaded config, ``None`` for ``dhcp``. For ``provider``, derived
    from ``device``, the node's device record as the state store holds it (:attr:`Current.device
    <bootserver.timeline.Current.device>`; ``None`` without one) by :func:`equinix_network`.

    Raises :class:`DeviceRecordError` (503, exit 1) when a ``provider`` node has no usable device record.
    """
    network = effective_network(config, node)
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


def node_kargs(config: Config, node: str, device: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The dracut network kernel arguments of a node (``()`` for ``dhcp``), with its hostname; ``device``
    is its device record (``None`` without one), read by ``network: provider`` only.

    Raises :class:`DeviceRecordError` as :func:`node_network`.
    """
    state = node_network(config, node, device)
    if state is None:
        return ()
    try:
        return dracut_kargs(state, config.node_hostname(node))
    except NetworkConfigError as e:  # a provider record that does not add up
        raise DeviceRecordError(f"node {node}: the device record does not describe a network: {e}") from None


# ------------------------------------------------------------------------------------------ config


def check_network_settings(config: Config, source: str) -> None:
    """The cross-key checks of every ``network`` key of a loaded :class:`~bootserver.config.Config`
    (``profiles``, ``nodes``):
    :func:`check_network` on each NMState document, the node's kargs built once (every word checked),
    ``network: provider`` only on nodes of the Equinix provider (the one device record with addresses;
    :func:`bootserver.providers.base.provider_of`, a node without any provider counts as Equinix's), and no
    network argument (``ip=``, ``bond=``...) also in the profile's ``kargs`` of a node whose network is not ``dhcp``.

    Raises :class:`~bootserver.errors.ConfigError` naming ``source`` and the key:
    ``nodes.master-0.network.interfaces[2].link-aggregation.port[1]: no interface named ens9``.
    """
    # (key, network, hostname): a node's document is checked with its kargs, a profile's (no hostname) alone
    documents: list[tuple[str, str | NetworkState | None, str | None]] = [
        (f"profiles.{name}", p.network, None) for name, p in config.profiles.items()]
    documents += [(f"nodes.{name}", n.network, n.hostname or name) for name, n in config.nodes.items()]
    for key, network, hostname in documents:
        if not isinstance(network, NetworkState):
            continue
        try:
            if hostname is not None:
                dracut_kargs(network, hostname)
            else:
                check_network(network)
        except NetworkConfigError as e:
            raise ConfigError(source, f"{key}.network.{e.path}".rstrip("."), e.message) from None
        except ValueError as e:  # UnsafeValueError: a word iPXE would not read literally
            raise ConfigError(source, f"{key}.network", str(e)) from None
    for name, node in config.nodes.items():
        profile = config.profiles.get(node.profile)
        if profile is None:
            continue
        network = node.network if node.network is not None else profile.network
        if network is None or network == "dhcp":
            continue
        # A node without a provider (none named, no provider's settings) is Equinix's, as before providers.
        provider = provider_of(config, name)
        if network == "provider" and provider not in (None, "equinix"):
            where = f"nodes.{name}.network" if node.network is not None else f"profiles.{node.profile}.network"
            raise ConfigError(source, where, f"network: provider reads the addresses of an Equinix Metal device "
                              f"record, and node {name}'s provider is {provider}; give it an NMState network or dhcp")
        for i, karg in enumerate(profile.kargs):
            if karg.split("=", 1)[0] in NETWORK_KARGS:
                raise ConfigError(source, f"profiles.{node.profile}.kargs[{i}]",
                                  f"{karg} is a network argument, and node {name} has a network key; "
                                  "describe the network in one place")
