"""The providers' registry: each provider's module, settings key and platform. Read by the config at
load (which checks the provider names and the providers' settings), by a node's resolution
(:mod:`bootserver.config.resolved`: its provider, its platform) and by the providers themselves
(:mod:`bootserver.providers`, above the config), without importing any provider module.

It sits below :mod:`bootserver.config.schema`, which names :data:`REGISTRY`'s providers.
"""

from __future__ import annotations

from typing import NamedTuple


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


__all__ = ["DEFAULT_PLATFORM", "REGISTRY", "Registered"]
