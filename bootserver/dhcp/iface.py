"""The provisioning interface's own addresses, as the kernel has them: what ``mode: full`` hands
addresses out of, and what ``check-config`` checks ranges and reservations against.

Read without any tool: the IPv4 address and netmask by the ``SIOCGIFADDR``/``SIOCGIFNETMASK`` ioctls
(netdevice(7); the interface's primary IPv4 address), the IPv6 addresses from ``/proc/net/if_inet6``
(proc(5)). Link-local IPv6 addresses are left out.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

_SIOCGIFADDR = 0x8915
_SIOCGIFNETMASK = 0x891B


class NoInterface(LookupError):
    """The interface does not exist on this machine (in this network namespace)."""


@dataclass(frozen=True)
class InterfaceAddresses:
    """``name``'s addresses: ``ipv4`` (its primary IPv4 address with its subnet, or ``None``) and
    ``ipv6`` (its global IPv6 addresses with their prefixes)."""

    name: str
    ipv4: ipaddress.IPv4Interface | None
    ipv6: tuple[ipaddress.IPv6Interface, ...] = ()


def _ioctl_address(sock: socket.socket, request: int, name: str) -> str | None:
    try:
        answer = fcntl.ioctl(sock.fileno(), request, struct.pack("256s", name.encode()[:15]))
    except OSError:
        return None
    return socket.inet_ntoa(answer[20:24])


def interface_addresses(name: str, proc: Path = Path("/proc/net/if_inet6")) -> InterfaceAddresses:
    """The addresses of interface ``name``. Raises :class:`NoInterface` when there is no such interface."""
    try:
        socket.if_nametoindex(name)
    except OSError:
        raise NoInterface(name) from None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        address = _ioctl_address(sock, _SIOCGIFADDR, name)
        netmask = _ioctl_address(sock, _SIOCGIFNETMASK, name) if address else None
    ipv4 = ipaddress.IPv4Interface(f"{address}/{netmask}") if address and netmask else None
    ipv6 = []
    try:
        lines = proc.read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        fields = line.split()
        if len(fields) == 6 and fields[5] == name:
            hexaddr, prefix = fields[0], int(fields[2], 16)
            addr = ipaddress.IPv6Address(bytes.fromhex(hexaddr))
            if not addr.is_link_local:
                ipv6.append(ipaddress.IPv6Interface(f"{addr}/{prefix}"))
    return InterfaceAddresses(name, ipv4, tuple(ipv6))


__all__ = ["InterfaceAddresses", "NoInterface", "interface_addresses"]
