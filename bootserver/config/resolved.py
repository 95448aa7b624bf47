"""A node resolved: one configured node and its profile made into one complete, flat, frozen value
(:class:`ResolvedNode`), the one place where "the node's setting, else its profile's, else the default"
is written. Everything that boots, serves, reserves, provisions or watches a node takes this value
(:class:`bootserver.inventory.Inventory` keeps one per node and loaded config), never the config and a
node's name; the config's own cross-key checks (:mod:`bootserver.config.loader`) read it too.

Modelled on smee (tinkerbell), which turns a request into one complete ``hardware.Info`` once and hands
it whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..nmstate import NetworkState
from .providers import DEFAULT_PLATFORM, REGISTRY
from .schema import FILE_SOURCE, Config, Node, Profile


@dataclass(frozen=True, slots=True)
class ResolvedNode:
    """One configured node, resolved (:func:`resolve_node`): every setting it boots, is selected,
    reserved and provisioned by, its own where it has one, else its profile's, else the default.

    Who it is: ``name``; ``source`` (where it is defined: ``"file:PATH"``, ``"store"``); ``hostname`` (its own, else
    its name); ``facility``; its selectors ``mac`` (normalized, lower case with ``:``) and ``uuid``
    (lower case); ``addresses`` (the CIDRs it may be served to; ``()``: any), ``selectable`` and
    ``default`` (the generic entry's rules, :func:`bootserver.inventory.Inventory.select`).

    What it boots: ``profile`` (its profile's name), ``stream`` and ``arch`` (the release is the
    stream's current one for the arch), ``mode`` (``install``/``live``), ``install_dev``, ``ignition``
    (the real config's path as written, or ``None``), ``ignition_version`` (the newest stub spec),
    ``kargs`` (the profile's extra kargs), ``console`` (the profile's, or ``None``: the default of
    :func:`bootserver.kargs.build_kargs`), ``platform`` (``ignition.platform.id``: :func:`platform_of`),
    ``boots_once``, ``checkin``, ``secure_boot`` and ``secure_boot_key`` (the config key it comes from,
    ``nodes.<n>.secure_boot``, else ``profiles.<p>.secure_boot``, for error messages), ``artifact_rate``
    (bytes per second, ``None``: the server's), ``network`` (``"dhcp"``, ``"provider"`` or an NMState
    document) and ``network_key``, the config key it comes from (``nodes.<n>.network``, else
    ``profiles.<p>.network``), for error messages.

    Its provider: ``provider`` (``None``: none; :func:`provider_of`) and ``settings``, that provider's
    settings of the node merged over its profile's (node wins; ``None`` without a provider).
    """

    name: str
    source: str
    hostname: str
    facility: str | None
    mac: tuple[str, ...]
    uuid: str | None
    addresses: tuple[str, ...]
    selectable: bool
    default: bool
    profile: str
    stream: str
    arch: str
    mode: str
    install_dev: str | None
    ignition: str | None
    ignition_version: str
    kargs: tuple[str, ...]
    console: str | None
    platform: str
    boots_once: bool
    checkin: bool
    secure_boot: bool
    secure_boot_key: str
    artifact_rate: int | None
    network: str | NetworkState
    network_key: str
    provider: str | None
    settings: Any

    @property
    def boots_image(self) -> bool:
        """Whether ``provision`` boots the node from its boot image: a node of the Redfish provider with
        ``redfish.boot_source: virtual-media`` or ``http`` (the firmware's UEFI HTTP boot of the image's URL)."""
        return self.provider == "redfish" and self.settings.boot_source in ("virtual-media", "http")


def provider_of(spec: Node, profile: Profile) -> str | None:
    """The provider a node names (``nodes.<n>.provider``, else ``profiles.<p>.provider``), else the one
    whose settings it has (a non-empty ``metal:`` implies ``equinix``), else ``None``."""
    named = spec.provider or profile.provider
    if named:
        return named
    for name, registered in REGISTRY.items():
        for holder in (spec, profile):
            settings = getattr(holder, registered.settings_key, None)
            if settings is not None and settings.model_fields_set:
                return name
    return None


def platform_of(profile: Profile, provider: str | None) -> str:
    """The ``ignition.platform.id`` / ``coreos.inst.platform_id`` of a node (docs/design.md, rules 4-5):
    its profile's ``platform_id`` if set, else its provider's (``packet`` for Equinix, ``metal`` for
    Redfish and IPMI: the registry's ``platform_id``), else ``metal`` (a node with no provider:
    :data:`~bootserver.config.providers.DEFAULT_PLATFORM`). The console follows the platform
    (:func:`bootserver.kargs.build_kargs`)."""
    if profile.platform_id:
        return profile.platform_id
    return DEFAULT_PLATFORM if provider is None else REGISTRY[provider].platform_id


def resolve_node(name: str, spec: Node, profile: Profile, source: str) -> ResolvedNode:
    """Node ``name`` (its settings ``spec``, of profile ``profile``, defined in ``source``) resolved:
    its setting over its profile's over the default, for every key (:class:`ResolvedNode`)."""
    provider = provider_of(spec, profile)
    settings = None if provider is None else getattr(spec, REGISTRY[provider].settings_key).merged_over(
        getattr(profile, REGISTRY[provider].settings_key))
    network = spec.network if spec.network is not None else profile.network
    return ResolvedNode(
        name=name, source=source, hostname=spec.hostname or name, facility=spec.facility, mac=spec.mac,
        uuid=spec.uuid, addresses=spec.addresses, selectable=spec.selectable, default=spec.default,
        profile=spec.profile, stream=profile.stream, arch=profile.arch, mode=profile.mode,
        install_dev=profile.install_dev, ignition=profile.ignition, ignition_version=profile.ignition_version,
        kargs=profile.kargs, console=profile.console, platform=platform_of(profile, provider),
        boots_once=profile.boots_once, checkin=profile.checkin,
        secure_boot=profile.secure_boot if spec.secure_boot is None else spec.secure_boot,
        secure_boot_key=f"nodes.{name}.secure_boot" if spec.secure_boot is not None
        else f"profiles.{spec.profile}.secure_boot",
        artifact_rate=profile.artifact_rate, network="dhcp" if network is None else network,
        network_key=f"nodes.{name}.network" if spec.network is not None else f"profiles.{spec.profile}.network",
        provider=provider, settings=settings)


def resolve_nodes(config: Config) -> dict[str, ResolvedNode]:
    """Every node of ``config`` whose profile exists, resolved (:func:`resolve_node`), in config order;
    its ``source`` is the config's (:attr:`~bootserver.config.Config.node_sources`: ``"file:PATH"`` or
    ``"store"``)."""
    sources = config.node_sources
    return {name: resolve_node(name, spec, config.profiles[spec.profile],
                               sources.get(name) or FILE_SOURCE + config.origins.get(f"nodes.{name}", config.source))
            for name, spec in config.nodes.items() if spec.profile in config.profiles}


__all__ = ["ResolvedNode", "platform_of", "provider_of", "resolve_node", "resolve_nodes"]
