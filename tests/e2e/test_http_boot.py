"""UEFI HTTP Boot (issue 39): Debian's OVMF, its NIC without option ROM and its PXE entries off, boots from
its own ``UEFI HTTPv4`` entry through ``bootserver dhcp`` (dnsmasq: the vendor class ``HTTPClient`` of client
architecture 16 gets option 60 and ``/loaders/ipxe.efi`` on the server) to the node's script and kernel with
the node's exact kernel arguments; and from its ``UEFI HTTPv6`` entry (its IPv4 stack off, as on a site
without IPv4; DHCPv6 ``bootfile-url`` with the vendor class ``HTTPClient``) it loads the same loader from the
server's IPv6 address, and that iPXE, answered over DHCPv6 by its user class ``iPXE`` with the generic entry
on the IPv6 base URL, boots the node's script, kernel and rootfs over IPv6 with the node's exact kernel
arguments (its static IPv6 ``ip=``).

Everything runs in a network namespace of the test's own (:class:`support.netns.TestNetwork`,
``httpboot-<pid>-<n>``): a bridge with the server's addresses (``192.0.2.1/24``, ``2001:db8::1/64``,
documentation ranges), a tap for the guest, the engine
(``bootserver dhcp``) and ``bootserver serve`` on both addresses; the namespace is removed at the end, also
on failure. The cache is filled (``sync-images``) before the server moves in: the namespace has its own
loopback. One boot per address family.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from support import netns

from . import rig
from .stack import (
    REAL_IGNITION,
    SERIAL_CONSOLE,
    bootserver_command,
    in_ci,
    need,
    run_bootserver,
    stream_metadata,
)

pytestmark = pytest.mark.e2e

OVMF_CODE = Path("/usr/share/OVMF/OVMF_CODE_4M.fd")
OVMF_VARS = Path("/usr/share/OVMF/OVMF_VARS_4M.fd")
NODE, MAC = "hb-0", "52:54:00:e2:e0:51"
V4, V6, PORT = netns.SERVER_IPV4, netns.SERVER_IPV6, 8080


@dataclass
class Lab:
    """The test network (:class:`support.netns.TestNetwork`) and what runs in it."""

    net: netns.TestNetwork
    work: Path
    config: Path
    serve_log: Path
    dhcp_log: Path
    rootfs: bytes


def _wait_for(proc: subprocess.Popen[bytes], log: Path, marker: str, deadline_s: float = 60.0) -> None:
    """Wait until ``marker`` is in ``proc``'s ``log`` (it is ready), at most ``deadline_s`` seconds; fails at
    once when ``proc`` exits."""
    end = time.monotonic() + deadline_s
    while marker not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > end:
            raise AssertionError(f"no {marker!r} in {deadline_s:.0f} s:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(subprocess.TimeoutExpired):  # wait on the process, not a bare sleep
            proc.wait(timeout=0.2)


def _lab(tools: rig.Tools, guest_initramfs: Path, work: Path, dhcp: dict, node: dict) -> Iterator[Lab]:
    """The namespace with ``bootserver serve`` and ``bootserver dhcp`` (its ``dhcp`` mapping) running for one
    node ``node``; removed at the end."""
    need(tools, "qemu", "busybox", "vmlinuz")
    missing = [str(p) for p in (OVMF_CODE, OVMF_VARS) if not p.is_file()]
    missing += [tool for tool in ("dnsmasq",) if not shutil.which(tool)]
    if netns.unavailable():
        missing.append(str(netns.unavailable()))
    if missing:
        if in_ci():
            pytest.fail("UEFI HTTP Boot e2e parts missing: " + ", ".join(missing), pytrace=False)
        pytest.skip("UEFI HTTP Boot e2e parts missing: " + ", ".join(missing))
    assert tools.vmlinuz
    rootfs = os.urandom(1 << 20)
    arts = {"kernel": Path(tools.vmlinuz).read_bytes(), "initramfs": guest_initramfs.read_bytes(), "rootfs": rootfs}
    with rig.StaticServer({}) as upstream:
        doc = stream_metadata(upstream.url("/hb"), arts)
        for kind, art in doc["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["pxe"].items():
            upstream.routes[urllib.parse.urlsplit(art["location"]).path] = arts[kind]
        (work / "hb.json").write_text(json.dumps(doc))
        (work / "real.ign").write_text(json.dumps(REAL_IGNITION))
        config = work / "bootserver.yaml"
        config.write_text(yaml.safe_dump({
            "server": {"listen": [f"{V4}:{PORT}", f"[{V6}]:{PORT}"],
                       "base_url": [f"http://{V4}:{PORT}", f"http://[{V6}]:{PORT}"]},
            "cache_dir": str(work / "cache"), "state_dir": str(work / "state"),
            "streams": {"hb": {"metadata": str(work / "hb.json")}},
            "profiles": {"hb": {"stream": "hb", "mode": "live", "ignition": "real.ign", "console": SERIAL_CONSOLE}},
            "nodes": {NODE: {"profile": "hb", "mac": MAC, "selectable": True, **node}},
            "dhcp": {"interface": netns.BRIDGE, "mode": "full", "ipv6": True, **dhcp},
        }, sort_keys=False))
        p = run_bootserver("sync-images", "--config", str(config), timeout=300)
        assert p.returncode == 0, p.stderr
    with netns.TestNetwork("httpboot") as net:
        net.tap("tapa")
        lab = Lab(net, work, config, work / "serve.log", work / "dhcp.log", rootfs)
        serve = net.start([*bootserver_command(), "serve", "--config", str(config)], log=lab.serve_log)
        dhcp_engine = net.start([*bootserver_command(), "dhcp", "--config", str(config), "--log-level", "debug"],
                                log=lab.dhcp_log)
        _wait_for(serve, lab.serve_log, "listening on")
        _wait_for(dhcp_engine, lab.dhcp_log, f"answers on {netns.BRIDGE}")
        yield lab


@pytest.fixture
def lab4(tools: rig.Tools, guest_initramfs: Path, tmp_path: Path) -> Iterator[Lab]:
    """A pool for the node's DHCPv4 (it has no static address): the firmware's HTTPv4 entry boots."""
    yield from _lab(tools, guest_initramfs, tmp_path, {"range": "192.0.2.100-192.0.2.199"}, {})


@pytest.fixture
def lab6(tools: rig.Tools, guest_initramfs: Path, tmp_path: Path) -> Iterator[Lab]:
    """No IPv4 address for the node (no pool, no static IPv4: no DHCPv4 offer for it) and its static IPv6
    address reserved: the firmware's HTTPv6 entry boots."""
    network = {"interfaces": [{"name": "nic0", "type": "ethernet", "mac-address": MAC,
                               "ipv6": {"enabled": True, "address": [{"ip": "2001:db8::51", "prefix-length": 64}]}}]}
    yield from _lab(tools, guest_initramfs, tmp_path, {}, {"network": network})


def http_boot(tools: rig.Tools, lab: Lab, tmp_path: Path, stop_at: tuple[str, ...] = (),
              family: int = 4) -> rig.BootResult:
    """OVMF (q35) with its PXE entries off (``IPv4PXESupport``, ``IPv6PXESupport``: ``n``), the NIC first in
    the boot order with no option ROM: its first boot entry is ``UEFI HTTPv4``, and the run ends when that
    entry fails.

    ``family=6``: the firmware's IPv4 stack is off too (``IPv4Support``: ``n``, as a site without IPv4 sets
    its firmware), so ``UEFI HTTPv6`` is the first entry (with IPv4 on, the HTTPv4 entry first waits out
    its DHCPv4 retries, about 60 s, on a network without an IPv4 offer). And the boot menu waits 3 s: on
    Debian's OVMF (edk2 2022.11) an HTTPv6 entry that starts before the NIC's link-local address has
    passed duplicate address detection (up to 2 s after the NIC is connected) fails at once (``Unexpected
    network error``: its DHCPv6 start returns ``EFI_NO_MAPPING``, which edk2's PXE waits out and HTTP Boot
    waits out only from edk2-stable202508, "NetworkPkg/HttpBootDxe: Wait for IPv6 DAD before issuing
    DHCPv6 requests")."""
    vars_file = tmp_path / "vars.fd"
    shutil.copyfile(OVMF_VARS, vars_file)
    log = tmp_path / "serial.log"
    argv = [*lab.net.command(["qemu-system-x86_64"]), "-machine", "q35,accel=tcg", "-m", "768",
            "-smp", "1", "-nodefaults", "-display", "none", "-no-reboot",
            "-drive", f"if=pflash,format=raw,unit=0,file={OVMF_CODE},readonly=on",
            "-drive", f"if=pflash,format=raw,unit=1,file={vars_file}",
            "-fw_cfg", "name=opt/org.tianocore/IPv4PXESupport,string=n",
            "-fw_cfg", "name=opt/org.tianocore/IPv6PXESupport,string=n",
            *(["-fw_cfg", "name=opt/org.tianocore/IPv4Support,string=n", "-boot", "menu=on,splash-time=3000"]
              if family == 6 else []),
            "-chardev", f"file,id=s0,path={log}", "-serial", "chardev:s0",
            "-chardev", f"file,id=s1,path={rig.second_serial_log(log)}", "-serial", "chardev:s1",
            "-netdev", "tap,id=n0,ifname=tapa,script=no,downscript=no",
            "-device", f"virtio-net-pci,netdev=n0,mac={MAC},romfile=,bootindex=1"]
    return rig.run_guest(argv, log, "uefi", timeout=420, stop_at=stop_at)


def test_ovmf_http_boots_over_ipv4_to_the_node_script_and_kernel(tools: rig.Tools, lab4: Lab,
                                                                  tmp_path: Path) -> None:
    lab = lab4
    result = http_boot(tools, lab, tmp_path)
    assert ">>Start HTTP Boot over IPv4." in result.log, result.tail(60)
    assert f"URI: http://{V4}:{PORT}/loaders/ipxe.efi" in result.log, result.tail(60)
    assert result.reached_init, f"the guest never ran the initramfs's /init:\n{result.tail(80)}"
    assert result.done and result.failure is None, f"/init failed: {result.failure}\n{result.tail(60)}"
    p = run_bootserver("render", "ipxe", NODE, "--config", str(lab.config), timeout=60)
    assert p.returncode == 0, p.stderr
    expected = rig.expected_cmdline(p.stdout, "uefi").split()
    got = result.cmdline.split() if result.cmdline else []
    # the same words; the stub URL's signature may be of another hour than render's
    assert [w.split("?")[0] for w in got] == [w.split("?")[0] for w in expected], (got, expected)
    assert result.rootfs_sha256 == hashlib.sha256(lab.rootfs).hexdigest()
    served = lab.serve_log.read_text()
    assert "HEAD /loaders/ipxe.efi 200" in served and "GET /loaders/ipxe.efi 200" in served, served[-3000:]


def test_ovmf_http_boots_over_ipv6_to_the_node_script_and_kernel(tools: rig.Tools, lab6: Lab, tmp_path: Path) -> None:
    """The firmware's HTTPv6 entry loads ``ipxe.efi`` from the DHCPv6 ``bootfile-url``; that iPXE asks DHCPv6
    itself (user class ``iPXE``) and chains the generic entry on the IPv6 base URL; the node's script, kernel,
    initramfs and rootfs all come over IPv6, and the kernel brings the node up on its static IPv6 address."""
    lab = lab6
    result = http_boot(tools, lab, tmp_path, family=6)
    assert ">>Start HTTP Boot over IPv6." in result.log, result.tail(60)
    assert "Station IPv6 address is 2001:DB8:0:0:0:0:0:51" in result.log, result.tail(60)
    assert f"URI: http://[{V6}]:{PORT}/loaders/ipxe.efi" in result.log, result.tail(60)
    assert result.reached_init, f"the guest never ran the initramfs's /init:\n{result.tail(80)}"
    assert result.done and result.failure is None, f"/init failed: {result.failure}\n{result.tail(60)}"
    p = run_bootserver("render", "ipxe", NODE, "--family", "6", "--config", str(lab.config), timeout=60)
    assert p.returncode == 0, p.stderr
    expected = rig.expected_cmdline(p.stdout, "uefi").split()
    got = result.cmdline.split() if result.cmdline else []
    assert [w.split("?")[0] for w in got] == [w.split("?")[0] for w in expected], (got, expected)
    assert f"ip=[2001:db8::51]:::64:{NODE}:nic0:none" in got, got
    assert f"coreos.live.rootfs_url=http://[{V6}]:{PORT}/" in result.cmdline, got
    assert result.net == "static 2001:db8::51/64 via", result.tail(20)
    assert result.rootfs_sha256 == hashlib.sha256(lab.rootfs).hexdigest()
    served = lab.serve_log.read_text()
    for line in ("HEAD /loaders/ipxe.efi 200", "GET /loaders/ipxe.efi 200", f"GET /boot.ipxe 200 node={NODE}",
                 "-live-kernel.x86_64 200", "-live-initramfs.x86_64.img 200", "-live-rootfs.x86_64.img 200"):
        assert any(ln.split("access: ")[-1].startswith("2001:db8::51 ") and line in ln for ln in served.splitlines()), (
            line, served[-3000:])
    # the timeline says how it came: iPXE, over IPv6
    shown = run_bootserver("nodes", "show", NODE, "--config", str(lab.config), timeout=60).stdout
    script = [line for line in shown.splitlines() if " script " in line]
    assert script and "via=ipxe" in script[0] and "ip=IPv6" in script[0], shown
    # and the first mile over DHCPv6: the firmware's answer (the loader's URL), then iPXE's (the generic entry)
    dhcp = [line for line in shown.splitlines() if " dhcp " in line]
    assert [line.split()[3:] for line in dhcp[:2]] == [
        ["2001:db8::51", "address=2001:db8::51", f"file=http://[{V6}]:{PORT}/loaders/ipxe.efi", "mode=full"],
        ["2001:db8::51", "address=2001:db8::51", f"file=http://[{V6}]:{PORT}/boot.ipxe?mac=${{net0/mac}}",
         "mode=full"]], shown
