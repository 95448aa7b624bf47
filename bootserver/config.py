"""Load and check bootserver's YAML config into typed, immutable objects.

The keys are the user contract (docs/design.md) (documented in README.md and docs/config.md): ``server``
(with ``facility``: the facility this server sits in, whose ``mirrors`` it fetches through),
``cache_dir``, ``state_dir``, ``read_through`` (default true), ``streams`` (with ``keep_releases``,
default 2), ``facilities``, ``profiles``, ``nodes``, and the Equinix Metal ``metal`` mappings (top level,
``profiles.<name>.metal``, ``nodes.<name>.metal``). Validation uses
pydantic models with ``extra="forbid"`` and ``frozen=True``; every problem becomes one
:class:`~bootserver.errors.ConfigError` reading ``<file>: <key.path>: <what is wrong>``.

This is the one place that reads config. Values that end up inside an iPXE script are checked here
(see :func:`bootserver.ipxe.check_script_word`), so a loaded config can always be rendered safely.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import types
import uuid
from pathlib import Path
from typing import Annotated, Any, Literal, Self, Union, get_args, get_origin
from urllib.parse import urlsplit

import platformdirs
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from .butane import ButaneError, is_butane, translate as translate_butane
from .errors import ConfigError
from .ipxe import UnsafeValueError, check_extra_karg, check_script_word

#: Default stream of the embedded config: Fedora CoreOS ``stable``, from its official stream URL.
FCOS_STABLE_URL = "https://builds.coreos.fedoraproject.org/streams/stable.json"

#: The Ignition spec versions a stub can be written in (3.1.0 is the oldest with sha512/sha256
#: verification hashes and httpHeaders; RHCOS 4.7+ accepts 3.2.0, 4.14+ also 3.4.0).
IGNITION_VERSIONS = ("3.1.0", "3.2.0", "3.3.0", "3.4.0", "3.5.0")

#: Architectures with a serial console we know on Equinix Metal (c3/m3/n3 x86_64, Ampere aarch64).
ARCHITECTURES = ("x86_64", "aarch64")

NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
Name = Annotated[str, StringConstraints(pattern=NAME_RE)]
MAC_RE = re.compile(r"^[0-9a-f]{2}([:-][0-9a-f]{2}){5}$", re.IGNORECASE)
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)
HOSTNAME_RE = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")


def normalize_mac(value: str) -> str:
    """Return a MAC address as lower-case, colon-separated (``52:54:00:12:34:56``).

    Accepts ``:`` or ``-`` separators in any case. Raises ``ValueError`` for anything else.
    """
    value = value.strip()
    if not MAC_RE.match(value):
        raise ValueError(f"not a MAC address: {value!r}")
    return value.lower().replace("-", ":")


def _check_http_url(value: str) -> str:
    """Check a base URL: http or https, a host, no query or fragment; return it without trailing '/'."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http:// or https:// URL, got {value!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"must not have a query or fragment: {value!r}")
    check_script_word(value)
    return value.rstrip("/")


def _list_to_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


class _YamlList:
    """``YamlList[T]``: a YAML list read into an immutable ``tuple[T, ...]`` (strict models refuse lists
    for tuple fields otherwise)."""

    def __class_getitem__(cls, item: Any) -> Any:
        return Annotated[tuple[item, ...], BeforeValidator(_list_to_tuple)]


YamlList = _YamlList


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _duration(value: Any) -> Any:
    from .signing import parse_duration

    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return parse_duration(value)
    return value


def _networks(value: Any) -> Any:
    """Normalise a list of IP addresses or CIDRs (``ipaddress.ip_network``, host bits allowed)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return value
    out = []
    for i, v in enumerate(value):
        if not isinstance(v, str):
            raise ValueError(f"item {i}: expected an IP address or CIDR string, got {v!r}")
        try:
            out.append(str(ipaddress.ip_network(v.strip(), strict=False)))
        except ValueError:
            raise ValueError(f"item {i}: not an IP address or CIDR: {v!r}") from None
    return tuple(out)


class TLSConfig(_Model):
    """``server.tls``: the HTTPS listener.

    ``listen`` (``host:port``) serves HTTPS with ``cert``/``key`` (PEM files; default
    ``<state_dir>/tls/server.crt`` and ``server.key`` as written by ``bootserver tls init``); ``ca`` (PEM,
    default ``<state_dir>/tls/ca.crt``) is embedded into stubs. ``base_url`` is the https URL Ignition
    uses for real configs (default ``https://<base_url host>:<listen port>``). Real configs are refused
    (403) on the plain HTTP listener unless ``allow_plain_configs`` is true.
    """

    listen: str
    base_url: str | None = None
    cert: str | None = None
    key: str | None = None
    ca: str | None = None
    allow_plain_configs: bool = False

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        split_listen(value)
        return value

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = _check_http_url(value)
        if not value.startswith("https://"):
            raise ValueError(f"must be an https:// URL, got {value!r}")
        return value


class SigningConfig(_Model):
    """``server.signing``: lifetimes of signed URLs and of rotated keys, in seconds or ``30m``/``24h``/``7d``.

    ``chain_ttl``: default validity of chain URLs from ``bootserver url`` (7d). ``install_ttl``: validity
    of the URLs inside a served script or stub, long enough to finish an install (24h). ``key_grace``:
    how long ``bootserver keys rotate`` keeps accepting the previous key (24h). Expiries are rounded up
    to the hour.
    """

    chain_ttl: int = 7 * 86400
    install_ttl: int = 86400
    key_grace: int = 86400

    _dur = field_validator("chain_ttl", "install_ttl", "key_grace", mode="before")(
        classmethod(lambda cls, v: _duration(v)))


class ServerConfig(_Model):
    """``server``: where to listen (``host:port``), the URL devices use to reach us, and security limits."""

    listen: str = "127.0.0.1:8080"
    base_url: str | None = None
    tls: TLSConfig | None = None
    signing: SigningConfig = Field(default_factory=SigningConfig)
    trusted_proxies: tuple[str, ...] = ()
    max_concurrent: int = Field(default=256, ge=1, le=100000)
    max_queued: int = Field(default=4096, ge=0, le=1000000)
    request_timeout: int = 60
    keepalive_timeout: int = 15
    #: Worker processes of ``serve`` (``--workers`` overrides); more than 1 shares the ports.
    workers: int = Field(default=1, ge=1, le=256)

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _proxies(cls, value: Any) -> Any:
        return _networks(value)

    @field_validator("request_timeout", "keepalive_timeout", mode="before")
    @classmethod
    def _timeouts(cls, value: Any) -> Any:
        return _duration(value)

    #: The facility this server sits in: its ``mirrors`` come first in the upstream chain.
    facility: str | None = None

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        host, port = split_listen(value)
        return value

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        return None if value is None else _check_http_url(value)

    @property
    def host(self) -> str:
        """Host part of ``listen`` (IPv6 without brackets)."""
        return split_listen(self.listen)[0]

    @property
    def port(self) -> int:
        """TCP port of ``listen``."""
        return split_listen(self.listen)[1]

    @property
    def effective_base_url(self) -> str:
        """``base_url`` if set, else ``http://<listen>`` (``localhost`` for a wildcard address)."""
        if self.base_url:
            return self.base_url
        host = self.host
        if host in ("0.0.0.0", "::", ""):
            host = "localhost"
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def https_base_url(self) -> str | None:
        """The https base URL of real configs when ``tls`` is set (``tls.base_url``, else the host of
        :attr:`effective_base_url` with the port of ``tls.listen``), else ``None``."""
        if self.tls is None:
            return None
        if self.tls.base_url:
            return self.tls.base_url
        host = urlsplit(self.effective_base_url).hostname or "localhost"
        if ":" in host:
            host = f"[{host}]"
        return f"https://{host}:{split_listen(self.tls.listen)[1]}"


def split_listen(value: str) -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` for IPv6) into ``(host, port)``. Raises ``ValueError``."""
    m = re.match(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]]*)):(?P<port>\d{1,5})$", value)
    if not m or not 0 < int(m["port"]) < 65536:
        raise ValueError(f"must be host:port, e.g. 127.0.0.1:8080, got {value!r}")
    host = m["v6"] or m["host"] or ""
    if m["v6"]:
        ipaddress.IPv6Address(m["v6"])
    return host, int(m["port"])


class StreamConfig(_Model):
    """``streams.<name>``: a CoreOS stream metadata URL or file path and the architectures we serve."""

    metadata: str
    architectures: YamlList[Literal["x86_64", "aarch64"]] = ("x86_64",)
    #: ``sync-images --prune`` keeps this many newest releases per architecture (at least 1).
    keep_releases: Annotated[int, Field(ge=1)] = 2

    @property
    def is_url(self) -> bool:
        """True when ``metadata`` is an http(s) URL rather than a file path."""
        return self.metadata.startswith(("http://", "https://"))


class FacilityConfig(_Model):
    """``facilities.<name>``: the facility's own cache server and its upstream mirrors."""

    base_url: str | None = None
    mirrors: YamlList[str] = ()

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        return None if value is None else _check_http_url(value)

    @field_validator("mirrors")
    @classmethod
    def _mirror_urls(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_check_http_url(v) for v in value)


# ------------------------------------------------------------------------------ metal (Equinix Metal)

#: Tag that marks the devices bootserver manages (default of ``metal.tag``).
DEFAULT_TAG = "bootserver"

#: A ``billing_cycle`` (enum of the Equinix Metal API's ``DeviceCreateInput.billing_cycle``).
BillingCycle = Literal["hourly", "daily", "monthly", "yearly"]

#: Allowed ``billing_cycle`` values.
BILLING_CYCLES: tuple[str, ...] = get_args(BillingCycle)


def is_uuid(value: str) -> bool:
    """Whether ``value`` parses as a UUID (as ``uuid.UUID`` reads it: with or without dashes, any case)."""
    try:
        uuid.UUID(value)
    except (ValueError, AttributeError, TypeError):
        return False
    return True


def _metal_word(value: str) -> str:
    """A non-empty string without whitespace (plan, metro and facility codes, tags, ids)."""
    if not value.strip():
        raise ValueError("must be a non-empty string")
    if any(c.isspace() for c in value):
        raise ValueError(f"must not contain whitespace: {value!r}")
    return value


def _metal_uuid(value: str) -> str:
    if not is_uuid(value):
        raise ValueError(f"must be a UUID: {value!r}")
    return value


def _null_as_empty(value: Any) -> Any:
    """An empty ``metal:`` (YAML null) means the same as ``metal: {}``."""
    return {} if value is None else value


MetalWord = Annotated[str, AfterValidator(_metal_word)]
MetalUUID = Annotated[str, AfterValidator(_metal_word), AfterValidator(_metal_uuid)]

#: Union tags of ``facility`` (one code or a list); :func:`describe_error` leaves them out of key paths.
_FACILITY_TAGS = ("<one facility>", "<facility list>")

Facility = Annotated[
    Union[Annotated[MetalWord, Tag(_FACILITY_TAGS[0])], Annotated[YamlList[MetalWord], Tag(_FACILITY_TAGS[1])]],
    Discriminator(lambda v: _FACILITY_TAGS[1] if isinstance(v, (list, tuple)) else _FACILITY_TAGS[0]),
]


class MetalGlobal(_Model):
    """The top-level ``metal:`` mapping: how ``bootserver provision``, ``deprovision`` and ``devices``
    reach the Equinix Metal API v1.

    ``api_url``: the API base URL (http or https, kept without a trailing ``/``; ``METAL_API_URL`` wins;
    ``None`` means ``https://api.equinix.com/metal/v1``). ``project``: the default project UUID (the
    ``{id}`` of ``POST /projects/{id}/devices``; ``--project`` wins). ``tag``: the device tag marking the
    devices bootserver manages (default ``bootserver``).
    """

    api_url: str | None = None
    project: str | None = None
    tag: MetalWord = DEFAULT_TAG

    @field_validator("api_url")
    @classmethod
    def _api_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"must be an http(s) URL: {value!r}")
        return value.rstrip("/")

    @field_validator("project")
    @classmethod
    def _project(cls, value: str | None) -> str | None:
        if value is not None and not is_uuid(value):
            raise ValueError(f"must be a project UUID: {value!r}")
        return value


class MetalSettings(_Model):
    """Device settings from a profile's or a node's ``metal:`` mapping (or from ``provision`` options).

    Each key has the name and meaning of the same member of the createDevice body of the Equinix Metal
    API v1, ``POST /projects/{id}/devices`` (``DeviceCreateInMetroInput`` /
    ``DeviceCreateInFacilityInput``, i.e. ``DeviceCreateInput`` plus a location; spec in
    ``tests/data/equinix-metal-oas3.yaml``). ``None`` means "not set here"; unset keys are left
    out of the request (the API's defaults apply), except ``billing_cycle``.

    * ``plan``: device plan slug, e.g. ``c3.small.x86``.
    * ``metro``: metro code, e.g. ``da``; or ``facility`` (deprecated by Equinix): one facility code,
      e.g. ``da11``, or a list of codes in order of preference (``[da11, any]``). Not both.
    * ``billing_cycle``: ``hourly``, ``daily``, ``monthly`` or ``yearly`` (``provision`` sends
      ``hourly`` when unset).
    * ``tags``: extra device tags, sent after ``metal.tag``.
    * ``spot_instance``: create a spot instance; ``spot_price_max``: the maximum bid in US dollars per
      hour (a finite number, at least 0; only with ``spot_instance`` not false).
    * ``hardware_reservation_id``: a hardware reservation UUID or ``next-available``.
    * ``project_ssh_keys``: UUIDs of project SSH keys to install.
    * ``customdata``: any mapping, shown in the device metadata.
    * ``always_pxe``: boot iPXE on every boot, not only the first (Equinix's default is false;
      :func:`bootserver.metal.node_settings` makes it true for profiles that boot once).

    Strings (codes, tags, ids) must be non-empty and free of whitespace.
    """

    plan: MetalWord | None = None
    metro: MetalWord | None = None
    facility: Facility | None = None
    billing_cycle: BillingCycle | None = None
    tags: YamlList[MetalWord] | None = None
    spot_instance: bool | None = None
    spot_price_max: Annotated[float, Field(allow_inf_nan=False)] | None = None
    hardware_reservation_id: MetalWord | None = None
    project_ssh_keys: YamlList[MetalUUID] | None = None
    customdata: dict[Any, Any] | None = None
    always_pxe: bool | None = None

    @field_validator("facility")
    @classmethod
    def _facility(cls, value: str | tuple[str, ...] | None, info: ValidationInfo) -> Any:
        if value == ():
            raise ValueError("must name at least one facility")
        if value is not None and info.data.get("metro") is not None:
            raise ValueError("set metro or facility (deprecated), not both")
        return value

    @field_validator("spot_price_max")
    @classmethod
    def _spot_price_max(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value is None:
            return None
        if value < 0:
            raise ValueError("must not be negative")
        if info.data.get("spot_instance") is False:
            raise ValueError("needs spot_instance: true")
        return float(value)

    def merged_over(self, base: MetalSettings) -> Self:
        """Return ``base`` with every key set here taking precedence (node over profile, command-line
        options over node). Location is one unit: setting ``metro`` here drops the base's ``facility``
        and the other way round."""
        values = {name: getattr(base, name) for name in type(self).model_fields}
        values.update({name: value for name, value in self if value is not None})
        if self.metro is not None:
            values["facility"] = None
        if self.facility is not None:
            values["metro"] = None
        return self.model_construct(**values)


class Profile(_Model):
    """``profiles.<name>``: what a node boots (stream, arch), how (install or live) and with what config."""

    stream: str
    arch: Literal["x86_64", "aarch64"] = "x86_64"
    mode: Literal["install", "live"] = "install"
    install_dev: str | None = None
    ignition: str | None = None
    ignition_version: Literal["3.1.0", "3.2.0", "3.3.0", "3.4.0", "3.5.0"] = "3.2.0"
    kargs: YamlList[str] = ()
    console: str | None = None
    metal: Annotated[MetalSettings, BeforeValidator(_null_as_empty)] = Field(default_factory=MetalSettings)
    boot_once: bool | None = None

    @property
    def boots_once(self) -> bool:
        """Whether an installed node boots its local disk instead of reinstalling (``boot_once``;
        default true in install mode; never in live mode)."""
        return self.mode == "install" if self.boot_once is None else self.boot_once and self.mode == "install"

    @field_validator("kargs")
    @classmethod
    def _kargs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for i, karg in enumerate(value):
            try:
                check_extra_karg(karg)
            except UnsafeValueError as e:
                raise ValueError(f"item {i}: {e}") from None
        return value

    @field_validator("install_dev", "console")
    @classmethod
    def _word(cls, value: str | None) -> str | None:
        if value is not None:
            check_script_word(value)
        return value


class Node(_Model):
    """``nodes.<name>``: one machine: its profile, facility and the selectors of ``/boot.ipxe``.

    ``addresses`` (IPs or CIDRs) restrict who may fetch the node's script and configs; ``selectable``
    lets ``/boot.ipxe`` hand out its script to any address (otherwise only to a matching address).
    """

    profile: str
    facility: str | None = None
    mac: tuple[str, ...] = ()
    uuid: str | None = None
    hostname: str | None = None
    metal: Annotated[MetalSettings, BeforeValidator(_null_as_empty)] = Field(default_factory=MetalSettings)
    addresses: tuple[str, ...] = ()
    selectable: bool = False

    @field_validator("addresses", mode="before")
    @classmethod
    def _addresses(cls, value: Any) -> Any:
        return _networks(value)

    @field_validator("mac", mode="before")
    @classmethod
    def _macs(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        if isinstance(value, int) or (isinstance(value, list) and any(isinstance(v, int) for v in value)):
            # YAML 1.1 reads an unquoted 52:54:00:12:34:56 as a base-60 integer
            raise ValueError("put MAC addresses in quotes: YAML reads an unquoted 52:54:00:12:34:56 as a number")
        if isinstance(value, list):
            try:
                return tuple(normalize_mac(v) if isinstance(v, str) else v for v in value)
            except ValueError as e:
                raise ValueError(str(e)) from None
        return value

    @field_validator("uuid")
    @classmethod
    def _uuid(cls, value: str | None) -> str | None:
        if value is not None and not UUID_RE.match(value):
            raise ValueError(f"not a UUID: {value!r}")
        return None if value is None else value.lower()

    @field_validator("hostname")
    @classmethod
    def _hostname(cls, value: str | None) -> str | None:
        if value is not None and not HOSTNAME_RE.match(value):
            raise ValueError(f"not a valid hostname: {value!r}")
        return value


class _Document(_Model):
    server: ServerConfig = Field(default_factory=ServerConfig)
    cache_dir: str | None = None
    state_dir: str | None = None
    read_through: bool = True
    streams: dict[Name, StreamConfig] = Field(default_factory=dict)
    facilities: dict[Name, FacilityConfig] = Field(default_factory=dict)
    profiles: dict[Name, Profile] = Field(default_factory=dict)
    nodes: dict[Name, Node] = Field(default_factory=dict)
    metal: Annotated[MetalGlobal, BeforeValidator(_null_as_empty)] = Field(default_factory=MetalGlobal)


class Config:
    """A loaded, checked config. Immutable: attributes are read-only views.

    Attributes: ``source`` (the file name used in error messages, or ``"<default>"``), ``base_dir``
    (folder relative paths resolve against), ``server`` (:class:`ServerConfig`), ``cache_dir`` and
    ``state_dir`` (absolute :class:`~pathlib.Path`), ``read_through`` (bool: a cache miss is fetched
    from upstream), the mappings ``streams``, ``facilities``, ``profiles``, ``nodes`` (name -> model),
    and ``metal`` (:class:`MetalGlobal`).
    """

    __slots__ = ("source", "base_dir", "server", "cache_dir", "state_dir", "read_through", "streams",
                 "facilities", "profiles", "nodes", "metal", "_mac_index")

    def __init__(self, doc: _Document, source: str, base_dir: Path) -> None:
        from types import MappingProxyType

        set_ = object.__setattr__
        set_(self, "source", source)
        set_(self, "base_dir", base_dir)
        set_(self, "server", doc.server)
        set_(self, "cache_dir", self._path(doc.cache_dir) if doc.cache_dir else
             platformdirs.user_cache_path("bootserver"))
        set_(self, "state_dir", self._path(doc.state_dir) if doc.state_dir else
             platformdirs.user_state_path("bootserver"))
        set_(self, "read_through", doc.read_through)
        set_(self, "streams", MappingProxyType(dict(doc.streams)))
        set_(self, "facilities", MappingProxyType(dict(doc.facilities)))
        set_(self, "profiles", MappingProxyType(dict(doc.profiles)))
        set_(self, "nodes", MappingProxyType(dict(doc.nodes)))
        set_(self, "metal", doc.metal)
        set_(self, "_mac_index", MappingProxyType(
            {mac: name for name, node in doc.nodes.items() for mac in node.mac}))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Config is immutable")

    def _path(self, value: str) -> Path:
        return (self.base_dir / os.path.expanduser(value)).resolve()

    def resolve_path(self, value: str) -> Path:
        """Resolve a path from the config (``~`` expanded) against the config file's folder."""
        return self._path(value)

    def metadata_path(self, stream: str) -> Path | None:
        """The local file of ``streams.<stream>.metadata`` when it is a path, else ``None``."""
        sc = self.streams[stream]
        return None if sc.is_url else self._path(sc.metadata)

    def ignition_path(self, profile: str) -> Path | None:
        """The real Ignition config file of a profile, or ``None`` when the profile has none."""
        p = self.profiles[profile]
        return None if p.ignition is None else self._path(p.ignition)

    def tls_files(self) -> tuple[Path, Path, Path]:
        """``(cert, key, ca)`` of ``server.tls``, defaulting to ``<state_dir>/tls/server.crt``,
        ``server.key`` and ``ca.crt``. Raises ``ValueError`` when ``server.tls`` is not set."""
        tls = self.server.tls
        if tls is None:
            raise ValueError("server.tls is not set")
        d = self.state_dir / "tls"
        return (self._path(tls.cert) if tls.cert else d / "server.crt",
                self._path(tls.key) if tls.key else d / "server.key",
                self._path(tls.ca) if tls.ca else d / "ca.crt")

    def mirrors(self, facility: str | None = None) -> tuple[str, ...]:
        """Mirror base URLs of ``facility`` (default: ``server.facility``), in order; ``()`` for none."""
        facility = facility if facility is not None else self.server.facility
        if facility is None or facility not in self.facilities:
            return ()
        return self.facilities[facility].mirrors

    def node_by_mac(self, mac: str) -> str | None:
        """Name of the node with this MAC (any case, ``:`` or ``-``), or ``None``."""
        try:
            return self._mac_index.get(normalize_mac(mac))
        except ValueError:
            return None

    def node_by_uuid(self, uuid: str) -> str | None:
        """Name of the node with this SMBIOS UUID (any case), or ``None``."""
        uuid = uuid.strip().lower()
        return next((n for n, node in self.nodes.items() if node.uuid == uuid), None)

    def node_by_hostname(self, hostname: str) -> str | None:
        """Name of the node whose ``hostname`` (or, lacking one, name) equals ``hostname``."""
        hostname = hostname.strip().lower()
        return next((n for n, node in self.nodes.items()
                     if (node.hostname or n).lower() == hostname), None)

    def node_hostname(self, node: str) -> str:
        """The hostname written to a node's ``/etc/hostname``: its ``hostname`` or its name."""
        return self.nodes[node].hostname or node


def default_document() -> dict[str, Any]:
    """The embedded default config: Fedora CoreOS ``stable`` on 127.0.0.1:8080, per-user dirs."""
    return {
        "server": {"listen": "127.0.0.1:8080"},
        "streams": {"fcos-stable": {"metadata": FCOS_STABLE_URL, "architectures": ["x86_64", "aarch64"]}},
        "profiles": {
            "fcos-live": {"stream": "fcos-stable", "arch": "x86_64", "mode": "live"},
            "fcos-live-aarch64": {"stream": "fcos-stable", "arch": "aarch64", "mode": "live"},
        },
    }


def _keypath(loc: tuple[Any, ...]) -> str:
    """``("nodes", "m0", "metal", "tags", 1)`` -> ``nodes.m0.metal.tags[1]``."""
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else f".{p}" if out else str(p)
    return out


def _known_keys(loc: tuple[Any, ...]) -> tuple[str, ...]:
    """The keys of the mapping at ``loc`` (a key path into :class:`_Document`), ``()`` if not a model."""
    node: Any = _Document
    for part in loc:
        if isinstance(node, type) and issubclass(node, BaseModel) and part in node.model_fields:
            node = node.model_fields[part].annotation
            if get_origin(node) in (Union, types.UnionType):  # X | None
                node = next((a for a in get_args(node) if a is not type(None)), None)
        elif get_origin(node) is dict:
            node = get_args(node)[1]
        else:
            return ()
    return tuple(node.model_fields) if isinstance(node, type) and issubclass(node, BaseModel) else ()


def describe_error(err: dict[str, Any]) -> tuple[str, str]:
    """Turn one pydantic error (an item of ``ValidationError.errors()``) into ``(key path, message)`` in
    our wording: ``("nodes.m0.metal.tags[1]", "expected a string, got int 1")``."""
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and (
        p.startswith(("function-", "literal[")) or p in _FACILITY_TAGS)))
    kind = err["type"]
    if kind == "extra_forbidden":
        known = _known_keys(loc[:-1])
        return _keypath(loc), f"unknown key (known: {', '.join(known)})" if known else "unknown key"
    if kind == "missing":
        return _keypath(loc), "required key is missing"
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    elif kind.endswith("_type") or kind == "model_type" or kind == "dict_type":
        expected = {"string_type": "a string", "dict_type": "a mapping", "model_type": "a mapping",
                    "tuple_type": "a list", "list_type": "a list", "bool_type": "true or false",
                    "int_type": "an integer", "float_type": "a number"}.get(kind, kind.removesuffix("_type"))
        msg = f"expected {expected}, got {type(err['input']).__name__} {err['input']!r}"
    elif kind == "literal_error":
        msg = f"{msg[0].lower()}{msg[1:]}, got {err['input']!r}"
    elif kind == "string_pattern_mismatch":
        msg = "names may use only letters, digits, '.', '_' and '-'"
    else:
        msg = msg[0].lower() + msg[1:]
    # dict keys that fail their pattern carry a "[key]" marker in loc
    path = _keypath(tuple(p for p in loc if p != "[key]"))
    return path, msg


def _check_references(doc: _Document, cfg: Config) -> None:
    """Cross-key checks pydantic cannot do: names that must exist, arch and mode requirements."""
    src = cfg.source
    if doc.server.facility is not None and doc.server.facility not in doc.facilities:
        raise ConfigError(src, "server.facility", f"no facility {doc.server.facility!r}")
    for name, prof in doc.profiles.items():
        if prof.stream not in doc.streams:
            raise ConfigError(src, f"profiles.{name}.stream", f"no stream {prof.stream!r}")
        if prof.arch not in doc.streams[prof.stream].architectures:
            raise ConfigError(src, f"profiles.{name}.arch",
                              f"stream {prof.stream!r} does not list architecture {prof.arch!r}")
        if prof.mode == "live" and prof.boot_once:
            raise ConfigError(src, f"profiles.{name}.boot_once", "a live-mode node has no disk to boot; "
                              "boot_once can only be true in install mode")
        if prof.mode == "install" and not prof.install_dev:
            raise ConfigError(src, f"profiles.{name}.install_dev", "required when mode is install")
        if prof.ignition is not None:
            check_real_config(cfg.resolve_path(prof.ignition), src, f"profiles.{name}.ignition")
    seen_macs: dict[str, str] = {}
    for name, node in doc.nodes.items():
        if node.profile not in doc.profiles:
            raise ConfigError(src, f"nodes.{name}.profile", f"no profile {node.profile!r}")
        if node.facility is not None and node.facility not in doc.facilities:
            raise ConfigError(src, f"nodes.{name}.facility", f"no facility {node.facility!r}")
        for mac in node.mac:
            if mac in seen_macs:
                raise ConfigError(src, f"nodes.{name}.mac", f"{mac} is already the MAC of node {seen_macs[mac]!r}")
            seen_macs[mac] = name
    for name, sc in doc.streams.items():
        if not sc.is_url:
            path = cfg.resolve_path(sc.metadata)
            if not path.is_file():
                raise ConfigError(src, f"streams.{name}.metadata", f"no such file: {path}")


def check_real_config(path: Path, source: str, keypath: str) -> bytes:
    """Check a real Ignition config file (e.g. openshift-install's ``master.ign``) and return its bytes.

    It must be a JSON object whose ``ignition.version`` is a 3.x spec, since a spec 3 stub can merge
    only spec 3 configs (openshift-install before 4.6 wrote spec 2.2 pointer configs). A Butane config
    (:mod:`bootserver.butane`) is translated by ``butane`` first, and its translation is checked and
    returned.
    Raises :class:`ConfigError` naming ``source`` and ``keypath``.
    """
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(source, keypath, f"cannot read {path}: {e.strerror}") from None
    if is_butane(path, data):  # checked as the Ignition config butane translates it into
        try:
            data = translate_butane(path, data)
        except ButaneError as e:
            raise ConfigError(source, keypath, str(e)) from None
    try:
        doc = json.loads(data)
        version = doc["ignition"]["version"]
    except (ValueError, KeyError, TypeError):
        raise ConfigError(source, keypath, f"{path} is not an Ignition config (no ignition.version)") from None
    if not isinstance(version, str) or not version.startswith("3."):
        raise ConfigError(source, keypath, f"{path} is Ignition spec {version}; only spec 3.x configs can be merged")
    return data


def parse_config(raw: Any, source: str, base_dir: Path) -> Config:
    """Check a parsed YAML document and build a :class:`Config`. Raises :class:`ConfigError`."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(source, "", f"expected a mapping at the top level, got {type(raw).__name__}")
    try:
        doc = _Document.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        keypath, message = describe_error(first)
        raise ConfigError(source, keypath, message) from None
    cfg = Config(doc, source, base_dir)
    _check_references(doc, cfg)
    return cfg


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """Load the config from ``path``, else ``$BOOTSERVER_CONFIG``, else the embedded default.

    Raises :class:`ConfigError` (exit 2) for a missing or unreadable file, YAML syntax errors, unknown
    keys, wrong types and dangling references, naming the file and the key path.
    """
    if path is None:
        path = os.environ.get("BOOTSERVER_CONFIG") or None
    if path is None:
        return parse_config(default_document(), "<default>", Path.cwd())
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(str(p), "", f"cannot read config: {e.strerror}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(str(p), "", f"{where}invalid YAML: {problem}") from None
    return parse_config(raw, str(p), p.resolve().parent)
