"""arm64 over UEFI HTTP Boot (issue 39): Debian's AAVMF in ``qemu-system-aarch64 -M virt`` (TCG), its
virtio NIC without option ROM and its PXE entries off (``-fw_cfg opt/org.tianocore/IPv4PXESupport`` and
``IPv6PXESupport`` set to ``n``), boots from its own ``UEFI HTTPv4`` entry through ``bootserver dhcp``
(dnsmasq: the vendor class ``HTTPClient`` of client architecture 19 gets option 60 ``HTTPClient`` and
``/loaders/grubaa64.efi`` on the server), that arm64 GRUB sources the node's ``/boot.grub`` on the
firmware's address (one DHCP answer) and boots the node's arm64 kernel with its exact kernel arguments.
One boot, stopped as soon as the kernel prints its command line (the rest of an arm64 boot, to
``/init``, is tests/e2e/test_arm64_boot.py's).

Everything runs in a network namespace of the test's own (:class:`support.netns.TestNetwork`,
``aavmf-<pid>-<n>``) with ``bootserver serve`` and ``bootserver dhcp`` in it (:func:`netboot.stack`);
the cache is filled (``sync-images``) before: the namespace has its own loopback.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support import netns
from support.netns import SERVER_IPV4

from . import netboot, rig
from .stack import REAL_IGNITION, run_bootserver, serve_release

pytestmark = pytest.mark.e2e

NODE, MAC = "arm-hb-0", "52:54:00:e2:e0:b1"
#: Seconds for the whole boot: firmware, DHCP, GRUB over HTTP, the 32 MB kernel over GRUB's HTTP, its first
#: lines (about 60 s under TCG on a loaded machine).
BOOT_TIMEOUT = 240.0
#: The kernel's line with its command line (printed once the console is up).
KERNEL_COMMAND_LINE = re.compile(r"Kernel command line: (.*)")


def top(work: Path) -> dict:
    """The config's ``streams`` (one aarch64 stream whose metadata is ``work/stream.json``) and ``profiles``."""
    return {"streams": {"fcos-arm": {"metadata": str(work / "stream.json"), "architectures": ["aarch64"]}},
            "profiles": {"arm-live": {"stream": "fcos-arm", "arch": "aarch64", "mode": "live",
                                      "ignition": "real.ign", "kargs": ["e2e.arm64=http"]}}}


@pytest.fixture
def arm64(tools: rig.Tools) -> rig.Arm64Tools:
    """The arm64 guest's parts (QEMU, AAVMF, Debian's arm64 kernel: .ci/prepare.d/arm64.sh)."""
    found = rig.find_arm64_tools(tools.busybox)
    if found.missing():
        netns.skip_or_fail("e2e tool missing: " + "; ".join(found.missing()) + " (see docs/testing.md)")
    return found


@pytest.fixture
def source(arm64: rig.Arm64Tools, tmp_path: Path) -> tuple[Path, dict[str, bytes], dict]:
    """A synced cache of one aarch64 release: Debian's arm64 kernel, an initramfs and a rootfs of random
    bytes (the boot stops at the kernel's first lines). Returns (folder, artifacts, stream metadata)."""
    assert arm64.vmlinuz
    work = tmp_path / "source"
    work.mkdir()
    artifacts = {"kernel": Path(arm64.vmlinuz).read_bytes(), "initramfs": os.urandom(1 << 16),
                 "rootfs": os.urandom(1 << 16)}
    with rig.StaticServer({}) as upstream:
        doc = serve_release(upstream, artifacts, arch="aarch64")
        (work / "stream.json").write_text(json.dumps(doc))
        (work / "real.ign").write_text(json.dumps(REAL_IGNITION))
        config = work / "sync.yaml"
        config.write_text(yaml.safe_dump({"cache_dir": str(work / "cache"), **top(work)}))
        p = run_bootserver("sync-images", "--config", str(config), timeout=120)
        assert p.returncode == 0, p.stderr
    return work, artifacts, doc


@pytest.fixture
def net() -> Iterator[netns.TestNetwork]:
    """A test network namespace (``aavmf-...``), removed at the end, also on failure."""
    with netns.lab("aavmf", ("dnsmasq", "dnsmasq-base")) as network:
        yield network


def http_boot_command(arm64: rig.Arm64Tools, net: netns.TestNetwork, tap: str, vars_file: Path, log: Path,
                      mac: str) -> list[str]:
    """The argv (inside ``net``) of an arm64 machine whose firmware HTTP-boots: AAVMF in its two flash
    banks (``vars_file``: a copy of the variable store), its PXE entries off, PL011 serial into ``log``,
    a virtio NIC on tap ``tap`` with no option ROM, first in the boot order."""
    return net.command([
        arm64.qemu or "", "-machine", "virt,accel=tcg", "-cpu", "cortex-a57", "-m", "1024", "-smp", "1",
        "-nodefaults", "-display", "none", "-no-reboot",
        "-drive", f"if=pflash,format=raw,readonly=on,file={arm64.aavmf_code}",
        "-drive", f"if=pflash,format=raw,file={vars_file}",
        "-fw_cfg", "name=opt/org.tianocore/IPv4PXESupport,string=n",
        "-fw_cfg", "name=opt/org.tianocore/IPv6PXESupport,string=n",
        "-chardev", f"file,id=s0,path={log}", "-serial", "chardev:s0",
        "-netdev", f"tap,id=n0,ifname={tap},script=no,downscript=no",
        "-device", f"virtio-net-pci,netdev=n0,mac={mac},romfile=,bootindex=1"])


def test_aavmf_http_boots_the_arm64_grub_to_the_node_script_and_kernel(
        arm64: rig.Arm64Tools, source: tuple[Path, dict[str, bytes], dict], net: netns.TestNetwork,
        tmp_path: Path) -> None:
    nodes = {NODE: {"profile": "arm-live", "mac": MAC, "selectable": True}}
    dhcp = {"interface": netns.BRIDGE, "mode": "full", "range": "192.0.2.100-192.0.2.199"}
    with netboot.stack(net, source, dhcp, nodes, top=top(source[0])) as s:
        url = f"{netboot.BASE_URL}/loaders/grubaa64.efi"
        assert arm64.aavmf_vars
        vars_file = tmp_path / "vars.fd"
        shutil.copyfile(arm64.aavmf_vars, vars_file)
        log = tmp_path / "serial.log"
        argv = http_boot_command(arm64, net, net.tap("tapa"), vars_file, log, MAC)
        result = rig.run_guest(argv, log, "uefi", BOOT_TIMEOUT, stop_at=("Kernel command line:",))
        print(f"AAVMF HTTP Boot to the kernel's command line: {result.seconds:.1f} s")
        # the firmware's own HTTPv4 entry took the offer's URL (PXE is off) and started the arm64 GRUB
        assert 'starting Boot0001 "UEFI HTTPv4' in result.log and f"URI: {url}" in result.log, result.tail(60)
        address = re.search(r"Station IP address is (\S+)", result.log)
        assert address and "Welcome to GRUB!" in result.log, result.tail(60)
        # which sourced the node's GRUB script, and the kernel runs with the node's kernel arguments exactly
        rendered = s.bootserver("render", "grub", NODE)
        assert rendered.returncode == 0, rendered.stderr
        kernel, *kargs = rig.grub_kernel_line(rendered.stdout)
        assert kernel.startswith(f"(http,{SERVER_IPV4}:{netboot.PORT})/artifacts/fcos-arm/aarch64/"), kernel
        got = KERNEL_COMMAND_LINE.search(result.log)
        assert got, result.tail(60)
        assert got.group(1).strip() == " ".join([f"BOOT_IMAGE={kernel}", *kargs]), (got.group(1), kargs)
        assert "e2e.arm64=http" in kargs and "console=ttyAMA0,115200" in kargs
        # the server saw the firmware's HEAD and GET of the loader, then GRUB's /boot.grub, from that address
        guest = address.group(1)
        served = [line.split("bootserver.access: ", 1)[1] for line in s.serve_log.read_text().splitlines()
                  if f"bootserver.access: {guest} " in line]
        assert [" ".join(line.split()[1:5]) for line in served[:3]] == [
            "HEAD /loaders/grubaa64.efi 200 node=-", "GET /loaders/grubaa64.efi 200 node=-",
            f"GET /boot.grub 200 node={NODE}"], served
        # and the node's timeline: the DHCP answer with the loader's URL, then the script GRUB fetched
        shown = s.bootserver("nodes", "show", NODE).stdout.splitlines()
        rows = [line.split(None, 4) for line in shown if re.match(r"^\d{4}-\d\d-\d\d ", line)]
        assert [row[2] for row in rows[:3]] == ["dhcp", "script", "kernel-requested"], shown
        assert f"file={url}" in rows[0][4] and "via=grub" in rows[1][4] and "ip=IPv4" in rows[1][4], shown
        # GRUB took the firmware's address: the machine asked DHCP once
        acks = re.findall(rf"DHCPACK\(br0\) \S+ {MAC}", s.dhcp_log.read_text())
        assert len(acks) == 1, acks
