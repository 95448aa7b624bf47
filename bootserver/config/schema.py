"""The config schema: one settings model per mapping of the YAML file, and :class:`Config`, the loaded
whole.

The keys are the user contract (README.md, "Configuration reference", and docs/config.md). A feature or
provider that owns settings keeps their model in a module of its own below this one (as
:mod:`bootserver.config.equinix_settings` and :mod:`bootserver.config.redfish_settings` do), built
on :class:`~bootserver.values.SettingsModel` and the value types, and adds one field here. Components
take the narrow model they use (``config.server``, ``config.metal``), not the whole :class:`Config`,
where they can.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Any, Literal

import platformdirs
from pydantic import BeforeValidator, Field, ValidationInfo, field_validator

from ..errors import ConfigError
from ..ignition_schema import SPEC_VERSIONS
from ..ipxe import UnsafeValueError
from ..kargs import check_agent_karg, check_extra_karg
from ..nmstate import NetworkSetting
from ..values import (
    UUID_RE,
    ByteRate,
    Duration,
    Hostname,
    HttpUrl,
    Name,
    Networks,
    OneOrList,
    ScriptWord,
    SettingsModel,
    YamlList,
    null_as_empty,
    one_per_family,
    unicast_mac,
    url_for_family,
)
from .dhcp import DhcpSettings
from .equinix_settings import MetalGlobal, MetalSettings
from .ipmi_settings import IpmiField, IpmiSettings
from .providers import REGISTRY
from .redfish_settings import RedfishField, RedfishSettings
from .server import ServerConfig
from .state import StateStoreField, StateStoreSettings, TimelineSettings

#: Default stream of the embedded config: Fedora CoreOS ``stable``, from its official stream URL.
FCOS_STABLE_URL = "https://builds.coreos.fedoraproject.org/streams/stable.json"

#: The Ignition spec versions a stub can be written in (3.1.0 is the oldest with sha512/sha256
#: verification hashes and httpHeaders; RHCOS 4.7+ accepts 3.2.0, 4.14+ also 3.4.0): those whose
#: official schema ships with bootserver.
IGNITION_VERSIONS = SPEC_VERSIONS

#: Architectures with a serial console we know on Equinix Metal (c3/m3/n3 x86_64, Ampere aarch64).
ARCHITECTURES = ("x86_64", "aarch64")

_MetalSettingsField = Annotated[MetalSettings, BeforeValidator(null_as_empty)]

#: A provider name (``profiles.<p>.provider``, ``nodes.<n>.provider``): a key of the providers' registry.
if TYPE_CHECKING:  # a Literal built from the registry at run time; the type checker sees a string
    ProviderName = str
else:
    ProviderName = Literal[tuple(REGISTRY)]


class UpstreamConfig(SettingsModel):
    """``upstream``: how patiently stream metadata and artifacts are fetched (server and ``sync-images``)."""

    #: Seconds to wait for the next bytes from an upstream source before the attempt fails (the
    #: next source is tried, then the whole chain again); not a limit on a whole transfer.
    read_timeout: Annotated[Duration, Field(ge=1, le=3600)] = 60
    #: An OpenPGP keyring file (armored or binary) whose keys artifact signatures must be made by;
    #: unset: Fedora's keys as coreos-installer ships them (bootserver.artifacts.openpgp).
    signature_keys: str | None = None


class StreamConfig(SettingsModel):
    """``streams.<name>``: a CoreOS stream metadata URL or file path and the architectures we serve."""

    metadata: str
    architectures: YamlList[Literal["x86_64", "aarch64"]] = ("x86_64",)
    #: ``sync-images --prune`` keeps this many newest releases per architecture (at least 1).
    keep_releases: Annotated[int, Field(ge=1)] = 2
    #: Check each artifact's OpenPGP ``signature`` while it streams; unset: where the stream carries
    #: signatures (FCOS); ``true`` also refuses an artifact without one; ``false``: sha256 only.
    verify_signatures: bool | None = None
    #: Its artifacts go only to the nodes of its profiles, on URLs signed per node, and are kept below
    #: ``cache_dir/private/`` (an OpenShift agent release: its initrd holds the cluster's secrets).
    private: bool = False

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: str) -> str:
        scheme, sep, _ = value.partition("://")
        if sep and scheme.isalnum() and scheme.lower() not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme {scheme!r}: use an http(s) URL or a file path, got {value!r}")
        return value

    @property
    def is_url(self) -> bool:
        """True when ``metadata`` is an http(s) URL rather than a file path."""
        return self.metadata.lower().startswith(("http://", "https://"))


class FacilityConfig(SettingsModel):
    """``facilities.<name>``: the facility's own cache server and its upstream mirrors. ``base_url``
    takes one URL or a list, one per address family as ``server.base_url``: a node in the facility
    fetches its artifacts from the one of the family it asked from (:meth:`base_url_for`)."""

    base_url: OneOrList[HttpUrl] | None = None
    mirrors: YamlList[HttpUrl] = ()

    @field_validator("base_url")
    @classmethod
    def _base_urls(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return one_per_family(value)

    def base_url_for(self, family: int | None) -> str | None:
        """The facility's base URL for a machine asking over address family ``family`` (``4``, ``6``,
        ``None``: not known), chosen as ``server.base_url``'s (:func:`~bootserver.values.url_for_family`);
        ``None`` without ``base_url``."""
        return url_for_family(self.base_url, family) if self.base_url else None


class Profile(SettingsModel):
    """``profiles.<name>``: what a node boots (stream, arch), how (install or live) and with what config."""

    stream: str
    arch: Literal["x86_64", "aarch64"] = "x86_64"
    #: ``install``, ``live``, or ``agent``: the stream's kernel and initramfs with the profile's ``kargs``
    #: exactly (an OpenShift agent's PXE files: its own Ignition is inside the initramfs; no stub from us).
    mode: Literal["install", "live", "agent"] = "install"
    install_dev: ScriptWord | None = None
    ignition: str | None = None
    ignition_version: Literal["3.1.0", "3.2.0", "3.3.0", "3.4.0", "3.5.0"] = "3.2.0"
    kargs: YamlList[str] = ()
    console: ScriptWord | None = None
    #: ``ignition.platform.id`` / ``coreos.inst.platform_id``; unset: the provider's (docs/design.md, rule 4).
    platform_id: Literal["packet", "metal"] | None = None
    provider: ProviderName | None = None
    metal: _MetalSettingsField = Field(default_factory=MetalSettings)
    redfish: RedfishField = Field(default_factory=RedfishSettings)
    ipmi: IpmiField = Field(default_factory=IpmiSettings)
    boot_once: bool | None = None
    #: Whether the node's stub carries the check-in unit (``bootserver-checkin.service``): the booted
    #: system calls its signed check-in URL once on the network, stage ``up`` (bootserver.timeline).
    checkin: bool = True
    #: ``dhcp``, ``provider`` or an NMState document: the default of the profile's nodes (bootserver.network).
    network: NetworkSetting | None = None
    #: The node's boot image (``bootserver iso``, ``/iso/<node>.iso``) boots the release's own signed
    #: chain (shim, GRUB, kernel from its live ISO) so UEFI Secure Boot accepts it (bootserver.images.secureboot).
    secure_boot: bool = False
    #: Bytes per second the artifacts of this profile's nodes are sent at (``server.artifact_rate`` when unset).
    artifact_rate: ByteRate | None = None

    @property
    def boots_once(self) -> bool:
        """Whether an installed node boots its local disk instead of reinstalling (``boot_once``;
        default true in install and agent mode; never in live mode)."""
        disk = self.mode in ("install", "agent")
        return disk if self.boot_once is None else self.boot_once and disk

    @field_validator("kargs")
    @classmethod
    def _kargs(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        agent = info.data.get("mode") == "agent"
        for i, karg in enumerate(value):
            try:
                check_agent_karg(karg) if agent else check_extra_karg(karg)
            except UnsafeValueError as e:
                raise ValueError(f"item {i}: {e}") from None
        return value


class Node(SettingsModel):
    """``nodes.<name>``: one machine: its profile, facility and the selectors of ``/boot.ipxe``.

    ``addresses`` (IPs or CIDRs) restrict who may fetch the node's script and configs; ``selectable``
    lets ``/boot.ipxe`` hand out its script to any address (otherwise only to a matching address).
    ``hostname`` is what the node calls itself (``/etc/hostname``, the Equinix device hostname); without
    it the node's name is its hostname, and must then be a valid one. ``default``: the generic entry's
    fallback (matchbox's default group), e.g. a live system any machine can boot.
    """

    profile: str
    facility: str | None = None
    mac: tuple[str, ...] = ()
    uuid: str | None = None
    hostname: Hostname | None = None
    provider: ProviderName | None = None
    metal: _MetalSettingsField = Field(default_factory=MetalSettings)
    redfish: RedfishField = Field(default_factory=RedfishSettings)
    ipmi: IpmiField = Field(default_factory=IpmiSettings)
    addresses: Networks = ()
    selectable: bool = False
    #: ``/boot.ipxe`` hands this node's script to a machine no other node is selected for (no selector,
    #: an unknown one, or a node that may not be handed out there); at most one, live mode only.
    default: bool = False
    #: ``dhcp``, ``provider`` or an NMState document (bootserver.network); default the profile's.
    network: NetworkSetting | None = None
    #: Whether the node's boot image is the Secure Boot one; default the profile's ``secure_boot``.
    secure_boot: bool | None = None

    @field_validator("mac", mode="before")
    @classmethod
    def _macs(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        if isinstance(value, int) or (isinstance(value, list) and any(isinstance(v, int) for v in value)):
            # YAML 1.1 reads an unquoted 52:54:00:12:34:56 as a base-60 integer
            raise ValueError("put MAC addresses in quotes: YAML reads an unquoted 52:54:00:12:34:56 as a number")
        if isinstance(value, list):
            return tuple(unicast_mac(v) if isinstance(v, str) else v for v in value)
        return value

    @field_validator("uuid")
    @classmethod
    def _uuid(cls, value: str | None) -> str | None:
        if value is not None and not UUID_RE.match(value):
            raise ValueError(f"not a UUID: {value!r}")
        return None if value is None else value.lower()


class Document(SettingsModel):
    """The whole YAML document, as written (paths unresolved); :class:`Config` is what the code uses."""
    server: ServerConfig = Field(default_factory=ServerConfig)
    cache_dir: str | None = None
    state_dir: str | None = None
    read_through: bool = True
    upstream: UpstreamConfig = Field(default_factory=UpstreamConfig)
    streams: dict[Name, StreamConfig] = Field(default_factory=dict)
    facilities: dict[Name, FacilityConfig] = Field(default_factory=dict)
    profiles: dict[Name, Profile] = Field(default_factory=dict)
    nodes: dict[Name, Node] = Field(default_factory=dict)
    metal: Annotated[MetalGlobal, BeforeValidator(null_as_empty)] = Field(
        default_factory=MetalGlobal)
    timeline: Annotated[TimelineSettings, BeforeValidator(null_as_empty)] = Field(
        default_factory=TimelineSettings)
    state_store: StateStoreField = None
    #: Files or globs whose ``streams``, ``profiles`` and ``nodes`` are merged in
    #: (``bootserver.config.loader.read_includes``).
    include: YamlList[str] = ()
    #: The DHCP engine (``bootserver dhcp``, :mod:`bootserver.dhcp`); off when absent.
    dhcp: DhcpSettings | None = None




#: The prefix of a file node's source (:attr:`Config.node_sources`): ``"file:" + path``.
FILE_SOURCE = "file:"
#: The source of a node of the state store's inventory (:attr:`Config.node_sources`).
STORE_SOURCE = "store"


@dataclass(frozen=True)
class Config:
    """A loaded, checked config. Immutable (a frozen dataclass of frozen models and read-only mappings).

    Attributes: ``source`` (the file name used in error messages, or ``"<default>"``), ``base_dir``
    (folder relative paths resolve against), ``server`` (:class:`ServerConfig`), ``cache_dir`` and
    ``state_dir`` (absolute :class:`~pathlib.Path`), ``read_through`` (bool: a cache miss is fetched
    from upstream), ``upstream`` (:class:`UpstreamConfig`), the mappings ``streams``, ``facilities``,
    ``profiles``, ``nodes`` (name -> model), ``metal`` (:class:`MetalGlobal`), ``timeline``
    (:class:`TimelineSettings`) and ``state_store`` (:class:`StateStoreSettings`, or ``None`` for sqlite
    in ``state_dir``), ``dhcp`` (:class:`~bootserver.config.dhcp.DhcpSettings` or ``None``),
    ``origins`` (the file each profile and node came from, see
    :func:`~bootserver.config.loader.read_includes`).
    """

    source: str
    base_dir: Path
    server: ServerConfig
    cache_dir: Path
    state_dir: Path
    read_through: bool
    upstream: UpstreamConfig
    streams: Mapping[str, StreamConfig]
    facilities: Mapping[str, FacilityConfig]
    profiles: Mapping[str, Profile]
    nodes: Mapping[str, Node]
    metal: MetalGlobal
    timeline: TimelineSettings
    state_store: StateStoreSettings | None
    #: The ``include:`` patterns of the main file, as written (relative to ``base_dir``).
    includes: tuple[str, ...] = ()
    #: Where each ``profiles``/``nodes`` entry was defined: ``"nodes.<name>"`` -> file (only when the
    #: config has ``include:``; else every entry is from ``source``).
    origins: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), repr=False, compare=False)
    #: The ``dhcp:`` mapping (:class:`~bootserver.config.dhcp.DhcpSettings`), ``None`` when absent.
    dhcp: DhcpSettings | None = None
    #: Where each node of :attr:`nodes` comes from, one entry per node (the interface the store, the
    #: fleet API and ``nodes list``'s SOURCE column read): ``"file:PATH"`` for a node of the config file
    #: or of an ``include:`` file (``PATH`` as the loader named it, ``<default>`` for the embedded
    #: default), ``"store"`` (:data:`STORE_SOURCE`) for a node of the state store's inventory.
    node_sources: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), repr=False,
                                            compare=False)

    @classmethod
    def from_document(cls, doc: Document, source: str, base_dir: Path) -> Config:
        """Build the config of a checked :class:`Document` read from ``source`` (relative paths against
        ``base_dir``; unset ``cache_dir``/``state_dir`` default to the per-user platform folders)."""
        def path(value: str | None, default: Path) -> Path:
            return _resolve(base_dir, value) if value else default

        return cls(
            source=source, base_dir=base_dir, server=doc.server,
            cache_dir=path(doc.cache_dir, platformdirs.user_cache_path("bootserver")),
            state_dir=path(doc.state_dir, platformdirs.user_state_path("bootserver")),
            read_through=doc.read_through,
            upstream=doc.upstream,
            streams=MappingProxyType(dict(doc.streams)),
            facilities=MappingProxyType(dict(doc.facilities)),
            profiles=MappingProxyType(dict(doc.profiles)),
            nodes=MappingProxyType(dict(doc.nodes)),
            metal=doc.metal,
            timeline=doc.timeline,
            state_store=doc.state_store,
            includes=doc.include,
            dhcp=doc.dhcp,
            node_sources=MappingProxyType(dict.fromkeys(doc.nodes, FILE_SOURCE + source)),
        )

    def resolve_path(self, value: str) -> Path:
        """Resolve a path from the config (``~`` expanded) against the config file's folder."""
        return _resolve(self.base_dir, value)

    def metadata_path(self, stream: str) -> Path | None:
        """The local file of ``streams.<stream>.metadata`` when it is a path, else ``None``."""
        sc = self.streams[stream]
        return None if sc.is_url else self.resolve_path(sc.metadata)

    def ignition_path(self, profile: str) -> Path | None:
        """The real Ignition config file of a profile, or ``None`` when the profile has none."""
        p = self.profiles[profile]
        return None if p.ignition is None else self.resolve_path(p.ignition)

    def admin_token(self) -> str | None:
        """The admin bearer token: the first line of ``server.admin.token_file`` without surrounding
        white space, or ``None`` when no file is set. Raises :class:`~bootserver.errors.ConfigError`
        naming ``server.admin.token_file`` when the file cannot be read or its first line is shorter
        than 16 characters."""
        name = self.server.admin.token_file
        if name is None:
            return None
        path = self.resolve_path(name)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(self.source, "server.admin.token_file",
                              f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
        token = lines[0].strip() if lines else ""
        if len(token) < 16:
            raise ConfigError(self.source, "server.admin.token_file",
                              f"{path}: the token (its first line) must be at least 16 characters "
                              "(e.g. `openssl rand -hex 32 > FILE`)")
        return token

    def tls_files(self) -> tuple[Path, Path, Path]:
        """``(cert, key, ca)`` of ``server.tls``, defaulting to ``<state_dir>/tls/server.crt``,
        ``server.key`` and ``ca.crt``. Raises ``ValueError`` when ``server.tls`` is not set."""
        tls = self.server.tls
        if tls is None:
            raise ValueError("server.tls is not set")
        d = self.state_dir / "tls"
        return (self.resolve_path(tls.cert) if tls.cert else d / "server.crt",
                self.resolve_path(tls.key) if tls.key else d / "server.key",
                self.resolve_path(tls.ca) if tls.ca else d / "ca.crt")

    def mirrors(self, facility: str | None = None) -> tuple[str, ...]:
        """Mirror base URLs of ``facility`` (default: ``server.facility``), in order; ``()`` for none."""
        facility = facility if facility is not None else self.server.facility
        if facility is None or facility not in self.facilities:
            return ()
        return self.facilities[facility].mirrors


def _resolve(base_dir: Path, value: str) -> Path:
    return (base_dir / os.path.expanduser(value)).resolve()


def default_document() -> dict[str, Any]:
    """The embedded default config: Fedora CoreOS ``stable`` on 127.0.0.1:8080, per-user dirs, and a
    default node ``fcos-live`` (live FCOS x86_64) that ``/boot.ipxe`` hands to any machine."""
    return {
        "server": {"listen": "127.0.0.1:8080"},
        "streams": {"fcos-stable": {"metadata": FCOS_STABLE_URL, "architectures": ["x86_64", "aarch64"]}},
        "profiles": {
            "fcos-live": {"stream": "fcos-stable", "arch": "x86_64", "mode": "live"},
            "fcos-live-aarch64": {"stream": "fcos-stable", "arch": "aarch64", "mode": "live"},
        },
        # something a newcomer can boot: any x86_64 machine that chains /boot.ipxe gets live FCOS
        "nodes": {"fcos-live": {"profile": "fcos-live", "default": True}},
    }
