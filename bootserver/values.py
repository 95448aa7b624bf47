"""Value types of the settings: the checks a single value passes, whatever key it sits under.

Each is a plain function raising ``ValueError`` (usable outside the config, e.g. by the command line)
and, where a model field uses it, an ``Annotated`` pydantic type. :class:`SettingsModel` is the base of
every settings model (``extra="forbid"``, ``frozen=True``, ``strict=True``); a feature or provider
module that owns its own settings builds them on it and on these types. This module sits below
:mod:`bootserver.config`, the providers' settings and :mod:`bootserver.network`, which all build on it
(docs/design.md, Layers); every name stays importable from ``bootserver.config`` too.
"""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Self, TypeAlias, TypeVar
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

from .ipxe import UnsafeValueError, check_script_word

__all__ = [
    "HOSTNAME_RE",
    "MAC_RE",
    "MAX_DURATION",
    "NAME_RE",
    "UUID_RE",
    "Duration",
    "Hostname",
    "HttpUrl",
    "Name",
    "Networks",
    "OneOrList",
    "ScriptWord",
    "SettingsModel",
    "UnsafeValueError",
    "YamlList",
    "check_hostname",
    "check_http_url",
    "check_name",
    "host_family",
    "normalize_mac",
    "null_as_empty",
    "one_per_family",
    "parse_duration",
    "parse_networks",
    "split_listen",
    "unicast_mac",
    "url_for_family",
]

#: A name of a node, profile, stream or facility: starts with a letter or digit, then letters, digits,
#: ``.``, ``_`` or ``-``; 1 to 63 characters. Names appear in URL paths and iPXE scripts.
NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
#: The rule of :data:`NAME_RE` in words (the error message of a bad name).
NAME_RULE = ("names start with a letter or digit and use only letters, digits, '.', '_' and '-', "
             "at most 63 characters")
MAC_RE = re.compile(r"^[0-9a-f]{2}([:-][0-9a-f]{2}){5}$", re.IGNORECASE)
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)
#: A host name of RFC 1123 section 2.1 (labels of letters, digits and inner ``-``, at most 63 characters
#: each, 253 in all), which is also what the Equinix Metal API accepts as a device ``hostname``.
HOSTNAME_RE = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
#: The rule of :data:`HOSTNAME_RE` in words.
HOSTNAME_RULE = ("a hostname has labels of letters, digits and '-' (not first or last), at most 63 "
                 "characters each, separated by '.'")
#: The longest duration accepted anywhere (100 years, in seconds): an expiry ``now + duration`` then
#: stays far inside the 12 digits a signed URL's ``exp`` may have.
MAX_DURATION = 100 * 365 * 86400

_DURATION_RE = re.compile(r"^([0-9]+)([smhd]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


class SettingsModel(BaseModel):
    """Base of every settings model: unknown keys refused, immutable, no type coercion.

    :meth:`merged_over` layers one mapping over another (node over profile, command-line options over
    node); :attr:`one_of` names the groups of keys that are one unit in that merge.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    #: Groups of keys that are one unit when merging (e.g. ``("metro", "facility")``): a key of a group
    #: set here drops the base's other keys of that group.
    one_of: ClassVar[tuple[tuple[str, ...], ...]] = ()

    #: Keys whose text value names a local file (relative to the config file) that must exist and be
    #: readable: ``check-config`` and ``serve`` check them (:func:`bootserver.config.check_local_inputs`);
    #: a ``bool`` value (``verify_tls: true``) names none.
    local_files: ClassVar[tuple[str, ...]] = ()

    def merged_over(self, base: Self) -> Self:
        """Return ``base`` with every key set here (not ``None``) taking precedence; for each group of
        :attr:`one_of`, a key of the group set here drops the base's other keys of the group. The
        result is not validated again (both sides were)."""
        values = {name: getattr(base, name) for name in type(self).model_fields}
        values.update({name: value for name, value in self if value is not None})
        for group in self.one_of:
            chosen = [name for name in group if getattr(self, name) is not None]
            if chosen:
                values.update({name: None for name in group if name not in chosen})
        return self.model_copy(update=values)


def _list_to_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _one_to_tuple(value: Any) -> Any:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"expected a string or a list of strings, got {type(value).__name__} {value!r}")
    return tuple(value)


class _YamlList:
    """``YamlList[T]``: a YAML list read into an immutable ``tuple[T, ...]`` (strict models refuse lists
    for tuple fields otherwise)."""

    def __class_getitem__(cls, item: Any) -> Any:
        return Annotated[tuple[item, ...], BeforeValidator(_list_to_tuple)]


if TYPE_CHECKING:  # what a YamlList field holds, for the type checker (the class builds the pydantic type)
    _T = TypeVar("_T")
    YamlList: TypeAlias = tuple[_T, ...]
else:
    YamlList = _YamlList


class _OneOrList:
    """``OneOrList[T]``: one value or a non-empty YAML list of them, read into an immutable
    ``tuple[T, ...]`` (``server.listen: 0.0.0.0:8080`` and ``server.listen: [...]`` alike)."""

    def __class_getitem__(cls, item: Any) -> Any:
        return Annotated[tuple[item, ...], BeforeValidator(_one_to_tuple), Field(min_length=1)]


if TYPE_CHECKING:  # what a OneOrList field holds, for the type checker
    OneOrList: TypeAlias = tuple[_T, ...]
else:
    OneOrList = _OneOrList


def counted(count: int, noun: str) -> str:
    """``count`` and the English ``noun`` in its number: ``1 node``, ``2 nodes``, ``0 nodes`` (a noun
    whose plural is not ``-s`` is not handled)."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def null_as_empty(value: Any) -> Any:
    """An empty mapping key (YAML null, e.g. ``metal:`` alone) means the same as ``{}``."""
    return {} if value is None else value


def check_name(value: str) -> str:
    """Return ``value`` if it is a name (:data:`NAME_RE`), else raise ``ValueError`` with :data:`NAME_RULE`."""
    if not re.match(NAME_RE, value) or "\n" in value:
        raise ValueError(NAME_RULE)
    return value


def check_hostname(value: str) -> str:
    """Return ``value`` if it is an RFC 1123 host name (:data:`HOSTNAME_RE`), else raise ``ValueError``."""
    if not HOSTNAME_RE.match(value) or "\n" in value:
        raise ValueError(f"not a valid hostname: {value!r} ({HOSTNAME_RULE})")
    return value


def normalize_mac(value: str) -> str:
    """Return a MAC address as lower-case, colon-separated (``52:54:00:12:34:56``).

    Accepts ``:`` or ``-`` separators in any case. Raises ``ValueError`` for anything else.
    """
    value = value.strip()
    if not MAC_RE.match(value):
        raise ValueError(f"not a MAC address: {value!r}")
    return value.lower().replace("-", ":")


def unicast_mac(value: str) -> str:
    """A configured NIC's MAC address (:func:`normalize_mac`), which must be one a NIC can have: raises
    ``ValueError`` for a group (multicast or broadcast) address, the least significant bit of its first
    octet set (IEEE 802-2014, 8.2.2), and for the all-zero address, as well as for anything
    :func:`normalize_mac` refuses."""
    mac = normalize_mac(value)
    if int(mac[:2], 16) & 1:
        raise ValueError(f"{mac} is a multicast (group) address, no NIC's own: the first octet's lowest bit "
                         "is set")
    if mac == "00:00:00:00:00:00":
        raise ValueError(f"{mac} is the all-zero address, no NIC's own")
    return mac


def check_http_url(value: str) -> str:
    """Check a base URL: http or https, a host, no query or fragment, safe in an iPXE script.

    Returns it without a trailing ``/``. Raises ``ValueError`` (or its subclass
    :class:`~bootserver.ipxe.UnsafeValueError`) naming the value. The one http(s) URL check of bootserver.
    """
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http:// or https:// URL, got {value!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"must not have a query or fragment: {value!r}")
    check_script_word(value)
    return value.rstrip("/")


def parse_duration(value: str | int) -> int:
    """Parse a duration: an integer number of seconds or ``<n>s|m|h|d`` (``24h``, ``7d``).

    Returns seconds, from 1 to :data:`MAX_DURATION`. Raises ``ValueError`` naming the value.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int):
        seconds = value
    else:
        m = _DURATION_RE.match(value.strip())
        if not m:
            raise ValueError(f"not a duration (use e.g. 3600, 30m, 24h, 7d): {value!r}")
        seconds = int(m[1]) * _UNITS[m[2]]
    if seconds <= 0:
        raise ValueError(f"duration must be positive: {value!r}")
    if seconds > MAX_DURATION:
        raise ValueError(f"duration must be at most {MAX_DURATION // 86400}d: {value!r}")
    return seconds


def split_listen(value: str) -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` for IPv6) into ``(host, port)``. Raises ``ValueError``."""
    m = re.match(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]]*)):(?P<port>\d{1,5})$", value)
    if not m or not 0 < int(m["port"]) < 65536:
        raise ValueError(f"must be host:port, e.g. 127.0.0.1:8080, got {value!r}")
    host = m["v6"] or m["host"] or ""
    if m["v6"]:
        ipaddress.IPv6Address(m["v6"])
    return host, int(m["port"])


def host_family(host: str) -> int | None:
    """The address family of a URL's or listener's host: ``4`` or ``6`` for an IP address (an
    IPv4-mapped IPv6 address ``::ffff:a.b.c.d`` counts as ``4``, as a dual-stack socket reports an IPv4
    peer), ``None`` for a name (``localhost``, ``boot.example``) or an empty host. Brackets allowed."""
    try:
        address = ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return 4
    return address.version


def one_per_family(urls: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """Check a list of base URLs (``server.base_url``, ``facilities.<name>.base_url``): at most one per
    address family (:func:`host_family`: an IPv4 address, an IPv6 address, a host name). Returns
    ``urls``; raises ``ValueError`` naming the two URLs of one family."""
    families: dict[int | None, str] = {}
    for url in urls or ():
        family = host_family(urlsplit(url).hostname or "")
        if family in families:
            what = f"both IPv{family}" if family else "both host names (a name is either family)"
            raise ValueError(f"one base URL per address family: {families[family]} and {url} are {what}")
        families[family] = url
    return urls


def url_for_family(urls: tuple[str, ...], family: int | None) -> str:
    """Of the non-empty base URLs ``urls`` (:func:`one_per_family`), the one a machine asking over address
    family ``family`` (``4``, ``6``; ``None``: not known) is handed: the one whose host is an address of
    that family, else the first whose host is a name (reachable over either), else the first."""
    if family is None or len(urls) == 1:
        return urls[0]
    named = None
    for url in urls:
        have = host_family(urlsplit(url).hostname or "")
        if have == family:
            return url
        if have is None and named is None:
            named = url
    return named or urls[0]


def parse_networks(value: Any) -> Any:
    """Normalise one or a list of IP addresses or CIDRs into a tuple of CIDR strings
    (``ipaddress.ip_network``, host bits allowed). Raises ``ValueError`` naming the item."""
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


def _duration(value: Any) -> Any:
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return parse_duration(value)
    return value


#: A byte rate: digits, an optional unit prefix (decimal k, M, G; binary Ki, Mi, Gi), optional ``B/s``.
_RATE_RE = re.compile(r"^\s*(\d+)\s*(k|K|M|G|Ki|Mi|Gi)?(?:B/s|B)?\s*$")
_RATE_UNITS = {None: 1, "k": 1000, "K": 1000, "M": 1000**2, "G": 1000**3, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3}


def parse_rate(value: int | str) -> int:
    """Bytes per second from ``value``: an integer, or text such as ``12500000``, ``100M``, ``12MB/s``,
    ``512Ki`` (k/M/G: powers of 1000; Ki/Mi/Gi: powers of 1024). Raises ``ValueError`` for anything
    else or a rate under 1024 bytes per second."""
    if isinstance(value, int):
        rate = value
    else:
        m = _RATE_RE.match(value)
        if m is None:
            raise ValueError(f"not a byte rate (bytes per second, e.g. 12500000 or 100M): {value!r}")
        rate = int(m[1]) * _RATE_UNITS[m[2]]
    if rate < 1024:
        raise ValueError(f"a byte rate of at least 1024 bytes per second, got {value!r}")
    return rate


def _rate(value: Any) -> Any:
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return parse_rate(value)
    return value


def _listen(value: str) -> str:
    split_listen(value)
    return value


#: A name (:data:`NAME_RE`) as a mapping key or value.
Name = Annotated[str, StringConstraints(pattern=NAME_RE)]
#: A word iPXE reads literally (:func:`bootserver.ipxe.check_script_word`).
ScriptWord = Annotated[str, AfterValidator(check_script_word)]
#: Seconds, written as an integer or ``30m``/``24h``/``7d`` (:func:`parse_duration`).
Duration = Annotated[int, BeforeValidator(_duration)]
#: Bytes per second, written as an integer or ``100M``/``12MB/s``/``512Ki`` (:func:`parse_rate`).
ByteRate = Annotated[int, BeforeValidator(_rate)]
#: ``host:port`` or ``[v6]:port`` (:func:`split_listen`).
ListenAddress = Annotated[str, AfterValidator(_listen)]


def _listen_or_socket(value: str) -> str:
    return value if value.startswith("/") else _listen(value)


#: A :data:`ListenAddress`, or the absolute path of a Unix socket.
ListenAddressOrSocket = Annotated[str, AfterValidator(_listen_or_socket)]
#: An http(s) base URL (:func:`check_http_url`), kept without a trailing ``/``.
HttpUrl = Annotated[str, AfterValidator(check_http_url)]
#: A host name (:func:`check_hostname`).
Hostname = Annotated[str, AfterValidator(check_hostname)]
#: One or a list of IP addresses or CIDRs (:func:`parse_networks`), as a tuple of CIDR strings.
Networks = Annotated[tuple[str, ...], BeforeValidator(parse_networks)]
