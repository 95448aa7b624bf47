"""The Equinix Metal provider: a node's ``custom_ipxe`` device, its settings merged, its options.

Equinix Metal shut down on 2026-06-30 (it stopped selling in 2025); the provider stays for the record
and for anyone running a compatible API. A node's device is created with ``operating_system:
custom_ipxe`` and the node's signed chain URL as ``ipxe_script_url`` (or ``#!ipxe`` userdata).

Three modules make the provider: its settings (the ``metal:`` config mappings, the pydantic models
``MetalGlobal`` and ``MetalSettings`` of :mod:`bootserver.config.equinix_settings`, in the config
package, which names and checks them at load), its API client and data types
(:mod:`bootserver.providers.equinix_api`), and this module: the command-line options, the device
spec built from a node's settings (``node_settings`` merges a node's over its profile's) and the
provider's requests.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from bootserver.config import Config, ResolvedNode
from bootserver.config.equinix_settings import (
    BILLING_CYCLES,
    DEFAULT_TAG,
    MetalSettings,
    is_uuid,
)
from bootserver.config.messages import describe_error
from bootserver.errors import InputError
from bootserver.inventory import inventory
from bootserver.providers.base import (
    Outcome,
    Poll,
    ProviderError,
    ProviderNotFound,
    ProviderOptions,
    option,
)
from bootserver.providers.equinix_api import (
    FAILED_STATES,
    GONE_STATES,
    Device,
    DeviceSpec,
    EquinixMetal,
)
from bootserver.providers.interface import Provider
from bootserver.urls import Urls

log = logging.getLogger(__name__)



# ------------------------------------------------------------------------------------------- config


def settings_from_options(**options: Any) -> MetalSettings:
    """``MetalSettings`` from ``bootserver provision``'s command-line options (``plan``, ``metro``, ...:
    the ``MetalSettings`` keys; ``None`` for an option not given), checked like the config keys.
    Raises ``InputError`` (exit 2) naming the option, e.g. ``--plan: must not contain whitespace: ...``."""
    try:
        return MetalSettings(**options)
    except ValidationError as e:
        key, message = describe_error(e.errors()[0])
        option = key.split(".")[0].split("[")[0].replace("_", "-")
        raise InputError(f"--{option}: {message}") from None


def node_settings(node: ResolvedNode) -> MetalSettings:
    """The merged ``metal:`` settings of a node of the Equinix provider (as resolved: the node's mapping
    over its profile's, both checked at config load). ``always_pxe`` defaults to true when the node boots
    once (an installed node then gets the boot-disk script on every PXE boot, and ``bootserver nodes
    reinstall`` reinstalls it without touching the device)."""
    merged: MetalSettings = node.settings if node.provider == "equinix" else MetalSettings()
    if merged.always_pxe is None and node.boots_once:
        merged = merged.model_copy(update={"always_pxe": True})
    return merged


def check_project_id(project: str) -> str:
    """Return ``project`` if it is a UUID (the API's project id format), else raise ``InputError``."""
    if not is_uuid(project):
        raise InputError(f"--project: not a project UUID: {project!r}")
    return project


def ipxe_userdata(chain_url: str) -> str:
    """The device userdata that makes Equinix's iPXE chain to ``chain_url``:
    ``#!ipxe`` newline ``chain --autofree <url>`` newline.

    Raises ``InputError`` when the URL is not http(s) or holds whitespace, control characters or
    ``${`` (which iPXE would expand), since such a script cannot be made safe.
    """
    parts = urlsplit(chain_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InputError(f"chain URL is not an http(s) URL: {chain_url!r}")
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in chain_url) or "${" in chain_url:
        raise InputError(f"chain URL cannot be put in an iPXE script: {chain_url!r}")
    return f"#!ipxe\nchain --autofree {chain_url}\n"


def build_device_spec(
    hostname: str,
    settings: MetalSettings,
    chain_url: str,
    *,
    via: str = "ipxe_script_url",
    managed_tag: str = DEFAULT_TAG,
    node: str | None = None,
) -> DeviceSpec:
    """Build the ``DeviceSpec`` of a node from its merged settings and its signed chain URL.

    ``via`` is ``ipxe_script_url`` (the device's iPXE fetches ``chain_url`` as its script) or
    ``userdata`` (``ipxe_userdata(chain_url)``). Tags are ``managed_tag`` first, then the settings'
    tags (duplicates dropped). ``operating_system`` is always ``custom_ipxe``. ``node`` names the node
    in error messages. Raises ``InputError`` (exit 2) when no ``plan`` or no location is set, or for
    a bad ``via``.
    """
    who = f"node {node}" if node else hostname
    if not settings.plan:
        raise InputError(f"{who}: no Equinix Metal plan: set metal.plan on the node or profile, or pass --plan")
    if settings.metro is None and settings.facility is None:
        raise InputError(f"{who}: no Equinix Metal location: set metal.metro on the node or profile, or pass --metro")
    if settings.spot_price_max is not None and settings.spot_instance is not True:
        raise InputError(f"{who}: metal.spot_price_max needs metal.spot_instance: true")
    if via == "ipxe_script_url":
        script, userdata = chain_url, None
        parts = urlsplit(chain_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InputError(f"chain URL is not an http(s) URL: {chain_url!r}")
    elif via == "userdata":
        script, userdata = None, ipxe_userdata(chain_url)
    else:
        raise InputError(f"--via: must be ipxe_script_url or userdata, not {via!r}")
    tags = [managed_tag]
    for t in settings.tags or ():
        if t not in tags:
            tags.append(t)
    return DeviceSpec(
        hostname=hostname,
        plan=settings.plan,
        metro=settings.metro,
        facility=settings.facility,
        ipxe_script_url=script,
        userdata=userdata,
        billing_cycle=settings.billing_cycle or "hourly",
        tags=tuple(tags),
        always_pxe=settings.always_pxe,
        spot_instance=settings.spot_instance,
        spot_price_max=settings.spot_price_max,
        hardware_reservation_id=settings.hardware_reservation_id,
        project_ssh_keys=settings.project_ssh_keys or (),
        customdata=settings.customdata,
    )


# ------------------------------------------------------------------------------------------ provider


def find_managed_device(devices: Iterable[Device], hostname: str, tag: str) -> Device | None:
    """Return the device among ``devices`` named ``hostname`` and tagged ``tag`` (ignoring devices
    being deleted), or ``None``. Raises ``ProviderError`` when more than one matches, naming their ids."""
    matches = [d for d in devices if d.hostname == hostname and tag in d.tags and d.state not in GONE_STATES]
    if len(matches) > 1:
        ids = ", ".join(d.id for d in matches)
        raise ProviderError(f"{len(matches)} devices named {hostname!r} with tag {tag!r}: {ids}; delete the extras")
    return matches[0] if matches else None


def device_state(project: str, device: Device) -> dict[str, Any]:
    """The node state's ``device`` member for ``device``: ``{"provider": "equinix", "project", "id",
    "hostname", "state", "ip_addresses": [{"address", "address_family", "cidr", "gateway", "public"}],
    "network_ports": [{"type", "name", "data": {"mac"}, "bond": {"name"}, "network_type"}],
    "updated_at"}`` (addresses and ports in the Equinix Metal OpenAPI spec's names, ``IPAssignment``
    and ``Port``). The server can bind a node to its device's addresses from ``ip_addresses``."""
    return {
        "provider": "equinix",
        "project": project,
        "id": device.id,
        "hostname": device.hostname,
        "state": device.state,
        "ip_addresses": [a.to_json() for a in device.ip_addresses],
        "network_ports": [p.to_json() for p in device.network_ports],
        "updated_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def format_device(device: Device, node: str | None = None) -> str:
    """One line per device: ``[node ]id state addr,addr,...`` (``-`` when it has no address yet)."""
    addresses = ",".join(a.address for a in device.ip_addresses) or "-"
    head = f"{node} " if node else ""
    return f"{head}{device.id} {device.state} {addresses}"


def chained_url(device: Device) -> tuple[str, str | None]:
    """``(via, url)``: how the device's iPXE finds its script (``ipxe_script_url`` or ``userdata``)
    and the URL it chains to (``None`` when it has neither, or userdata that is not ours)."""
    if device.ipxe_script_url:
        return "ipxe_script_url", device.ipxe_script_url
    lines = (device.userdata or "").splitlines()
    if len(lines) == 2 and lines[0] == "#!ipxe" and lines[1].startswith("chain --autofree "):
        return "userdata", lines[1].split(" ", 2)[2]
    return "userdata", None


@dataclass(frozen=True)
class EquinixOptions(ProviderOptions):
    """The Equinix provider's command-line options: ``--project`` for every command; for ``provision``
    the createDevice keys that win over the node's ``metal:`` settings (``None``: not given)."""

    project: str | None = option("--project", metavar="ID",
                                 help="Equinix Metal project UUID (default: metal.project)")
    via: str = option("--via", default="ipxe_script_url", commands=("provision",),
                      choices=("ipxe_script_url", "userdata"),
                      help="hand the device its chain URL as ipxe_script_url (default) or as #!ipxe userdata")
    plan: str | None = option("--plan", commands=("provision",),
                              help="device plan, e.g. c3.small.x86 (overrides metal.plan)")
    metro: str | None = option("--metro", commands=("provision",), exclusive="location",
                               help="metro code, e.g. da (overrides metal.metro)")
    facility: str | None = option("--facility", commands=("provision",), exclusive="location",
                                  help="Equinix facility code (deprecated by Equinix; prefer --metro)")
    billing_cycle: str | None = option("--billing-cycle", commands=("provision",), choices=BILLING_CYCLES)
    tags: tuple[str, ...] = option("--tag", default=(), commands=("provision",), repeatable=True,
                                   metavar="TAG", help="extra device tag (repeatable)")
    spot_price_max: float | None = option("--spot-price-max", commands=("provision",), parse=float,
                                          metavar="USD", help="make a spot instance bidding at most USD per hour")
    hardware_reservation_id: str | None = option("--hardware-reservation-id", commands=("provision",),
                                                 metavar="ID", help="a reservation UUID or next-available")
    always_pxe: bool | None = option("--always-pxe", commands=("provision",), negatable=True,
                                     help="boot iPXE on every boot, not only the first")


class Equinix(Provider[EquinixOptions]):
    """The ``equinix`` provider: one ``custom_ipxe`` device per node, named by the node's hostname and
    tagged ``metal.tag``, chaining to the node's signed chain URL.

    ``provision`` reuses the project's device with the node's hostname and tag, or creates one; a
    reused device whose chain URL is no longer current (another server URL, a key rotated by ``keys
    rotate``, less than half of ``server.signing.chain_ttl`` left) is re-pointed with ``PUT
    /devices/{id}``. ``deprovision`` deletes the device. ``devices`` lists the project's tagged devices.
    """

    name = "equinix"
    options_type = EquinixOptions
    options_title = "Equinix Metal (provider equinix)"

    def __init__(self, config: Config, options: EquinixOptions, client: EquinixMetal, urls: Urls) -> None:
        self.config = config
        self.options = options
        self.client = client
        self.tag = config.metal.tag
        self.urls = urls
        #: the config's nodes, resolved once (their hostname, merged settings)
        self.inventory = inventory(config)

    @classmethod
    def used_by(cls, config: Config, options: EquinixOptions) -> bool:
        """Asked by ``devices`` when a project is known or a node is an Equinix node."""
        return bool(options.project or config.metal.project) or super().used_by(config, options)

    @classmethod
    def open(cls, config: Config, options: EquinixOptions, urls: Urls) -> Equinix:
        """A client from ``METAL_AUTH_TOKEN`` / ``METAL_API_URL`` / ``metal.api_url``. Checks the
        command's options first (exit 2 before any call). Raises ``MissingTokenError``."""
        if options.spot_price_max is not None and not options.spot_price_max >= 0:
            raise InputError(f"--spot-price-max: must not be negative, got {options.spot_price_max:g}")
        if options.project:
            check_project_id(options.project)
        return cls(config, options, EquinixMetal.from_env(config.metal.api_url), urls)

    def close(self) -> None:
        """Close the API session."""
        self.client.close()

    def _project(self, recorded: Mapping[str, Any] | None = None) -> str:
        project = self.options.project or self.config.metal.project or (recorded or {}).get("project")
        if project is None:
            raise InputError("no Equinix Metal project: pass --project ID or set metal.project in the config")
        return check_project_id(project)

    def _specs(self, nodes: Sequence[ResolvedNode]) -> list[tuple[ResolvedNode, DeviceSpec]]:
        opts = self.options
        overrides = settings_from_options(
            plan=opts.plan, metro=opts.metro, facility=opts.facility, billing_cycle=opts.billing_cycle,
            spot_instance=True if opts.spot_price_max is not None else None,
            spot_price_max=opts.spot_price_max, hardware_reservation_id=opts.hardware_reservation_id,
            always_pxe=opts.always_pxe,
        )
        out = []
        for node in nodes:
            settings = overrides.merged_over(node_settings(node))
            if opts.tags:
                settings = settings.model_copy(update={"tags": (*(settings.tags or ()), *opts.tags)})
            out.append((node, build_device_spec(node.hostname, settings, self.urls.chain(node.name),
                                                via=opts.via, managed_tag=self.tag, node=node.name)))
        return out

    def provision(self, nodes: Sequence[ResolvedNode], recorded: Mapping[str, Mapping[str, Any]],
                  record: Callable[[str, dict[str, Any]], None],
                  say: Callable[[str, str], None]) -> list[Outcome]:
        """Create or reuse (and re-point) one device per node; every option is checked first."""
        project = self._project()
        specs = self._specs(nodes)
        existing = self.client.list(project, tag=self.tag)
        out = []
        for node, spec in specs:
            device = find_managed_device(existing, spec.hostname, self.tag)
            if device is None:
                device = self.client.create(project, spec)
                existing.append(device)
                say(node.name, f"created device {device.id} ({device.state})")
            else:
                say(node.name, f"reusing device {device.id} ({device.state})")
                device = self._repoint(node.name, device, spec)
            state = device_state(project, device)
            record(node.name, state)
            out.append(Outcome(node.name, state, self.line(node, state)))
        return out

    def _repoint(self, node: str, device: Device, spec: DeviceSpec) -> Device:
        """``PUT /devices/{id}`` with the node's chain URL when the device's is not current (or is
        handed over the other way, ``--via``)."""
        via, url = chained_url(device)
        wanted = "userdata" if spec.userdata is not None else "ipxe_script_url"
        if via == wanted and url is not None and self.urls.chain_is_current(node, url):
            return device
        log.info("node %s: device %s chains to an old URL; re-pointing it", node, device.id)
        updated = self.client.update(device.id, ipxe_script_url=spec.ipxe_script_url, userdata=spec.userdata)
        return updated

    def poll(self, node: ResolvedNode, device: Mapping[str, Any]) -> Poll:
        """``GET /devices/{id}``; ``failed`` ends the wait. A device gone (404) is an error."""
        try:
            current = self.client.get(device["id"])
        except ProviderNotFound:
            raise ProviderError(f"device {device['id']} disappeared while waiting for it") from None
        return Poll(current.state, device_state(device.get("project", ""), current),
                    failed=current.state in FAILED_STATES)

    def line(self, node: ResolvedNode, device: Mapping[str, Any]) -> str:
        """``node id state addr,addr,...``."""
        addresses = ",".join(a["address"] for a in device.get("ip_addresses") or ()) or "-"
        return f"{node.name} {device['id']} {device['state']} {addresses}"

    def deprovision(self, nodes: Sequence[ResolvedNode], recorded: Mapping[str, Mapping[str, Any]],
                    say: Callable[[str, str], None]) -> list[Outcome]:
        """Delete each node's device: the project's device with its hostname and tag, else the one
        recorded. A device the API no longer knows (404) counts as gone."""
        listed: dict[str, list[Device]] = {}
        out = []
        for node in nodes:
            rec = recorded.get(node.name) or {}
            project = self._project(rec)
            if project not in listed:
                listed[project] = self.client.list(project, tag=self.tag)
            device = find_managed_device(listed[project], node.hostname, self.tag)
            device_id = device.id if device else rec.get("id")
            deleted = False
            if device_id:
                try:
                    self.client.delete(device_id)
                    deleted = True
                    say(node.name, f"deleted device {device_id}")
                except ProviderNotFound:
                    say(node.name, f"device {device_id} was already gone")
            else:
                say(node.name, "no device")
            out.append(Outcome(node.name, None, f"{node.name} {device_id or '-'} {'deleted' if deleted else 'absent'}"))
        return out

    def devices(self, stages: Mapping[str, str], recorded: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """``hostname id state addresses node`` for each device of the project with ``metal.tag``: the
        project of ``--project``, else ``metal.project``, else the one of this config's Equinix devices
        recorded in the state store (``provision --project`` through another replica's config)."""
        projects = [d.get("project") for n, d in recorded.items()
                    if n in self.inventory and d.get("provider", "equinix") == self.name and d.get("project")]
        project = self._project({"project": projects[0]} if projects else None)
        by_hostname = {n.hostname: name for name, n in self.inventory.items()}
        devices = self.client.list(project, tag=self.tag)
        return [f"{format_device(d, d.hostname)} {by_hostname.get(d.hostname, '-')}"
                for d in sorted(devices, key=lambda d: (d.hostname, d.id))]


PROVIDER = Equinix

__all__ = [
    "Equinix",
    "EquinixOptions",
    "build_device_spec",
    "check_project_id",
    "device_state",
    "find_managed_device",
    "ipxe_userdata",
    "node_settings",
    "settings_from_options",
]
