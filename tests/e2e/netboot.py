"""The rig of the DHCP engine's network: a bootserver stack inside a test network namespace
(:class:`support.netns.TestNetwork`), and QEMU guests on its bridge that boot from the firmware's
network stack, as machines on a provisioning network do.

- :func:`stack` writes a config (the e2e cache and stream of ``conftest.e2e_source``, a fresh
  ``state_dir``, ``server`` on ``192.0.2.1:8080``, the given ``dhcp:`` mapping, nodes, ``include:
  nodes.d/*.yaml``), starts ``bootserver serve`` and (unless ``dhcp`` is ``None``) ``bootserver dhcp``
  inside the namespace, waits until both are up, and yields a :class:`NetStack`.
- :func:`pxe_command` is the QEMU argv of a guest on a tap of the namespace: ``bios`` (SeaBIOS with
  iPXE's PXE ROM, its console mirrored to the serial port) or ``uefi`` (OVMF with the NIC's ROM empty:
  OVMF's own PXE does the first DHCP and TFTP; its IPv6 PXE off so it does not wait on it first), and
  :func:`boot` runs it to the end of the guest's ``/init`` (:func:`rig.run_guest`).

For other tests on this network (HTTP Boot, IPv6, the installer's life, the playground): take a
:class:`NetStack` from :func:`stack` (or a :class:`~support.netns.TestNetwork` and your own
processes), a tap per guest (``net.tap("tapN")``), and :func:`pxe_command`'s argv as a start.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from support.netns import SERVER_IPV4, TestNetwork

from . import rig
from .stack import bootserver_command, run_bootserver, write_stack_config

#: The server's port inside the namespace (the namespace is the test's own: no other listener there).
PORT = 8080
BASE_URL = f"http://{SERVER_IPV4}:{PORT}"


def static_network(mac: str, address: str, gateway: str = SERVER_IPV4, ipv6: str | None = None) -> dict[str, Any]:
    """An NMState network: the NIC with ``mac`` at the static ``address`` (``192.0.2.N/24``) with its
    default route via ``gateway``, and the static IPv6 address ``ipv6`` (``2001:db8::N/64``) if given."""
    ip, prefix = address.split("/")
    nic: dict[str, Any] = {"name": "nic0", "type": "ethernet", "mac-address": mac,
                           "ipv4": {"enabled": True, "address": [{"ip": ip, "prefix-length": int(prefix)}]}}
    if ipv6:
        ip6, prefix6 = ipv6.split("/")
        nic["ipv6"] = {"enabled": True, "address": [{"ip": ip6, "prefix-length": int(prefix6)}]}
    return {"interfaces": [nic], "routes": {"config": [{"destination": "0.0.0.0/0", "next-hop-address": gateway,
                                                        "next-hop-interface": "nic0"}]}}


@dataclasses.dataclass
class NetStack:
    """``serve`` and ``bootserver dhcp`` running in ``net``: the config file, its folder, the logs, and
    the ``bootserver dhcp`` process (``None`` without ``dhcp:``)."""

    net: TestNetwork
    config: Path
    work: Path
    serve_log: Path
    dhcp_log: Path
    dhcp: Any = None

    def bootserver(self, *args: str, timeout: float = 60.0) -> Any:
        """Run ``bootserver ARGS --config <config>`` on the host (it reads files only)."""
        return run_bootserver(*args, "--config", str(self.config), timeout=timeout)

    def events(self, node: str) -> list[str]:
        """The node's timeline events, oldest first (``bootserver nodes show``'s event column)."""
        p = self.bootserver("nodes", "show", node)
        assert p.returncode == 0, p.stderr
        rows = [line.split() for line in p.stdout.splitlines()]
        return [row[2] for row in rows if len(row) > 2 and re.match(r"^\d{4}-\d\d-\d\d$", row[0])]

    def dnsmasq_pid(self) -> int:
        """dnsmasq's process id, from its pid file in ``state_dir/dhcp``."""
        return int((self.work / "state" / "dhcp" / "dnsmasq.pid").read_text().strip())

    def wait_log(self, pattern: str, timeout: float = 30.0, log: Path | None = None) -> re.Match[str]:
        """Wait until ``pattern`` (a regex) shows up in the dhcp engine's log (or ``log``); its match."""
        path = log or self.dhcp_log
        end = time.monotonic() + timeout
        while True:
            text = path.read_text(errors="replace") if path.exists() else ""
            match = re.search(pattern, text, re.MULTILINE)
            if match:
                return match
            if self.dhcp is not None and self.dhcp.poll() is not None and log is None:
                raise AssertionError(f"bootserver dhcp exited {self.dhcp.returncode}:\n{text[-3000:]}")
            if time.monotonic() >= end:
                raise AssertionError(f"no {pattern!r} within {timeout} s in {path}:\n{text[-3000:]}")
            with contextlib.suppress(Exception):  # wait on the process where there is one, else briefly
                (self.dhcp or self.net.processes[0]).wait(timeout=0.2)


def write_config(source: Path, folder: Path, dhcp: dict[str, Any] | None, nodes: dict[str, Any],
                 server: dict[str, Any] | None = None, top: dict[str, Any] | None = None) -> Path:
    """The stack's config beside the e2e source's (its cache, stream and real config), with ``state_dir``
    and the included ``nodes.d/`` in ``folder``; ``top``: top-level keys that replace the stack's (e.g.
    ``streams`` and ``profiles`` of another architecture); returns its path."""
    path = write_stack_config(source, f"{folder.name}.yaml", port=PORT, base_url=BASE_URL,
                              state_dir=folder / "state")
    doc = yaml.safe_load(path.read_text())
    doc["server"] = {"listen": f"0.0.0.0:{PORT}", "base_url": BASE_URL, "discovery": {"every": 5},
                     **(server or {})}
    doc["nodes"] = nodes
    doc["include"] = [f"{folder.name}/nodes.d/*.yaml"]
    (folder / "nodes.d").mkdir(exist_ok=True)
    if dhcp is not None:
        doc["dhcp"] = dhcp
    doc.update(top or {})
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@contextlib.contextmanager
def stack(net: TestNetwork, source: tuple[Path, dict[str, bytes], dict], dhcp: dict[str, Any] | None,
          nodes: dict[str, Any], server: dict[str, Any] | None = None, engine: bool = True,
          top: dict[str, Any] | None = None) -> Iterator[NetStack]:
    """``serve`` and ``bootserver dhcp`` for ``dhcp`` and ``nodes`` inside ``net`` (see the module
    docstring); both stopped at the end. ``engine=False``: the ``dhcp:`` mapping without ``bootserver
    dhcp`` (another DHCP server runs from ``--print``). ``source`` is ``conftest.e2e_source`` (its cache is shared;
    each stack has its own folder there, with its state and logs), or a folder of the same shape whose
    ``streams`` and ``profiles`` ``top`` names (:func:`write_config`)."""
    folder = Path(tempfile.mkdtemp(dir=source[0], prefix="net-"))
    config = write_config(source[0], folder, dhcp, nodes, server, top)
    serve_log, dhcp_log = folder / "serve.log", folder / "dhcp.log"
    serve = net.start([*bootserver_command(), "serve", "--config", str(config)], log=serve_log)
    end = time.monotonic() + 30
    while net.http_get(f"{BASE_URL}/healthz", timeout=2)[0] != 200:
        if serve.poll() is not None or time.monotonic() > end:
            raise AssertionError(f"serve did not come up in the namespace:\n{serve_log.read_text()[-3000:]}")
        with contextlib.suppress(Exception):
            serve.wait(timeout=0.2)
    s = NetStack(net, config, folder, serve_log, dhcp_log)
    if dhcp is not None and engine:
        s.dhcp = net.start([*bootserver_command(), "dhcp", "--config", str(config), "--log-level", "debug"],
                           log=dhcp_log)
        s.wait_log(r"bootserver.dhcp: dnsmasq \(process \d+\) answers on")
    try:
        yield s
    finally:
        if s.dhcp is not None:
            net.stop(s.dhcp)
        net.stop(serve)


def sercon_file(folder: Path) -> Path:
    """The ``fw_cfg`` file that makes SeaBIOS mirror its console (and the iPXE ROM's) to COM1 (0x3f8)."""
    path = folder / "sercon-port"
    path.write_bytes(bytes([0xF8, 0x03, 0x00, 0x00]))
    return path


def pxe_command(tools: rig.Tools, net: TestNetwork, tap: str, log_path: Path, mac: str, firmware: str,
                memory_mb: int = 512) -> list[str]:
    """The QEMU argv (run inside ``net``) of a guest whose NIC is tap ``tap`` with ``mac``, booting from
    the network: ``bios`` SeaBIOS with iPXE's PXE ROM (QEMU's default ROM of the NIC, from Debian's
    ``ipxe-qemu``; named explicitly with ``romfile=`` SeaBIOS does not run it here), which does DHCP
    with user class ``iPXE``;
    ``uefi`` OVMF's own PXE (``romfile=``: DHCP and TFTP by the firmware, IPv6 PXE off). Two serial
    ports as :func:`rig.qemu_command` has them. Raises :class:`rig.RigError` when a part is missing."""
    missing = tools.missing("qemu", *(("ipxe_efi_rom",) if firmware == "bios" else ("ovmf",)))
    if missing:
        raise rig.RigError("missing: " + "; ".join(missing))
    argv = [tools.qemu or "", "-machine", "pc,accel=tcg,graphics=off", "-m", str(memory_mb), "-smp", "1",
            "-nodefaults", "-display", "none", "-no-reboot", "-boot", "n",
            "-netdev", f"tap,id=n0,ifname={tap},script=no,downscript=no"]
    if firmware == "uefi":
        argv += ["-bios", tools.ovmf or "",
                 "-fw_cfg", "name=opt/org.tianocore/IPv6PXESupport,string=n",
                 "-chardev", f"file,id=s0,path={log_path}", "-serial", "chardev:s0",
                 "-chardev", f"file,id=s1,path={rig.second_serial_log(log_path)}", "-serial", "chardev:s1",
                 "-device", f"virtio-net-pci,netdev=n0,mac={mac},romfile=,bootindex=1"]
    else:
        argv += ["-fw_cfg", f"name=etc/sercon-port,file={sercon_file(log_path.parent)}",
                 "-chardev", f"file,id=s0,path={log_path},mux=on", "-serial", "chardev:s0", "-serial", "chardev:s0",
                 "-device", f"virtio-net-pci,netdev=n0,mac={mac},bootindex=1"]
    return net.command(argv)


def boot(tools: rig.Tools, net: TestNetwork, tap: str, log_path: Path, mac: str, firmware: str,
         timeout: float = 120.0) -> rig.BootResult:
    """Boot a guest as :func:`pxe_command` says until its ``/init`` ends (or the firmware gives up, the
    kernel panics, ``timeout`` seconds); QEMU is always stopped. The parsed serial log."""
    return rig.run_guest(pxe_command(tools, net, tap, log_path, mac, firmware), log_path, firmware, timeout)


__all__ = ["BASE_URL", "PORT", "NetStack", "boot", "pxe_command", "stack", "static_network", "write_config"]
