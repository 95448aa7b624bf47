"""The Redfish provider: a BMC boots its machine from the network once, with OpenStack's ``sushy``.

On premises a DHCP server hands the machine's iPXE ``/boot.ipxe?mac=${net0/mac}`` (docs/on-premises.md);
what is left for ``bootserver provision`` is what Ironic and Metal3 do through a BMC: set the next boot
to the network, once, and power the machine on. Redfish (DMTF DSP0266; resources ``ComputerSystem``
and ``EthernetInterface`` of DSP8010) is the standard BMC API; ``sushy`` is the client Ironic uses.

* ``provision``: ``PATCH`` the system's ``Boot`` with ``BootSourceOverrideTarget: Pxe`` and
  ``BootSourceOverrideEnabled: Once`` (and ``BootSourceOverrideMode`` when ``boot_mode`` is set), then
  ``ComputerSystem.Reset`` ``On`` (``ForceRestart`` when it is on). The node's device record holds the
  BMC address, the system, its power state and the MAC addresses of its ethernet interfaces.
  With ``boot_source: virtual-media`` (no DHCP on the node's network; what Metal3/Ironic's
  ``redfish-virtual-media`` does): first ``VirtualMedia.EjectMedia`` of whatever the CD/DVD member of the
  system's manager's ``VirtualMedia`` collection holds, then ``VirtualMedia.InsertMedia`` with the node's
  signed boot image URL (``/iso/<node>.iso``, :mod:`bootserver.images`; ``Inserted``, ``WriteProtected``),
  and the override ``Cd``/``Once`` instead of ``Pxe``. The BMC downloads the image from bootserver.
  Once the wait sees the node ``installing`` (its network boot is over), the image is ejected
  (:meth:`Redfish.booted`); ``--no-wait`` leaves that to the next ``provision`` or ``deprovision``, and
  meanwhile boot-once makes the image boot the local disk.
  With ``boot_source: http`` (no DHCP boot options at all): the override ``UefiHttp``/``Once`` with
  ``HttpBootUri`` the node's signed boot image URL, which the firmware's UEFI HTTP boot loads and boots
  (edk2 boots an ISO image over HTTP as a RAM disk); refused with one line, before any power action,
  when the system's ``BootSourceOverrideTarget@Redfish.AllowableValues`` has no ``UefiHttp``.
* ``deprovision``: ``GracefulShutdown``, then ``ForceOff`` when it is still on after ``--grace``
  seconds; then the override is cleared (``BootSourceOverrideEnabled: Disabled``) and, with
  ``virtual-media``, the image ejected.
* ``devices``: each Redfish node's system, power state, bootserver's stage and its Secure Boot state.
* Secure Boot: ``provision`` reads each system's ``SecureBoot`` resource (``SecureBootEnable``) first; a
  node whose Secure Boot is on but whose boot cannot run under it (the network boot, or an image without
  ``secure_boot``) fails before any power action on any node, one line naming it and what to set.

This module loads (and with it ``sushy``) only when a command uses the provider
(:func:`bootserver.providers.interface.provider_class`). Credentials come from ``password_file`` or
``password_env`` and go to sushy only: never printed, logged or recorded. A BMC's error is one line
carrying its own words (``@Message.ExtendedInfo``); a BMC that is down or does not answer within
``timeout`` seconds is one line too (exit 1).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import sushy.auth

from bootserver.config import Config, ResolvedNode
from bootserver.config.redfish_settings import RedfishSettings
from bootserver.errors import InputError
from bootserver.images.network import boot_network
from bootserver.providers.base import Outcome, ProviderError, ProviderNotFound, RetryPolicy
from bootserver.providers.bmc import BmcOptions, BmcProvider, now
from bootserver.urls import Urls

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds to wait for a BMC's answer, when ``redfish.timeout`` is not set.
DEFAULT_TIMEOUT = 30.0

#: Seconds ``deprovision`` waits for ``Off`` after ``ForceOff`` before it gives up.
FORCE_OFF_TIMEOUT = 60.0

SYSTEMS = "/redfish/v1/Systems/"



def _sushy() -> ModuleType:
    """sushy, imported on first use: every command builds its parser from this module's options, and
    sushy (with requests) is most of a command's start-up (about 0.2 s)."""
    import sushy
    import sushy.auth
    import sushy.exceptions
    return sushy


def _requests() -> ModuleType:
    """requests, imported on first use (see :func:`_sushy`)."""
    import requests
    return requests

def _detail(exc: Exception) -> str:
    """The BMC's own words from a sushy ``HTTPError``: every ``Message`` of ``@Message.ExtendedInfo``,
    else the error's ``message``, else its code."""
    info = getattr(exc, "extended_info", None) or []
    if isinstance(info, Mapping):
        info = [info]
    messages = [str(m["Message"]) for m in info if isinstance(m, Mapping) and m.get("Message")]
    body = getattr(exc, "body", None) or {}
    if not messages and isinstance(body, Mapping) and body.get("message"):
        messages = [str(body["message"])]
    text = "; ".join(messages) or str(getattr(exc, "code", "") or "no message")
    return " ".join(text.split())[:400]


def _connection_reason(exc: Exception, timeout: float) -> tuple[str, bool]:
    """``(one-line reason, whether it is a failure to connect)`` for a sushy ``ConnectionError``."""
    cause = exc.__context__
    if isinstance(cause, _requests().ConnectTimeout):
        return f"no connection within {timeout:g} s", True
    if isinstance(cause, _requests().Timeout):
        return f"no answer within {timeout:g} s", False
    if isinstance(cause, _requests().exceptions.SSLError):
        return "TLS error (check redfish.verify_tls)", False
    text = str(cause or exc)
    if "Connection refused" in text:
        return "cannot connect: connection refused", True
    if "NewConnectionError" in text or "Name or service not known" in text:
        return "cannot connect", True
    return "connection failed: " + " ".join(text.split())[:200], False


class Bmc:
    """One BMC's Redfish service, opened with sushy on first use, its failures turned into one line.

    ``address`` is the BMC base URL; ``username``/``password`` go to sushy only (``repr`` shows
    neither); ``verify`` is sushy's (bool or CA file); ``timeout`` seconds bound each answer.
    Retries follow :class:`RetryPolicy`: a failure to connect and a 5xx are retried (sushy's own
    retries are turned down to its minimum); a timeout is not.
    """

    def __init__(self, address: str, username: str, password: str, *, verify: bool | str = True,
                 timeout: float = DEFAULT_TIMEOUT, retry: RetryPolicy | None = None) -> None:
        self.address = address
        self._username = username
        self._password = password
        self.verify = verify
        self.timeout = timeout
        self.retry = retry or RetryPolicy(retries=2, backoff=0.5, backoff_max=5.0)
        self._root: Any = None
        #: sushy's session-or-basic authentication of :attr:`root`, held here so :meth:`close` can log
        #: out through sushy's public API (``AuthBase.close``).
        self._auth: sushy.auth.AuthBase | None = None

    def __repr__(self) -> str:
        return f"Bmc(address={self.address!r})"

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` (sushy calls) with the retries; raise ``ProviderError`` (``ProviderNotFound`` for
        404) as ``BMC <address>: <what>: <reason>``."""
        def retryable(exc: BaseException) -> bool:
            if isinstance(exc, _sushy().exceptions.ServerSideError):
                return True
            return isinstance(exc, _sushy().exceptions.ConnectionError) and _connection_reason(exc, self.timeout)[1]

        where = f"BMC {self.address}: {what}"
        try:
            return self.retry.run(fn, what=where, retry_on_exception=retryable)
        except _sushy().exceptions.AccessError as exc:
            raise ProviderError(f"{where}: {exc.status_code} access denied: {_detail(exc)} "
                                "(check redfish.username and the password)", status=exc.status_code) from None
        except _sushy().exceptions.ResourceNotFoundError as exc:
            raise ProviderNotFound(f"{where}: 404 not found: {_detail(exc)}", status=404) from None
        except _sushy().exceptions.HTTPError as exc:
            raise ProviderError(f"{where}: {exc.status_code}: {_detail(exc)}", status=exc.status_code) from None
        except _sushy().exceptions.ConnectionError as exc:
            raise ProviderError(f"{where}: {_connection_reason(exc, self.timeout)[0]}") from None
        except _sushy().exceptions.SushyError as exc:
            raise ProviderError(f"{where}: {' '.join(str(exc).split())[:300]}") from None

    @property
    def root(self) -> Any:
        """The ``sushy.Sushy`` service root (connects on first use)."""
        if self._root is None:
            self._auth = _sushy().auth.SessionOrBasicAuth(username=self._username, password=self._password)
            self._root = self.call("service root", lambda: _sushy().Sushy(
                self.address, auth=self._auth, verify=self.verify,
                server_side_retries=1, server_side_retries_delay=0, read_timeout=self.timeout,
                connect_timeout=self.timeout))
        return self._root

    def system(self, path: str | None, node: str) -> Any:
        """The ``ComputerSystem`` at ``path`` (a member path or id), or the BMC's only one."""
        root = self.root
        if path is None:
            members = self.call("GET Systems", lambda: root.get_system_collection().members_identities)
            if len(members) != 1:
                listed = ", ".join(members) or "none"
                raise InputError(f"node {node}: the BMC at {self.address} has {len(members)} systems "
                                 f"({listed}): set redfish.system")
            path = members[0]
        elif not path.startswith("/"):
            path = SYSTEMS + path
        return self.call(f"GET {path}", lambda: root.get_system(path))

    def close(self) -> None:
        """Log out of the BMC's session, if sushy opened one."""
        auth, self._auth, self._root = self._auth, None, None
        if auth is not None:
            try:
                auth.close()
            except Exception as exc:  # any error: closing must not hide the command's outcome
                log.debug("BMC %s: closing the session: %s", self.address, type(exc).__name__)


def _members(collection: Callable[[], Any]) -> list[Any]:
    """The members of the sushy ``VirtualMedia`` collection ``collection()`` returns (both GETs here)."""
    return list(collection().get_members())


def _power(system: Any) -> str:
    state = system.power_state
    return str(getattr(state, "value", state) or "unknown")


def _value(v: Any) -> str | None:
    return None if v is None else str(getattr(v, "value", v))


class SecureBootRefused(InputError):
    """A node's firmware has Secure Boot on, but its boot cannot run under it (exit 2, before any power
    action; names the node and what to set)."""


class HttpBootRefused(InputError):
    """A ``boot_source: http`` node's BMC offers no UEFI HTTP boot override (exit 2, before any power
    action; names the node and what to set)."""


#: The ``boot_source`` values that boot the node's boot image (``/iso/<node>.iso``): as the BMC's virtual
#: CD, or the firmware's UEFI HTTP boot of its URL.
IMAGE_BOOTS = ("virtual-media", "http")


@dataclass(frozen=True)
class System:
    """A node's machine at its BMC: the BMC client and the sushy ``ComputerSystem`` in it."""

    bmc: Bmc
    system: Any


class Redfish(BmcProvider[RedfishSettings, System]):
    """The ``redfish`` provider: one BMC ``ComputerSystem`` per node (see the module docstring); the
    power-off flow, ``poll`` and ``devices`` are the BMC family's
    (:class:`~bootserver.providers.bmc.BmcProvider`)."""

    name = "redfish"
    options_title = "Redfish (provider redfish)"
    soft_off_name = "graceful shutdown"
    hard_off_name = "ForceOff"
    hard_off_done = "forced off"
    hard_off_timeout = FORCE_OFF_TIMEOUT

    def __init__(self, config: Config, options: BmcOptions, urls: Urls) -> None:
        super().__init__(config, options, urls)
        self._bmcs: dict[tuple[str, str | None], Bmc] = {}

    def prepare(self) -> None:
        """sushy logs its own view of every failure; ours is the one line the command prints."""
        logging.getLogger("sushy").setLevel(logging.NOTSET if log.isEnabledFor(logging.DEBUG) else logging.CRITICAL)

    def close(self) -> None:
        """Log out of every BMC session."""
        for bmc in self._bmcs.values():
            bmc.close()
        self._bmcs.clear()

    # -- settings

    def _verify(self, node: ResolvedNode, s: RedfishSettings) -> bool | str:
        if s.verify_tls is None or isinstance(s.verify_tls, bool):
            return s.verify_tls is not False
        path = self.config.resolve_path(s.verify_tls)
        if not Path(path).is_file():
            raise InputError(f"node {node.name}: redfish.verify_tls: no CA file {path}")
        return str(path)

    def bmc(self, node: ResolvedNode) -> tuple[Bmc, RedfishSettings]:
        """The node's BMC client (shared by the nodes of one BMC and user) and its settings."""
        s = self.settings(node)
        address, username = s.address, s.username
        assert address is not None and username is not None  # self.settings() checked both
        key = (address, username)
        if key not in self._bmcs:
            password = self.password(node)
            self._bmcs[key] = Bmc(address, username, password, verify=self._verify(node, s),
                                  timeout=s.timeout or DEFAULT_TIMEOUT)
        return self._bmcs[key], s

    # -- records

    def record(self, bmc: Bmc, system: Any) -> dict[str, Any]:
        """The node state's ``device`` member: ``{"provider": "redfish", "id": <system path>,
        "address", "system", "uuid", "state": <power state>, "boot": {"target", "enabled", "mode"},
        "macs": [..], "updated_at"}``."""
        members = bmc.call(f"GET {system.path}/EthernetInterfaces",
                           lambda: system.ethernet_interfaces.get_members())
        macs = sorted({str(e.mac_address).lower() for e in members if e.mac_address})
        boot = system.boot
        return {
            "provider": self.name,
            "id": system.path,
            "address": bmc.address,
            "system": system.path,
            "uuid": system.uuid,
            "state": _power(system),
            "boot": {"target": _value(boot.target), "enabled": _value(boot.enabled), "mode": _value(boot.mode)},
            "macs": macs,
            "updated_at": now(),
        }

    def line(self, node: ResolvedNode, device: Mapping[str, Any]) -> str:
        """``node system power-state mac,mac,...``."""
        return f"{node.name} {device['id']} {device['state']} {','.join(device.get('macs') or ()) or '-'}"

    # -- commands

    def provision(self, nodes: Sequence[ResolvedNode], recorded: Mapping[str, Mapping[str, Any]],
                  record: Callable[[str, dict[str, Any]], None],
                  say: Callable[[str, str], None]) -> list[Outcome]:
        """Boot each node's system from the network once: override ``Pxe``/``Once``, then power on or
        ``ForceRestart``; with ``boot_source: virtual-media`` from its boot image instead (eject, insert
        the signed image URL, override ``Cd``/``Once``). Settings of every node, and the boot network of
        each virtual-media node's image, are checked before any BMC is asked."""
        for node in nodes:
            if self.settings(node).boot_source in IMAGE_BOOTS and not node.secure_boot:
                # exit 2 naming the node and key, before any BMC call
                boot_network(self.config.source, node)
        systems = {}
        for node in nodes:  # every node's Secure Boot is read before any power action (on any node)
            bmc, s = self.bmc(node)
            system = bmc.system(s.system, node.name)
            self._check_secure_boot(node, s, system, self.secure_boot(bmc, system))
            if s.boot_source == "http":
                self._check_http_boot(node, bmc, system)
            systems[node.name] = system
        out = []
        for node in nodes:
            bmc, s = self.bmc(node)
            system = systems[node.name]
            sushy = _sushy()
            mode = {"uefi": sushy.BOOT_SOURCE_MODE_UEFI, "legacy": sushy.BOOT_SOURCE_MODE_BIOS}.get(s.boot_mode or "")
            media = uri = None
            target, source = sushy.BOOT_SOURCE_TARGET_PXE, "the network"
            if s.boot_source == "http":
                uri = self.urls.iso(node.name)
                target, source = sushy.BOOT_SOURCE_TARGET_UEFI_HTTP, "UEFI HTTP boot of its boot image"
            elif s.boot_source == "virtual-media":
                media = self._virtual_cd(bmc, system)
                self._eject(bmc, media, node, say)
                url = self.urls.iso(node.name)
                bmc.call(f"POST {media.path} InsertMedia", partial(
                    media.insert_media, url, inserted=True, write_protected=True))
                target, source = _sushy().BOOT_SOURCE_TARGET_CD, f"its boot image in {media.path}"
            bmc.call(f"PATCH {system.path} Boot", partial(
                system.set_system_boot_options, target, enabled=sushy.BOOT_SOURCE_ENABLED_ONCE, mode=mode,
                http_boot_uri=uri))
            power = _power(system)
            reset = _sushy().RESET_FORCE_RESTART if power == "On" else _sushy().RESET_ON
            bmc.call(f"POST {system.path} Reset {reset.value}", partial(system.reset_system, reset))
            say(node.name, f"{system.path}: next boot from {source} (once); {reset.value} (was {power})")
            bmc.call(f"GET {system.path}", partial(system.refresh, force=True))
            device = self.record(bmc, system)
            if media is not None:
                device["media"] = media.path
            self._check_macs(node, device)
            record(node.name, device)
            out.append(Outcome(node.name, device, self.line(node, device)))
        return out

    def secure_boot(self, bmc: Bmc, system: Any) -> bool | None:
        """Whether UEFI Secure Boot is on in ``system``'s firmware: its ``SecureBoot`` resource's
        ``SecureBootEnable`` (Redfish ``#SecureBoot.v1_0_0``, DSP2046), read through sushy; ``None`` when
        the BMC offers no such resource. Raises ``ProviderError`` when the BMC fails."""
        if not (system.json or {}).get("SecureBoot"):
            return None
        try:
            resource = bmc.call(f"GET {system.path}/SecureBoot", lambda: system.secure_boot)
        except ProviderNotFound:
            return None
        return None if resource.enabled is None else bool(resource.enabled)

    def _check_secure_boot(self, node: ResolvedNode, s: RedfishSettings, system: Any, enabled: bool | None) -> None:
        """Raise :class:`SecureBootRefused` (exit 2) naming ``node`` and what to set when Secure Boot is
        on (``enabled``) but the node's boot cannot run under it: the network boot (iPXE and the GRUB we
        build are not signed), or a boot image that is not the Secure Boot one (``secure_boot``)."""
        if not enabled:
            return
        if s.boot_source not in IMAGE_BOOTS:
            raise SecureBootRefused(
                f"node {node.name}: Secure Boot is on in {system.path}, and its boot from the network (our iPXE) is "
                "not signed: set redfish.boot_source: virtual-media and secure_boot: true (the release's signed "
                "shim, GRUB and kernel), or turn Secure Boot off")
        if not node.secure_boot:
            raise SecureBootRefused(
                f"node {node.name}: Secure Boot is on in {system.path}, and its boot image is not the Secure Boot one: "
                "set secure_boot: true (the release's signed shim, GRUB and kernel), or turn Secure Boot off")

    def _check_http_boot(self, node: ResolvedNode, bmc: Bmc, system: Any) -> None:
        """Raise :class:`HttpBootRefused` (exit 2) naming ``node`` when ``system`` offers no UEFI HTTP boot
        override (``UefiHttp`` not among ``BootSourceOverrideTarget@Redfish.AllowableValues``: an older
        BMC, or the system in legacy boot mode)."""
        allowed = bmc.call(f"GET {system.path}", system.get_allowed_system_boot_source_values)
        if _sushy().BOOT_SOURCE_TARGET_UEFI_HTTP not in allowed:
            names = ", ".join(sorted(str(getattr(a, "value", a)) for a in allowed)) or "none"
            raise HttpBootRefused(f"node {node.name}: {system.path} offers no UEFI HTTP boot (UefiHttp is not among "
                                  f"its boot override targets: {names}): set redfish.boot_source: virtual-media or "
                                  "pxe, or boot_mode: uefi")

    def _virtual_cd(self, bmc: Bmc, system: Any) -> Any:
        """The CD/DVD member of the ``VirtualMedia`` collection of the system's manager (``Links.ManagedBy``),
        else of the system's own collection (newer BMCs). Raises ``ProviderError`` when there is none."""
        wanted = {"CD", "DVD"}
        collections = []
        try:
            managers = bmc.call(f"GET {system.path} managers", lambda: system.managers)
        except ProviderError as exc:  # no Links.ManagedBy: the system's own collection may still do
            log.debug("%s", exc)
            managers = []
        for manager in managers:
            collections.append((manager.path, partial(getattr, manager, "virtual_media")))
        collections.append((system.path, partial(getattr, system, "virtual_media")))
        for owner, collection in collections:
            try:
                members = bmc.call(f"GET {owner} VirtualMedia", partial(_members, collection))
            except ProviderError as exc:
                if exc.status is not None and exc.status != 404:
                    raise
                log.debug("%s", exc)
                continue
            for media in members:
                if wanted & {str(getattr(t, "value", t)).upper() for t in media.media_types or ()}:
                    return media
        raise ProviderError(f"BMC {bmc.address}: {system.path}: no CD or DVD virtual media in the VirtualMedia "
                            "of its managers or of the system")

    def _eject(self, bmc: Bmc, media: Any, node: ResolvedNode, say: Callable[[str, str], None]) -> None:
        """``VirtualMedia.EjectMedia`` when ``media`` holds an image (refreshed first)."""
        bmc.call(f"GET {media.path}", partial(media.refresh, force=True))
        if media.inserted or media.image:
            image = str(media.image or "").split("?")[0]
            bmc.call(f"POST {media.path} EjectMedia", media.eject_media)
            say(node.name, f"{media.path}: ejected {image or 'the inserted media'}")

    def booted(self, node: ResolvedNode, device: Mapping[str, Any],
               say: Callable[[str, str], None]) -> dict[str, Any] | None:
        """With ``virtual-media``: eject the boot image once the node's network boot is over, so no later
        reboot boots it by accident. Returns the record without its ``media``."""
        if not device.get("media"):
            return None
        bmc, s = self.bmc(node)
        system = bmc.system(device.get("id") or s.system, node.name)
        self._eject(bmc, self._virtual_cd(bmc, system), node, say)
        return {k: v for k, v in device.items() if k != "media"}

    def _check_macs(self, node: ResolvedNode, device: Mapping[str, Any]) -> None:
        macs = node.mac
        if macs and device["macs"] and not set(macs) & set(device["macs"]):
            log.warning("node %s: none of the system's MACs (%s) is in nodes.%s.mac: /boot.ipxe?mac= will "
                        "not find it", node.name, ", ".join(device["macs"]), node.name)

    # -- the BMC family's steps

    def machine(self, node: ResolvedNode, device: Mapping[str, Any]) -> System:
        """The node's system: the one recorded (``device``'s ``id``), else ``redfish.system``, else the
        BMC's only one."""
        bmc, s = self.bmc(node)
        return System(bmc, bmc.system(device.get("id") or s.system, node.name))

    def machine_id(self, machine: System) -> str:
        return str(machine.system.path)

    def power_state(self, machine: System, *, fresh: bool = False) -> str:
        """The system's ``PowerState``; ``fresh``: GET the system again first."""
        if fresh:
            machine.bmc.call(f"GET {machine.system.path}", partial(machine.system.refresh, force=True))
        return _power(machine.system)

    def soft_off(self, machine: System) -> bool:
        """``Reset GracefulShutdown``, when the system's allowed reset values have it."""
        bmc, system = machine.bmc, machine.system
        allowed = bmc.call(f"GET {system.path} reset values", system.get_allowed_reset_system_values)
        if _sushy().RESET_GRACEFUL_SHUTDOWN not in allowed:
            return False
        bmc.call(f"POST {system.path} Reset GracefulShutdown",
                 partial(system.reset_system, _sushy().RESET_GRACEFUL_SHUTDOWN))
        return True

    def hard_off(self, machine: System) -> None:
        """``Reset ForceOff``."""
        bmc, system = machine.bmc, machine.system
        bmc.call(f"POST {system.path} Reset ForceOff", partial(system.reset_system, _sushy().RESET_FORCE_OFF))

    def clear_boot(self, node: ResolvedNode, machine: System, device: Mapping[str, Any],
                   say: Callable[[str, str], None]) -> None:
        """Eject the boot image (a virtual-media node, or one whose record holds ``media``), then turn
        the boot override off (target ``None``, else ``Hdd`` on a BMC without ``None``)."""
        bmc, system = machine.bmc, machine.system
        if device.get("media") or self.settings(node).boot_source == "virtual-media":
            self._eject(bmc, self._virtual_cd(bmc, system), node, say)
        allowed_targets = bmc.call(f"GET {system.path}", system.get_allowed_system_boot_source_values)
        target = _sushy().BOOT_SOURCE_TARGET_NONE if _sushy().BOOT_SOURCE_TARGET_NONE in allowed_targets \
            else _sushy().BOOT_SOURCE_TARGET_HDD
        bmc.call(f"PATCH {system.path} Boot", partial(
            system.set_system_boot_options, target, enabled=_sushy().BOOT_SOURCE_ENABLED_DISABLED))

    def look(self, node: ResolvedNode, device: Mapping[str, Any]) -> list[str]:
        """``[system, power-state, secure-boot:on|off|-]`` (``-``: the BMC offers no ``SecureBoot``
        resource); the system is the one recorded at ``provision`` (state store), else
        ``redfish.system``, else the BMC's only one."""
        machine = self.machine(node, device)
        enabled = self.secure_boot(machine.bmc, machine.system)
        secure = "-" if enabled is None else "on" if enabled else "off"
        return [self.machine_id(machine), self.power_state(machine), f"secure-boot:{secure}"]

    def unreachable(self, node: ResolvedNode, device: Mapping[str, Any]) -> list[str]:
        return [self.settings(node).system or "-", "error", "secure-boot:-"]


PROVIDER = Redfish

__all__ = ["Bmc", "Redfish", "SecureBootRefused", "System"]
