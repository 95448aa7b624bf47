"""Settings of the DHCP engine: the top-level ``dhcp:`` mapping (off when absent), which
``bootserver dhcp`` runs dnsmasq from (:mod:`bootserver.dhcp`).

The model follows :mod:`bootserver.values` (:class:`SettingsModel`: strict, frozen, no unknown keys);
:mod:`bootserver.config.schema` adds it as one field of the document. What needs more than one key
(a range inside the interface's subnet, reservations that collide) is checked by
:func:`bootserver.dhcp.reservations.check_dhcp`, which ``check-config`` and ``bootserver dhcp`` run.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from ..values import Duration, Hostname, SettingsModel, YamlList

#: A network interface name as Linux takes it (``IFNAMSIZ`` 16 with its NUL; no ``/``, ``:`` or space).
INTERFACE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")


def _ipv4(value: str) -> str:
    try:
        return str(ipaddress.IPv4Address(value))
    except ValueError:
        raise ValueError(f"not an IPv4 address: {value!r}") from None


IPv4 = Annotated[str, BeforeValidator(lambda v: _ipv4(v) if isinstance(v, str) else v)]


def _pool_ends(value: Any, example: str) -> list[str] | None:
    """A pool's two ends as written (``START-END``, or a list of the two), or ``None`` for another
    type (left to the model's own check). Raises ``ValueError`` naming ``example`` for another shape."""
    if isinstance(value, str):
        parts = [p.strip() for p in value.split("-")]
    elif isinstance(value, list):
        parts = value
    else:
        return None
    if len(parts) != 2 or not all(isinstance(p, str) for p in parts):
        raise ValueError(f"give the pool as START-END (e.g. {example}), got {value!r}")
    return parts


def _range(value: Any) -> Any:
    """``START-END`` (or a list of the two) into a tuple of two IPv4 addresses, in order."""
    parts = _pool_ends(value, "192.0.2.100-192.0.2.200")
    if parts is None:
        return value
    start, end = (ipaddress.IPv4Address(_ipv4(p)) for p in parts)
    if end < start:
        raise ValueError(f"the pool ends ({end}) before it starts ({start})")
    return (str(start), str(end))


def _range6(value: Any) -> Any:
    """``START-END`` (or a list of the two) into a tuple of two IPv6 addresses in one ``/64``, in order."""
    parts = _pool_ends(value, "2001:db8::100-2001:db8::1ff")
    if parts is None:
        return value
    try:
        start, end = (ipaddress.IPv6Address(p) for p in parts)
    except ValueError:
        raise ValueError(f"not two IPv6 addresses: {value!r}") from None
    if end < start:
        raise ValueError(f"the pool ends ({end}) before it starts ({start})")
    if ipaddress.IPv6Network(f"{start}/64", strict=False) != ipaddress.IPv6Network(f"{end}/64", strict=False):
        raise ValueError(f"{start} and {end} are not in one /64 (the prefix DHCPv6 hands addresses of)")
    return (str(start), str(end))


class DhcpSettings(SettingsModel):
    """The top-level ``dhcp:`` mapping: the DHCP engine on the provisioning network.

    ``interface``: the provisioning network's interface (required); dnsmasq binds to it alone.
    ``mode``: ``proxy`` (default; boot options only, beside the site's own DHCP server: no address is
    ever handed out) or ``full`` (addresses too). For ``full``: ``range`` (``START-END``, a pool for
    machines that are not nodes; absent: only nodes with a reservation get an address), ``lease_time``
    (seconds or ``1h``; at least 120, dnsmasq's minimum), ``router`` (the default gateway handed to the
    pool; a node gets its own network's), ``dns`` (name servers of the pool), ``domain`` (the domain
    name option). ``ipv6``: router advertisements and DHCPv6 on the interface's IPv6 prefix too (in
    ``full`` mode stateful, with a reservation for each node with a static IPv6 address); ``range6``
    (``START-END`` of IPv6 addresses in one ``/64`` on the interface, ``ipv6`` only): a DHCPv6 pool for
    the nodes without a static IPv6 address (``network: dhcp``, which boot with ``ip=dhcp6`` over IPv6)
    and for machines that are not nodes; absent: only nodes with a static IPv6 address get one.
    """

    interface: str
    mode: Literal["proxy", "full"] = "proxy"
    range: Annotated[tuple[str, str] | None, BeforeValidator(_range)] = None
    lease_time: Annotated[Duration, Field(ge=120, le=365 * 86400)] = 3600
    router: IPv4 | None = None
    dns: YamlList[IPv4] = ()
    domain: Hostname | None = None
    ipv6: bool = False
    range6: Annotated[tuple[str, str] | None, BeforeValidator(_range6)] = None

    @field_validator("interface")
    @classmethod
    def _interface(cls, value: str) -> str:
        if not INTERFACE_RE.match(value):
            raise ValueError(f"not a network interface name (at most 15 letters, digits, '.', '_', '-'): {value!r}")
        return value

    @model_validator(mode="after")
    def _full_only(self) -> DhcpSettings:
        if self.mode == "proxy":  # ipv6 in proxy mode: the site's router and DHCPv6 server answer
            for key in ("range", "router", "dns", "domain", "ipv6", "range6"):
                if getattr(self, key):
                    raise ValueError(f"{key}: only with mode: full (in proxy mode the site's DHCP server hands "
                                     "out addresses and their options)")
        if self.range6 is not None and not self.ipv6:
            raise ValueError("range6: only with ipv6: true (the DHCPv6 pool)")
        return self

    @property
    def full(self) -> bool:
        """Whether the engine hands out addresses (``mode: full``)."""
        return self.mode == "full"


__all__ = ["DhcpSettings", "IPv4"]
