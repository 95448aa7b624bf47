"""Shared by the tests (moved out of tests/test_discovery.py, which other test modules imported)."""

from __future__ import annotations

from urllib.parse import quote

UNKNOWN = "52:54:00:aa:bb:01"


UUID = "8c3f1a52-7b1e-4c7e-9a4d-2f6e3b1c0d5e"


def report_path(mac: str = UNKNOWN, uuid: str = UUID, **facts: str) -> str:
    query = {"mac": mac, "uuid": uuid, **facts, "net0": mac, "net0chip": "virtio-net", "net0busid": "pci:00:03.0"}
    return "/discover?" + "&".join(f"{k}={quote(v, safe='')}" for k, v in query.items())
