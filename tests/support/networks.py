"""Shared by the tests (moved out of tests/images/test_iso.py, which other test modules imported)."""

from __future__ import annotations

from typing import Any

MAC = "52:54:00:00:00:01"


STATIC = {
    "interfaces": [{"name": "nic0", "type": "ethernet", "mac-address": MAC,
                    "ipv4": {"enabled": True, "address": [{"ip": "192.0.2.10", "prefix-length": 24}]},
                    "ipv6": {"enabled": True, "address": [{"ip": "2001:db8::10", "prefix-length": 64}]}}],
    "routes": {"config": [{"destination": "0.0.0.0/0", "next-hop-address": "192.0.2.1"}]},
    "dns-resolver": {"config": {"server": ["2001:db8::53", "192.0.2.53"]}},
}


def long_network(addresses: int) -> dict[str, Any]:
    return {"interfaces": [{"name": "nic0", "type": "ethernet", "mac-address": "52:54:00:00:00:01",
                            "ipv6": {"enabled": True, "address": [
                                {"ip": f"2001:db8:1234:5678:9abc:def0:1234:{i:x}", "prefix-length": 64}
                                for i in range(addresses)]}}]}
