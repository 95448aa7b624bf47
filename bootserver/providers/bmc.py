"""The BMC family: what the Redfish and IPMI providers share, written once (:class:`BmcProvider`).

A BMC provider drives one machine per node through its baseboard management controller: boot it from
the network (or its boot image) once and power it on (``provision``), power it off and undo the boot
setting (``deprovision``), report each machine's power (``devices``). The flow is the same for every
BMC protocol, as Ironic's conductor drives every driver's power and management interfaces alike; a
protocol fills in the steps it speaks:

* :meth:`BmcProvider.machine`: the node's machine at its BMC (an open client, and the system in it);
* :meth:`BmcProvider.power_state` (``On``, ``Off``, ...), :meth:`BmcProvider.soft_off` (a graceful or
  ACPI shutdown, when the BMC offers one), :meth:`BmcProvider.hard_off`;
* :meth:`BmcProvider.clear_boot`: undo ``provision``'s boot setting once the machine is off;
* :meth:`BmcProvider.look`: the words ``devices`` prints for a machine;
* ``provision`` itself, whose requests differ most between protocols.

What the family does once: the settings of a node (merged, address and user checked), its password
(``password_file`` or ``password_env``, never printed), the ``deprovision --grace SECONDS`` option, the
power-off sequence (soft off, wait up to ``--grace``, then hard off and wait), ``poll`` and ``devices``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from bootserver.config import Config, ResolvedNode
from bootserver.config.bmc_settings import BmcSettings
from bootserver.errors import InputError
from bootserver.inventory import inventory
from bootserver.providers.base import (
    MissingCredentials,
    Outcome,
    Poll,
    ProviderError,
    ProviderOptions,
    option,
)
from bootserver.providers.interface import Provider
from bootserver.sealing import unseal
from bootserver.urls import Urls

log = logging.getLogger(__name__)

#: Seconds ``deprovision`` waits after a graceful (soft) shutdown before it forces the power off (``--grace``).
DEFAULT_GRACE = 60.0

SettingsT = TypeVar("SettingsT", bound=BmcSettings)
MachineT = TypeVar("MachineT")


@dataclass(frozen=True)
class BmcOptions(ProviderOptions):
    """The command-line options of every BMC provider: ``deprovision --grace SECONDS`` (one option,
    shared by the family: the command line adds it once)."""

    grace: float = option("--grace", default=DEFAULT_GRACE, commands=("deprovision",), parse=float,
                          metavar="SECONDS", help=f"wait this long after a graceful shutdown before forcing the "
                                                  f"power off (default {DEFAULT_GRACE:g})")


def now() -> str:
    """The time of a device record's ``updated_at``: UTC, ISO 8601, whole seconds."""
    return datetime.now(UTC).isoformat(timespec="seconds")


class BmcProvider(Provider[BmcOptions], Generic[SettingsT, MachineT]):
    """Base of a provider that drives one machine per node through its BMC (see the module docstring).

    Class attributes a protocol sets, the words of its messages: ``soft_off_name`` (``soft shutdown``,
    ``graceful shutdown``), ``hard_off_name`` (``power down``, ``ForceOff``), ``hard_off_done``
    (``powered down``, ``forced off``), and ``hard_off_timeout``: seconds to wait for the power to go off
    after a hard off before the command fails. Every method raises :class:`ProviderError` (exit 1) for
    a BMC's failure and ``InputError`` (exit 2) for bad settings, each one line naming the node.
    """

    options_type = BmcOptions
    soft_off_name: ClassVar[str]
    hard_off_name: ClassVar[str]
    hard_off_done: ClassVar[str]
    hard_off_timeout: ClassVar[float]
    #: Seconds between two looks at the power while waiting for it to go off.
    poll_interval: ClassVar[float] = 1.0

    def __init__(self, config: Config, options: BmcOptions, urls: Urls) -> None:
        self.config = config
        self.options = options
        self.urls = urls
        #: the config's nodes, resolved once (their provider and merged settings)
        self.inventory = inventory(config)

    @classmethod
    def open(cls, config: Config, options: BmcOptions, urls: Urls) -> BmcProvider[SettingsT, MachineT]:
        """Check the options and what the protocol needs on this machine (:meth:`prepare`); no BMC is
        asked yet: each node's is opened when first used. Raises ``InputError`` for a bad option."""
        if not options.grace >= 0:
            raise InputError(f"--grace: must not be negative, got {options.grace:g}")
        provider = cls(config, options, urls)
        provider.prepare()
        return provider

    def prepare(self) -> None:
        """What the protocol checks or sets up once per command (its client program, its logging)."""

    # -- settings

    def settings(self, node: ResolvedNode) -> SettingsT:
        """The node's merged settings (node over profile, as resolved: ``node.settings``), with ``address``
        and ``username`` present: else ``InputError`` naming the node and the key (``node rf-0: no
        redfish.address: set it on the node or its profile``)."""
        s: SettingsT = node.settings
        for key in ("address", "username"):
            if getattr(s, key) is None:
                raise InputError(f"node {node.name}: no {self.settings_key}.{key}: set it on the node or its profile")
        return s

    def password(self, node: ResolvedNode) -> str:
        """The BMC password of a node from its merged settings (``node.settings``): ``password_sealed``
        (given to the fleet API, opened with ``state_dir``'s key: :func:`bootserver.sealing.unseal`, whose
        ``SealError`` it raises), ``password_env`` (an environment variable) or ``password_file`` (a file,
        relative to the config file; one trailing newline dropped). Raises :class:`MissingCredentials`
        (exit 2) naming the node and the key, never the value. The value goes to the BMC client only: never
        printed, logged or recorded."""
        key, settings, name = self.settings_key, node.settings, node.name
        if settings.password_sealed is not None:  # given to the fleet API (bootserver.sealing)
            return unseal(self.config.state_dir, name, key, settings.password_sealed)
        if settings.password_env is not None:
            value = os.environ.get(settings.password_env)
            if not value:
                raise MissingCredentials(f"node {name}: {key}.password_env: ${settings.password_env} is not set")
            return value
        if settings.password_file is not None:
            path = self.config.resolve_path(settings.password_file)
            try:
                value = Path(path).read_text(encoding="utf-8").strip("\r\n")
            except OSError as exc:
                raise MissingCredentials(f"node {name}: {key}.password_file: {path}: "
                                         f"{exc.strerror or exc}") from None
            if not value:
                raise MissingCredentials(f"node {name}: {key}.password_file: {path} is empty")
            return value
        raise MissingCredentials(f"node {name}: no BMC password: set {key}.password_file or {key}.password_env")

    # -- what a protocol fills in

    def machine(self, node: ResolvedNode, device: Mapping[str, Any]) -> MachineT:
        """The node's machine at its BMC; ``device`` is its recorded device (``{}`` if none)."""
        raise NotImplementedError

    def machine_id(self, machine: MachineT) -> str:
        """The machine as output lines and records name it (the BMC, or the system's path)."""
        raise NotImplementedError

    def where(self, machine: MachineT) -> str:
        """The machine as progress messages name it (``BMC 10.0.0.5``, ``/redfish/v1/Systems/1``)."""
        return self.machine_id(machine)

    def power_state(self, machine: MachineT, *, fresh: bool = False) -> str:
        """The machine's power state, ``On``, ``Off`` or the BMC's own word; ``fresh``: asked again, not
        what the BMC answered before."""
        raise NotImplementedError

    def soft_off(self, machine: MachineT) -> bool:
        """Ask for a graceful shutdown; ``False`` when the BMC offers none."""
        raise NotImplementedError

    def hard_off(self, machine: MachineT) -> None:
        """Force the power off."""
        raise NotImplementedError

    def clear_boot(self, node: ResolvedNode, machine: MachineT, device: Mapping[str, Any],
                   say: Callable[[str, str], None]) -> None:
        """Undo what ``provision`` set for the next boot (the machine is off)."""
        raise NotImplementedError

    def look(self, node: ResolvedNode, device: Mapping[str, Any]) -> list[str]:
        """The words of ``devices`` for a node after its name, stage excluded: ``[id, power, *more]``.
        Raises ``ProviderError`` when the BMC fails (:meth:`unreachable` answers then)."""
        machine = self.machine(node, device)
        return [self.machine_id(machine), self.power_state(machine)]

    def unreachable(self, node: ResolvedNode, device: Mapping[str, Any]) -> list[str]:
        """The words of ``devices`` for a node whose BMC failed: ``[id, "error", *more]``."""
        raise NotImplementedError

    #: How many of :meth:`look`'s words come before the stage in a ``devices`` line.
    words_before_stage: ClassVar[int] = 2

    # -- the flow

    def poll(self, node: ResolvedNode, device: Mapping[str, Any]) -> Poll:
        """The machine's power state (a BMC reports no failure of an install)."""
        current = dict(device, state=self.power_state(self.machine(node, device)), updated_at=now())
        return Poll(current["state"], current)

    def wait_off(self, machine: MachineT, seconds: float) -> bool:
        """Whether the machine's power is off within ``seconds``, asked every :attr:`poll_interval`."""
        deadline = time.monotonic() + seconds
        while True:
            if self.power_state(machine, fresh=True) == "Off":
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(self.poll_interval, remaining))

    def power_off(self, node: ResolvedNode, machine: MachineT, say: Callable[[str, str], None]) -> None:
        """Power the machine off: a graceful shutdown and up to ``--grace`` seconds for it, then a hard
        off and up to :attr:`hard_off_timeout` seconds for it (``ProviderError`` past that)."""
        if self.power_state(machine) == "Off":
            return
        grace = self.options.grace
        if grace > 0 and self.soft_off(machine) and self.wait_off(machine, grace):
            say(node.name, f"{self.where(machine)}: shut down")
            return
        self.hard_off(machine)
        if not self.wait_off(machine, self.hard_off_timeout):
            raise ProviderError(f"node {node.name}: {self.where(machine)}: the power is still "
                                f"{self.power_state(machine)} {self.hard_off_timeout:g} s after {self.hard_off_name}")
        say(node.name, f"{self.where(machine)}: {self.hard_off_done}"
                  + (f" after {grace:g} s of {self.soft_off_name}" if grace > 0 else ""))

    def deprovision(self, nodes: Sequence[ResolvedNode], recorded: Mapping[str, Mapping[str, Any]],
                    say: Callable[[str, str], None]) -> list[Outcome]:
        """Power each node's machine off (:meth:`power_off`) and undo its boot setting; the settings and
        password of every node are checked before any BMC is asked."""
        for node in nodes:
            self.settings(node)
            self.password(node)
        out = []
        for node in nodes:
            device = recorded.get(node.name) or {}
            machine = self.machine(node, device)
            self.power_off(node, machine, say)
            self.clear_boot(node, machine, device, say)
            out.append(Outcome(node.name, None, f"{node.name} {self.machine_id(machine)} Off"))
        return out

    def devices(self, stages: Mapping[str, str], recorded: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """``node id power-state stage [more]`` for every node of this provider; a BMC that fails gives
        ``error`` as the power state and its one line in the log."""
        lines = []
        for node in self.inventory.of_provider(self.name):
            self.settings(node)  # bad settings stop the command (exit 2), as provision's
            device = recorded.get(node.name) or {}
            if device.get("provider") != self.name:
                device = {}
            try:
                words = self.look(node, device)
            except ProviderError as exc:
                log.error("%s", exc)
                words = self.unreachable(node, device)
            at = self.words_before_stage
            lines.append(" ".join([node.name, *words[:at], stages.get(node.name, "new"), *words[at:]]))
        return lines


__all__ = ["DEFAULT_GRACE", "BmcOptions", "BmcProvider", "now"]
