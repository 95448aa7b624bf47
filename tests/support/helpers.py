"""Helpers shared by the tests and the benchmark scripts in ``benchmarks/`` (which put ``tests/`` on
``sys.path``): the one copy of each. Not part of bootserver. Everything here talks to 127.0.0.1 only;
units are bytes and seconds."""

from __future__ import annotations

import random
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from bootserver.cli import main
from bootserver.state.sqlite_timeline import Timeline
from support import netns
from support.forked_cli import run_forked

REPO = Path(__file__).resolve().parents[2]
#: The public reference data (stream metadata, pointer configs, the Equinix Metal OpenAPI spec), copied
#: unmodified, with its provenance in ``tests/data/SOURCES.md``.
REFERENCE = REPO / "tests" / "data"
#: The official Ignition config schemas that ship with the product.
SCHEMAS = REPO / "ignition" / "schema"
BOOTSERVER = [sys.executable, "-m", "bootserver"]


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (``net.ipv4.ip_local_port_range``), ``(32768, 60999)`` if unreadable."""
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, and the port after it too (``serve``'s
    default admin listener, ``server.admin.listen``, is the next port).

    Chosen at random below the kernel's ephemeral range, never from it: a port the kernel handed out
    with ``bind(0)`` and we released is the next one it gives any process's outgoing connection, so a
    server started on it a moment later could find it taken (seen with several test runs on one
    machine). Ports below the range are only ever taken by someone binding them on purpose.

    Raises ``OSError`` when 200 tries found no two free consecutive ports."""
    low, _ = _ephemeral_range()
    top = max(low - 2, 10001)
    for _ in range(200):
        port = random.randrange(10000, top)
        with socket.socket() as s, socket.socket() as after:
            try:
                s.bind(("127.0.0.1", port))
                after.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    raise OSError("no two free consecutive ports on 127.0.0.1 below the ephemeral range")


def write_config(path: Path, doc: dict[str, Any]) -> Path:
    """Write ``doc`` as YAML (key order kept) to ``path``; return ``path``."""
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def cli(capsys: Any, *args: str) -> tuple[int, str, str]:
    """Run ``bootserver ARGS`` in this process (``bootserver.cli.main``); its exit status and what it
    printed (``capsys``, pytest's capture fixture): (status, stdout, stderr)."""
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


async def run_cli(*args: str, timeout: float = 60, cwd: Path | None = None) -> tuple[int, str, str]:
    """Run ``bootserver ARGS`` in a process of its own (in its own process group, in ``cwd``) without
    blocking the event loop; returns ``(rc, stdout, stderr)``. After ``timeout`` seconds the group is
    killed and ``asyncio.TimeoutError`` raised. The process is forked from the session's server that has
    imported the command line (:mod:`support.forked_cli`), not a new ``python -m bootserver``."""
    return await run_forked(args, timeout, cwd)


def recorded_devices(state_dir: Path) -> dict[str, dict[str, Any]]:
    """The device records (``{node: record}``) in the sqlite state store of ``state_dir``: what
    ``provision`` recorded and ``deprovision`` cleared, as ``devices`` and the server read them."""
    timeline = Timeline(state_dir)
    try:
        return timeline.devices()
    finally:
        timeline.close()


def checkin_command(stub: dict[str, Any]) -> list[str]:
    """The command line of the check-in unit (``bootserver-checkin.service``) in Ignition config
    ``stub``: its ``ExecStart=`` split as systemd does for the quoting bootserver writes (double quotes,
    ``%%`` and ``$$`` for a literal ``%`` and ``$``). Raises ``StopIteration`` when there is none."""
    import shlex

    unit = next(u for u in stub.get("systemd", {}).get("units", []) if u["name"] == "bootserver-checkin.service")
    line = next(x for x in unit["contents"].splitlines() if x.startswith("ExecStart="))
    return [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(line.removeprefix("ExecStart="))]


def config_accepted(argv: list[str], text: str, path: Path) -> None:
    """The real DHCP server's own check of a config (``dnsmasq --test -C``, ``kea-dhcp4 -t``: it reads the
    file and binds nothing) passes on ``text``, written to ``path``; skipped when the program is not installed
    (Debian: ``dnsmasq-base``, ``kea-dhcp4-server``, ``kea-dhcp6-server``), a failure under CI, which installs
    them (:func:`support.netns.skip_or_fail`)."""
    prog = netns.program(argv[0]) or netns.skip_or_fail(f"{argv[0]} is not installed")
    path.write_text(text)
    check = subprocess.run([prog, *argv[1:], str(path)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
