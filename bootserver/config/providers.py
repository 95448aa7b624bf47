"""The providers' registry, and what it says of a node of a loaded config: which provider it has
(:func:`provider_of`), its platform (:func:`boot_platform`), whether it boots from its image
(:func:`boots_virtual_media`). Read by the config at load (which checks the provider names and the
providers' settings), by a node's kernel arguments and by the providers themselves
(:mod:`bootserver.providers`, above the config), without importing any provider module.

It sits below :mod:`bootserver.config.schema` (which names :data:`REGISTRY`'s providers), so the loaded
``Config`` is typed here by the part these functions read (:class:`NodeLookup`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol


class Registered(NamedTuple):
    """A provider's entry in :data:`REGISTRY`."""

    #: The module that defines it (its ``PROVIDER`` is the ``Provider`` class, which
    #: :func:`bootserver.providers.interface.provider_class` imports when a command needs it).
    module: str
    #: The key of its settings in ``profiles.<p>`` and ``nodes.<n>`` (a model of
    #: ``config/<name>_settings.py``); the provider class's ``settings_key`` is this.
    settings_key: str
    #: The ``ignition.platform.id`` / ``coreos.inst.platform_id`` of its nodes (docs/design.md, rules 4-5);
    #: the provider class's ``platform_id`` is this.
    platform_id: str


#: Provider name -> its module, settings key and platform. Adding a provider: write its module
#: (``providers/<name>.py``) and its settings module (``config/<name>_settings.py``), add one line here.
REGISTRY: dict[str, Registered] = {
    "equinix": Registered("bootserver.providers.equinix", "metal", "packet"),
    "redfish": Registered("bootserver.providers.redfish", "redfish", "metal"),
    "ipmi": Registered("bootserver.providers.ipmi", "ipmi", "metal"),
}

#: The platform of a node that has no provider (it names none and has no provider's settings): ``metal``,
#: CoreOS's platform for bare metal. Equinix's ``packet`` is for nodes of the ``equinix`` provider only:
#: with it, Afterburn on the installed system asks Equinix's metadata service, which exists nowhere else
#: (docs/design.md, rule 4). Such a node has no provider for ``provision`` either.
DEFAULT_PLATFORM = "metal"


class Holder(Protocol):
    """What :func:`provider_of` reads of a node's or a profile's settings (``config.schema``'s ``Node``
    and ``Profile``): the provider it names, and each provider's settings by their key."""

    @property
    def provider(self) -> str | None: ...


class ProfileHolder(Holder, Protocol):
    """A profile as :func:`boot_platform` reads it: also the platform it names."""

    @property
    def platform_id(self) -> str | None: ...


class NodeLookup(Protocol):
    """What these functions read of a loaded config (:class:`bootserver.config.Config`)."""

    @property
    def nodes(self) -> Mapping[str, Holder]: ...

    def node_profile(self, node: str) -> ProfileHolder: ...


def provider_of(config: NodeLookup, node: str) -> str | None:
    """The provider a node names (``nodes.<n>.provider``, else ``profiles.<p>.provider``), else the one
    whose settings it has (a non-empty ``metal:`` implies ``equinix``), else ``None``."""
    spec = config.nodes[node]
    profile = config.node_profile(node)
    named = spec.provider or profile.provider
    if named:
        return named
    for name, registered in REGISTRY.items():
        for holder in (spec, profile):
            settings = getattr(holder, registered.settings_key, None)
            if settings is not None and settings.model_fields_set:
                return name
    return None


def provider_settings(config: NodeLookup, node: str, settings_key: str) -> Any:
    """A provider's settings of ``node`` (those under ``settings_key``): its mapping merged over its
    profile's (node wins)."""
    spec, profile = config.nodes[node], config.node_profile(node)
    return getattr(spec, settings_key).merged_over(getattr(profile, settings_key))


def boot_platform(config: NodeLookup, node: str) -> str:
    """The ``ignition.platform.id`` / ``coreos.inst.platform_id`` of a node (docs/design.md, rules 4-5):
    its profile's ``platform_id`` if set, else its provider's (``packet`` for Equinix, ``metal`` for
    Redfish and IPMI: the registry's ``platform_id``), else ``metal`` (a node with no provider:
    :data:`DEFAULT_PLATFORM`). The console follows the platform (:func:`bootserver.kargs.build_kargs`)."""
    profile = config.node_profile(node)
    if profile.platform_id:
        return profile.platform_id
    provider = provider_of(config, node)
    return DEFAULT_PLATFORM if provider is None else REGISTRY[provider].platform_id


def boots_virtual_media(config: NodeLookup, node: str) -> bool:
    """Whether ``provision`` boots the node from its boot image: a node of the Redfish provider with
    ``redfish.boot_source: virtual-media`` or ``http`` (the firmware's UEFI HTTP boot of the image's URL;
    on the node, or its profile's)."""
    if provider_of(config, node) != "redfish":
        return False
    return provider_settings(config, node, "redfish").boot_source in ("virtual-media", "http")


__all__ = ["DEFAULT_PLATFORM", "REGISTRY", "Registered", "boot_platform", "boots_virtual_media", "provider_of",
           "provider_settings"]
