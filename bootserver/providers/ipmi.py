"""The IPMI provider: a BMC boots its machine from the network once, over IPMI v2.0 with Debian's ``ipmitool``.

Most servers racked before Redfish (older Dell, HPE, most Supermicro boards) answer only IPMI; Ironic's
most used driver is ``ipmi``. A DHCP server hands the machine's iPXE ``/boot.ipxe?mac=${net0/mac}``
(docs/on-premises.md); ``bootserver provision`` does what Ironic's ``ipmitool`` driver does: set the next
boot to the network, once, and power the machine on. Commands of IPMI v2.0 (netfn ``0x00``, chassis):

* ``provision``: "Get Chassis Status" (``0x01``), then "Set System Boot Options" (``0x08``) parameter 5,
  the boot flags: ``0x05 FLAGS 0x04 0x00 0x00 0x00`` where ``0x04`` selects PXE and ``FLAGS`` is
  ``0x80`` (valid) | ``0x40`` (persistent, only with ``ipmi.persistent``) | ``0x20`` (EFI boot, with
  ``boot_mode: uefi``, the default): ``0xa0`` is Ironic's one-time UEFI PXE boot. A BMC that answers it
  with an error fails the node before anything is powered. Then "Chassis Control" (``0x02``): power up
  (``0x01``), or power cycle (``0x02``) a machine that is on. The device record holds the BMC address,
  the boot flags sent and the power state.
* ``deprovision``: "Chassis Control" soft shutdown (``0x05``, ACPI), then power down (``0x00``) when it
  is still on after ``--grace`` seconds; then the boot flags are cleared (parameter 5, not valid).
* ``devices``: each IPMI node's BMC, power state and bootserver's stage.

Why ``ipmitool`` (a subprocess) and not PyPI's ``pyghmi`` (docs/design.md, "Why ipmitool, not
pyghmi"): it takes a cipher suite (``-C``), it is what Ironic ships and what operators already run by
hand, and each command is a process of its own, bounded by ``timeout`` and killed past it: no session
cache to go stale after a BMC stall. Every request goes through ``ipmitool raw``, whose exit status
reports a BMC's error (``chassis bootdev`` exits 0 when the BMC refused it). The password reaches
ipmitool in its environment (``IPMI_PASSWORD`` with ``-E``), never on a command line another user could
read; it is never printed, logged or recorded. Sessions are RMCP+ (``lanplus``) at the operator
privilege, the least that chassis control and boot options need (IPMI v2.0, appendix G).

This module loads only when a command uses the provider
(:func:`bootserver.providers.interface.provider_class`).
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bootserver.config import ResolvedNode
from bootserver.config.ipmi_settings import DEFAULT_CIPHER_SUITE, DEFAULT_PORT, IpmiSettings
from bootserver.errors import BootserverError, InputError
from bootserver.providers.base import Outcome, ProviderError
from bootserver.providers.bmc import BmcProvider, now

log = logging.getLogger(__name__)

#: The ipmitool binary (Debian package ``ipmitool``).
IPMITOOL = "ipmitool"

#: Seconds one BMC command may take, when ``ipmi.timeout`` is not set.
DEFAULT_TIMEOUT = 30.0

#: Seconds ``deprovision`` waits for the power to go off after a power down before it gives up.
POWER_DOWN_TIMEOUT = 30.0

#: ipmitool's retransmissions of a request (``-R``) that gets no answer; each waits ``timeout / 3``
#: seconds (``-N``), so a BMC that never answers fails in about two thirds of ``timeout``.
RETRIES = 1

# IPMI v2.0, chassis commands (netfn 0x00) and their data.
CHASSIS = 0x00
GET_CHASSIS_STATUS = 0x01
CHASSIS_CONTROL = 0x02
SET_BOOT_OPTIONS = 0x08
POWER_DOWN, POWER_UP, POWER_CYCLE, SOFT_SHUTDOWN = 0x00, 0x01, 0x02, 0x05
BOOT_FLAGS = 0x05  # boot option parameter 5
FLAG_VALID, FLAG_PERSISTENT, FLAG_EFI = 0x80, 0x40, 0x20
DEVICE_PXE = 0x04  # boot device selector 0001b in bits 5:2

#: The words of :data:`CHASSIS_CONTROL`'s actions in messages.
ACTIONS = {POWER_DOWN: "power down", POWER_UP: "power up", POWER_CYCLE: "power cycle",
           SOFT_SHUTDOWN: "soft shutdown"}

#: ipmitool's words on standard error (with ``-v``) -> what they mean, for the one line of a failure.
_RAKP_ERROR = re.compile(r"RAKP \d message indicates an error : (.+)")
_RAW_ERROR = re.compile(r"Unable to send RAW command \(.*rsp=(0x[0-9a-f]+)\): (.+)")
_ALGORITHM = re.compile(r"invalid (authentication|integrity|confidentiality) algorithm")


def boot_flags(mode: str, persistent: bool) -> tuple[int, ...]:
    """The data of "Set System Boot Options" parameter 5 for a network boot (IPMI v2.0, table 28-14):
    ``(0x05, flags, 0x04, 0x00, 0x00, 0x00)``, ``flags`` valid, EFI for ``mode == "uefi"``, persistent
    when asked. ``boot_flags("uefi", False)`` is Ironic's one-time UEFI PXE boot, ``05 a0 04 00 00 00``."""
    flags = FLAG_VALID | (FLAG_EFI if mode == "uefi" else 0) | (FLAG_PERSISTENT if persistent else 0)
    return (BOOT_FLAGS, flags, DEVICE_PXE, 0x00, 0x00, 0x00)


def bmc_name(address: str, port: int) -> str:
    """How messages and ``devices`` name a BMC: its address, with ``:port`` unless it is 623
    (``[v6]:port`` for an IPv6 address)."""
    if port == DEFAULT_PORT:
        return address
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def failure_reason(stderr: str, username: str, cipher_suite: int, timeout: float) -> str:
    """One line for a failed ipmitool run from its standard error (``-v``): a wrong password, an
    unknown user, a cipher suite the BMC lacks, a BMC that does not answer, the BMC's completion code
    of a refused request, else ipmitool's last error line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if "RAKP 2 HMAC is invalid" in line:
            return f"wrong password for user {username} (RAKP 2 HMAC is invalid)"
        if m := _RAKP_ERROR.search(line):
            reason = m.group(1).strip()
            if "unauthorized name" in reason:
                return f"no user {username} on the BMC (RAKP 2: unauthorized name)"
            return f"the BMC refused the session: {reason}"
        if _ALGORITHM.search(line):
            return (f"the BMC does not offer cipher suite {cipher_suite} ({line}): set ipmi.cipher_suite "
                    "to one it has (3 or 17 on most BMCs)")
        if m := _RAW_ERROR.search(line):
            return f"the BMC answered completion code {m.group(1)}: {m.group(2).strip()}"
        if line.startswith(("Address lookup for", "Could not open socket")):
            return line.removesuffix("!")
        if "Get Channel Authentication Capabilities" in line or "Get Auth Capabilities error" in line:
            return f"no answer within {timeout:g} s"
    errors = [line for line in lines if line.startswith("Error")] or lines or ["ipmitool failed"]
    return " ".join(errors[-1].split())[:300]


class Bmc:
    """One BMC over IPMI v2.0 RMCP+ (``ipmitool -I lanplus``), one ipmitool process per request.

    ``node`` names the node in messages; ``address``/``port`` the BMC; ``username``/``password`` go to
    ipmitool only (``repr`` shows neither); ``cipher_suite`` is ipmitool's ``-C``; ``timeout`` seconds
    bound each request, retransmissions included (the process is killed past it). ``run`` (argv, env,
    timeout -> ``CompletedProcess``) runs ipmitool; it is :func:`subprocess.run` but for tests that
    count calls.
    """

    def __init__(self, node: str, address: str, port: int, username: str, password: str, *,
                 cipher_suite: int = DEFAULT_CIPHER_SUITE, timeout: float = DEFAULT_TIMEOUT,
                 binary: str = IPMITOOL) -> None:
        self.node = node
        self.address = address
        self.port = port
        self._username = username
        self._password = password
        self.cipher_suite = cipher_suite
        self.timeout = timeout
        self.binary = binary

    def __repr__(self) -> str:
        return f"Bmc(address={self.address!r}, port={self.port})"

    @property
    def name(self) -> str:
        """The BMC as messages name it (:func:`bmc_name`)."""
        return bmc_name(self.address, self.port)

    def argv(self, netfn: int, command: int, *data: int) -> list[str]:
        """The ipmitool command line of one raw request (no password in it)."""
        per_try = max(1, int(self.timeout / (RETRIES + 2)))
        return [self.binary, "-I", "lanplus", "-H", self.address, "-p", str(self.port), "-U", self._username,
                "-E", "-L", "OPERATOR", "-C", str(self.cipher_suite), "-N", str(per_try), "-R", str(RETRIES),
                "-v", "raw", *(f"0x{b:02x}" for b in (netfn, command, *data))]

    def raw(self, what: str, netfn: int, command: int, *data: int) -> bytes:
        """Send one request (``ipmitool raw``) and return the response data (after the completion code).
        ``what`` names the request in messages. Raises :class:`ProviderError`: ``node N: BMC A: what:
        reason`` within ``timeout`` seconds."""
        argv = self.argv(netfn, command, *data)
        where = f"node {self.node}: BMC {self.name}: {what}"
        log.debug("%s: %s", where, " ".join(argv[argv.index("raw"):]))
        env = {"IPMI_PASSWORD": self._password, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
        try:
            done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=self.timeout, check=False)
        except subprocess.TimeoutExpired:
            raise ProviderError(f"{where}: no answer within {self.timeout:g} s") from None
        except OSError as exc:
            raise ProviderError(f"{where}: cannot run {self.binary}: {exc.strerror or exc}") from None
        if done.returncode != 0:
            reason = failure_reason(done.stderr, self._username, self.cipher_suite, self.timeout)
            raise ProviderError(f"{where}: {reason}")
        try:
            return bytes(int(word, 16) for word in done.stdout.split())
        except ValueError:
            raise ProviderError(f"{where}: unreadable answer from ipmitool: "
                                f"{' '.join(done.stdout.split())[:100]!r}") from None

    def power_is_on(self) -> bool:
        """Get Chassis Status: whether the system's power is on (bit 0 of its first byte)."""
        answer = self.raw("Get Chassis Status", CHASSIS, GET_CHASSIS_STATUS)
        if not answer:
            raise ProviderError(f"node {self.node}: BMC {self.name}: Get Chassis Status: an empty answer")
        return bool(answer[0] & 0x01)

    def power(self) -> str:
        """The power state as ``On`` or ``Off`` (the words of the Redfish provider's records)."""
        return "On" if self.power_is_on() else "Off"

    def chassis_control(self, action: int) -> None:
        """Chassis Control with ``action`` (:data:`POWER_UP`, :data:`POWER_CYCLE`, ...)."""
        self.raw(f"Chassis Control {ACTIONS[action]}", CHASSIS, CHASSIS_CONTROL, action)

    def set_boot_flags(self, data: Sequence[int]) -> None:
        """Set System Boot Options with ``data`` (parameter selector first, e.g. :func:`boot_flags`)."""
        self.raw("Set System Boot Options (boot flags)", CHASSIS, SET_BOOT_OPTIONS, *data)


class Ipmi(BmcProvider[IpmiSettings, Bmc]):
    """The ``ipmi`` provider: one BMC per node, over IPMI v2.0 (see the module docstring); the power-off
    flow, ``poll`` and ``devices`` are the BMC family's (:class:`~bootserver.providers.bmc.BmcProvider`)."""

    name = "ipmi"
    options_title = "IPMI (provider ipmi)"
    soft_off_name = "soft shutdown"
    hard_off_name = "a power down"
    hard_off_done = "powered down"
    hard_off_timeout = POWER_DOWN_TIMEOUT
    #: The ipmitool binary found on PATH (:meth:`prepare`).
    binary = IPMITOOL

    def prepare(self) -> None:
        """Find ipmitool; raises :class:`BootserverError` (exit 1) without it."""
        binary = shutil.which(IPMITOOL)
        if binary is None:
            raise BootserverError(f"the ipmi provider needs {IPMITOOL} (Debian package ipmitool), "
                                  "and it is not on PATH")
        self.binary = binary

    def bmc(self, node: ResolvedNode) -> tuple[Bmc, IpmiSettings]:
        """The node's BMC client and its merged settings. Raises ``InputError`` for missing settings or
        a password that cannot be read."""
        s = self.settings(node)
        assert s.address is not None and s.username is not None  # self.settings() checked both
        password = self.password(node)
        if len(password.encode()) > 20:
            raise InputError(f"node {node.name}: ipmi: the password is longer than IPMI's 20 bytes")
        return Bmc(node.name, s.address, s.port or DEFAULT_PORT, s.username, password,
                   cipher_suite=s.cipher_suite or DEFAULT_CIPHER_SUITE, timeout=s.timeout or DEFAULT_TIMEOUT,
                   binary=self.binary), s

    # -- the BMC family's steps

    def machine(self, node: ResolvedNode, device: Mapping[str, Any]) -> Bmc:
        """The node's BMC client (no request yet)."""
        return self.bmc(node)[0]

    def machine_id(self, machine: Bmc) -> str:
        return machine.name

    def where(self, machine: Bmc) -> str:
        return f"BMC {machine.name}"

    def power_state(self, machine: Bmc, *, fresh: bool = False) -> str:
        """Get Chassis Status, every time (IPMI keeps nothing between requests)."""
        return machine.power()

    def soft_off(self, machine: Bmc) -> bool:
        """Chassis Control soft shutdown (ACPI)."""
        machine.chassis_control(SOFT_SHUTDOWN)
        return True

    def hard_off(self, machine: Bmc) -> None:
        """Chassis Control power down."""
        machine.chassis_control(POWER_DOWN)

    def clear_boot(self, node: ResolvedNode, machine: Bmc, device: Mapping[str, Any],
                   say: Callable[[str, str], None]) -> None:
        """The boot flags, no longer valid (parameter 5 with the valid bit clear)."""
        machine.set_boot_flags((BOOT_FLAGS, 0x00, 0x00, 0x00, 0x00, 0x00))

    def unreachable(self, node: ResolvedNode, device: Mapping[str, Any]) -> list[str]:
        s = self.settings(node)
        assert s.address is not None
        return [bmc_name(s.address, s.port or DEFAULT_PORT), "error"]

    # -- records

    def record(self, bmc: Bmc, s: IpmiSettings, power: str) -> dict[str, Any]:
        """The node state's ``device`` member: ``{"provider": "ipmi", "id": <BMC>, "address", "port",
        "state": On|Off, "boot": {"device": "pxe", "mode", "persistent"}, "updated_at"}``."""
        return {
            "provider": self.name,
            "id": bmc.name,
            "address": bmc.address,
            "port": bmc.port,
            "state": power,
            "boot": {"device": "pxe", "mode": s.boot_mode or "uefi", "persistent": bool(s.persistent)},
            "updated_at": now(),
        }

    def line(self, node: ResolvedNode, device: Mapping[str, Any]) -> str:
        """``node BMC power-state``."""
        return f"{node.name} {device['id']} {device['state']}"

    # -- commands

    def provision(self, nodes: Sequence[ResolvedNode], recorded: Mapping[str, Mapping[str, Any]],
                  record: Callable[[str, dict[str, Any]], None],
                  say: Callable[[str, str], None]) -> list[Outcome]:
        """Boot each node from the network: the boot flags (once, unless ``persistent``), then power up,
        or power cycle a machine that is on. The settings and password of every node are checked before
        any BMC is asked; a BMC that refuses the boot flags fails before its machine is powered."""
        bmcs = [self.bmc(node) for node in nodes]
        out = []
        for node, (bmc, s) in zip(nodes, bmcs, strict=True):
            was = bmc.power()
            mode, persistent = s.boot_mode or "uefi", bool(s.persistent)
            bmc.set_boot_flags(boot_flags(mode, persistent))
            action = POWER_CYCLE if was == "On" else POWER_UP
            bmc.chassis_control(action)
            say(node.name, f"BMC {bmc.name}: next boot from the network ({mode}, "
                      f"{'every boot' if persistent else 'once'}); {ACTIONS[action]} (was {was})")
            device = self.record(bmc, s, bmc.power())
            record(node.name, device)
            out.append(Outcome(node.name, device, self.line(node, device)))
        return out


PROVIDER = Ipmi

__all__ = ["Bmc", "Ipmi", "boot_flags", "failure_reason"]
