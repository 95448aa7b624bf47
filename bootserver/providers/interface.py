"""The provider interface: :class:`Provider`, what ``provision``, ``deprovision`` and ``devices`` drive
(one subclass per provider module, named in :data:`~bootserver.config.providers.REGISTRY`), the
registered classes, and a provider's settings of a node.

It sits above :mod:`bootserver.config` and :mod:`bootserver.urls` (a provider opens with the loaded
config and the command's URLs); the errors, options and retry policy it builds on are in
:mod:`bootserver.providers.base`; the registry, and what it says of a node (its provider, its platform,
whether it boots from its image), in :mod:`bootserver.config.providers`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from bootserver.config import Config, ResolvedNode
from bootserver.config.providers import REGISTRY
from bootserver.inventory import inventory
from bootserver.providers.base import Outcome, Poll, ProviderOptions
from bootserver.urls import Urls

OptionsT = TypeVar("OptionsT", bound=ProviderOptions)


class Provider(Generic[OptionsT]):
    """Base class of a provider; one subclass per module of this package, named in
    :data:`~bootserver.config.providers.REGISTRY`, generic in its options type.

    Class attributes:
      ``name``: the value of ``provider:`` in the config.
      ``settings_key``: the key of its settings in ``profiles.<p>`` and ``nodes.<n>`` (a frozen
      pydantic model with a ``merged_over(base)`` method, declared in the config schema); set from
      its :data:`~bootserver.config.providers.REGISTRY` entry, the one place it is written.
      ``platform_id``: the ``ignition.platform.id`` / ``coreos.inst.platform_id`` of its nodes; set from
      its registry entry too.
      ``options_type`` / ``options_title``: its options dataclass (fields made by :func:`option`) and
      the title of their group in ``--help``.

    An instance is an open client (``open``), closed by ``close``; every method raises
    :class:`ProviderError` (exit 1) for a failure of the far end and ``InputError`` (exit 2) for bad
    settings, each one line.
    """

    name: ClassVar[str]
    settings_key: ClassVar[str]
    platform_id: ClassVar[str]
    options_type: ClassVar[type[ProviderOptions]] = ProviderOptions
    options_title: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A provider class takes its ``settings_key`` and ``platform_id`` from its registry entry
        (``KeyError`` at import for a provider missing from :data:`~bootserver.config.providers.REGISTRY`);
        a base without a ``name`` (a family's, :class:`~bootserver.providers.bmc.BmcProvider`) takes none."""
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            return
        registered = REGISTRY[cls.name]
        cls.settings_key = registered.settings_key
        cls.platform_id = registered.platform_id

    @classmethod
    def used_by(cls, config: Config, options: OptionsT) -> bool:
        """Whether ``devices`` should ask this provider (it has nodes, or options name it)."""
        return bool(inventory(config).of_provider(cls.name))

    @classmethod
    def open(cls, config: Config, options: OptionsT, urls: Urls) -> Provider[OptionsT]:
        """An open client for ``config`` and the command's options (built once by the CLI); ``urls``
        is the command's :class:`~bootserver.urls.Urls` (signed with the state store's keys, which
        load only when a URL is signed). Raises ``InputError``."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the client's connections."""

    def __enter__(self) -> Provider[OptionsT]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def provision(self, nodes: Sequence[ResolvedNode], recorded: Mapping[str, Mapping[str, Any]],
                  record: Callable[[str, dict[str, Any]], None],
                  say: Callable[[str, str], None]) -> list[Outcome]:
        """Make each node (as resolved by the caller: its provider is this one, its ``settings`` this
        provider's, merged) boot from bootserver now. ``recorded`` is each node's recorded ``device`` by
        name (``{}`` if none); ``record(name, device)`` stores a device as soon as it exists (before a later
        node may fail); ``say(name, message)`` reports progress."""
        raise NotImplementedError

    def poll(self, node: ResolvedNode, device: Mapping[str, Any]) -> Poll:
        """The node's device as it is now (``device`` is what was recorded), while ``provision`` waits."""
        raise NotImplementedError

    def booted(self, node: ResolvedNode, device: Mapping[str, Any],
               say: Callable[[str, str], None]) -> dict[str, Any] | None:
        """Called once by ``provision``'s wait when the node's network boot is over (its stage is
        ``installing`` or later): undo what only that boot needed (Redfish: eject the boot image).
        Returns the new device record, or ``None`` when nothing changed. Default: nothing."""
        return None

    def line(self, node: ResolvedNode, device: Mapping[str, Any]) -> str:
        """The output line of ``provision`` for a node and its recorded device."""
        raise NotImplementedError

    def deprovision(self, nodes: Sequence[ResolvedNode], recorded: Mapping[str, Mapping[str, Any]],
                    say: Callable[[str, str], None]) -> list[Outcome]:
        """Undo ``provision`` for each node (as resolved, ``recorded`` as for :meth:`provision`); each
        outcome's ``device`` is ``None`` (state cleared)."""
        raise NotImplementedError

    def devices(self, stages: Mapping[str, str], recorded: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """The lines of ``bootserver devices`` for this provider; ``stages`` maps node -> timeline stage,
        ``recorded`` node -> device record (the state store's, of every node that has one)."""
        raise NotImplementedError


def provider_class(name: str) -> type[Provider[Any]]:
    """The :class:`Provider` subclass registered as ``name``. Raises ``KeyError`` for an unknown name."""
    module = importlib.import_module(REGISTRY[name].module)
    cls: type[Provider[Any]] = module.PROVIDER
    return cls


def provider_classes() -> list[type[Provider[Any]]]:
    """Every registered provider class, in registry order."""
    return [provider_class(name) for name in REGISTRY]

