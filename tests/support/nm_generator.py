"""Run NetworkManager's real initrd generator (``nm-initrd-generator``) over kernel arguments.

``.ci/prepare.d/nm-initrd-generator.sh`` unpacks Debian's ``network-manager`` package (without installing
it) into ``/var/cache/bootserver-tests/network-manager`` (``BOOTSERVER_NM_DIR`` overrides). The generator
runs unprivileged with ``-s`` (dump the connections to stdout instead of writing them), with ``-c``/``-i``/
``-r`` pointed into a temporary folder so it touches nothing of the machine's. Its output is NetworkManager's
keyfile format (``*** Connection 'bond0' ***`` then INI sections), read here with ``configparser`` and
boiled down to what a boot network is made of.
"""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from support.netns import skip_or_fail

NM_DIR = Path(os.environ.get("BOOTSERVER_NM_DIR", "/var/cache/bootserver-tests/network-manager"))
CANDIDATES = ("usr/libexec/nm-initrd-generator", "usr/lib/NetworkManager/nm-initrd-generator")


def find_generator() -> Path | None:
    """The unpacked generator, or ``None``."""
    return next((NM_DIR / c for c in CANDIDATES if os.access(NM_DIR / c, os.X_OK)), None)


def require_generator() -> Path:
    """The generator; skips the test without it, but fails it under ``CI`` (any non-empty value but
    ``0``/``false``/``no``, as for the e2e tools): CI unpacks it, so missing there is a failure."""
    path = find_generator()
    if path is None:
        message = f"nm-initrd-generator not unpacked in {NM_DIR}: run .ci/prepare.d/nm-initrd-generator.sh"
        skip_or_fail(message)
    return path


def run_generator(kargs: list[str] | tuple[str, ...]) -> str:
    """The generator's ``-s`` output for ``kargs`` (bounded to 30 s)."""
    generator = require_generator()
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [str(generator), "-s", "-c", f"{tmp}/c", "-p", f"{tmp}/p", "-i", f"{tmp}/i", "-r", f"{tmp}/r",
             "-d", f"{tmp}/sys", "--", *kargs],
            capture_output=True, text=True, timeout=30, check=True)
    return out.stdout


def _parse(text: str) -> tuple[str | None, dict[str, configparser.ConfigParser]]:
    hostname = None
    connections: dict[str, configparser.ConfigParser] = {}
    blocks = re.split(r"^\*\*\* (Connection|Configuration|Hostname) '([^']*)' \*\*\*$", text, flags=re.M)
    for kind, name, body in zip(blocks[1::3], blocks[2::3], blocks[3::3], strict=False):
        if kind == "Hostname":
            hostname = name
        elif kind == "Connection":
            parser = configparser.ConfigParser(interpolation=None, strict=True)
            parser.optionxform = str  # type: ignore[assignment,method-assign]
            parser.read_string(body)
            connections[name] = parser
    return hostname, connections


def _ip(parser: configparser.ConfigParser, section: str) -> dict[str, Any]:
    s = parser[section]
    addresses, gateway = [], s.get("gateway")
    for i in range(1, 100):
        value = s.get(f"address{i}")
        if value is None:
            break
        address, _, gw = value.partition(",")
        addresses.append(address)
        gateway = gateway or gw or None
    routes = []
    for i in range(1, 100):
        value = s.get(f"route{i}")
        if value is None:
            break
        routes.append(value)
    out: dict[str, Any] = {"method": s.get("method")}
    if addresses:
        out["addresses"] = addresses
    if gateway:
        out["gateway"] = gateway
    if routes:
        out["routes"] = routes
    if s.get("dns"):
        out["dns"] = [d for d in s["dns"].split(";") if d]
    return out


def connections(kargs: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """What the generator makes of ``kargs``: ``{"hostname": str | None, "connections": {name: {...}}}``
    where each connection has ``type``, ``interface``, ``port-of`` (the bond's connection id, for a bond
    port), ``bond`` (options) or ``vlan`` (``id``, ``parent``), and ``ipv4``/``ipv6`` with ``method``,
    ``addresses``, ``gateway``, ``routes``, ``dns`` (those that are set)."""
    hostname, parsed = _parse(run_generator(kargs))
    by_uuid = {p["connection"]["uuid"]: name for name, p in parsed.items()}
    out: dict[str, Any] = {}
    for name, p in parsed.items():
        c = p["connection"]
        conn: dict[str, Any] = {"type": c["type"], "interface": c.get("interface-name")}
        if c.get("master"):
            conn["port-of"] = by_uuid.get(c["master"], c["master"])
            conn["port-type"] = c.get("slave-type")
        if p.has_section("bond"):
            conn["bond"] = dict(p["bond"])
        if p.has_section("vlan"):
            conn["vlan"] = {"id": p["vlan"]["id"], "parent": p["vlan"]["parent"]}
        for family in ("ipv4", "ipv6"):
            if p.has_section(family):
                conn[family] = _ip(p, family)
        out[name] = conn
    return {"hostname": hostname, "connections": out}
