"""An arm64 machine boots from bootserver through its arm64 GRUB: Debian's AAVMF firmware in
``qemu-system-aarch64 -M virt`` PXE-loads ``grubaa64.efi`` over TFTP from the folder ``bootserver loaders``
wrote (QEMU's user network plays the DHCP and TFTP server, answering client architecture 11 with that
file, as docs/on-premises.md's DHCP examples do); that GRUB sources ``/boot.grub?mac=<its MAC>`` from a
real ``serve``, which answers the node's boot in GRUB's form; GRUB fetches the node's arm64 kernel
(Debian's ``linux-image-*-arm64``, unpacked by .ci/prepare.d/arm64.sh) and initramfs over HTTP and
boots them with the node's kernel arguments, ``console=ttyAMA0,115200`` among them. One boot, ~30 s
under TCG (the 32 MB kernel is most of it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.helpers import free_port
from support.netns import in_ci
from support.server import serving

from . import rig
from .stack import REAL_IGNITION, bootserver_command, run_bootserver, serve_release

pytestmark = pytest.mark.e2e

BOOT_TIMEOUT = 180.0  # seconds; a healthy boot takes ~30 s under TCG
#: An arm64 machine no node matches (discovered through GRUB, then adopted), with its SMBIOS type 1 facts.
UNKNOWN_MAC = "52:54:00:e2:e0:a3"
#: The unknown machine's node, once adopted.
ADOPTED = "arm-adopted"
UNKNOWN_FACTS = {"manufacturer": "Acme Arm", "product": "Arm Box 8", "serial": "ARM-SN-7"}
#: Seconds between the waiting machine's asks (server.discovery.every).
EVERY = 5
NODE, MAC = "arm-0", "52:54:00:e2:e0:a1"
#: A node with a static network in QEMU's user network: it boots its own image (``bootserver iso``), no DHCP.
ISO_NODE, ISO_MAC = "arm-iso-0", "52:54:00:e2:e0:a2"
ISO_NETWORK = {
    "interfaces": [{"name": "nic0", "type": "ethernet", "mac-address": ISO_MAC,
                    "ipv4": {"enabled": True, "address": [{"ip": "10.0.2.15", "prefix-length": 24}]}}],
    "routes": {"config": [{"destination": "0.0.0.0/0", "next-hop-address": "10.0.2.2"}]},
    "dns-resolver": {"config": {"server": ["10.0.2.3"]}},
}


@pytest.fixture(scope="module")
def arm64(tools: rig.Tools) -> rig.Arm64Tools:
    found = rig.find_arm64_tools(tools.busybox)
    missing = found.missing()
    if missing:
        msg = "e2e tool missing: " + "; ".join(missing) + " (see docs/testing.md)"
        if in_ci():
            pytest.fail(msg + " [CI is set, so this is a failure, not a skip]", pytrace=False)
        pytest.skip(msg)
    return found


@pytest.fixture(scope="module")
def arm64_stack(arm64: rig.Arm64Tools, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int, dict]]:
    """An upstream with the arm64 kernel, the test initramfs built for arm64 and a rootfs; ``sync-images``;
    then ``serve`` on 127.0.0.1 with base URL ``http://GUEST_HOST:port``, one live aarch64 node found by
    its MAC. Yields (config, port, artifacts)."""
    work = tmp_path_factory.mktemp("arm64")
    assert arm64.busybox and arm64.modules_dir and arm64.vmlinuz
    rig.build_initramfs(work / "initramfs.img", arm64.busybox, arm64.modules_dir)
    artifacts = {"kernel": Path(arm64.vmlinuz).read_bytes(), "initramfs": (work / "initramfs.img").read_bytes(),
                 "rootfs": os.urandom(1 << 20)}
    port = free_port()
    with rig.StaticServer({}) as upstream:
        doc = serve_release(upstream, artifacts, arch="aarch64")
        (work / "stream.json").write_text(json.dumps(doc))
        (work / "real.ign").write_text(json.dumps(REAL_IGNITION))
        config = work / "bootserver.yaml"
        config.write_text(yaml.safe_dump({
            "server": {"listen": f"127.0.0.1:{port}", "base_url": f"http://{rig.GUEST_HOST}:{port}",
                       "admin": {"listen": f"127.0.0.1:{free_port()}"}, "discovery": {"every": EVERY}},
            "cache_dir": str(work / "cache"), "state_dir": str(work / "state"),
            "streams": {"fcos-arm": {"metadata": str(work / "stream.json"), "architectures": ["aarch64"]}},
            "profiles": {"arm-live": {"stream": "fcos-arm", "arch": "aarch64", "mode": "live",
                                      "ignition": "real.ign", "platform_id": "metal", "kargs": ["e2e.arm64=yes"]}},
            "nodes": {NODE: {"profile": "arm-live", "mac": MAC, "selectable": True},
                      ISO_NODE: {"profile": "arm-live", "mac": ISO_MAC, "network": ISO_NETWORK}},
            "include": [str(work / "nodes.d" / "*.yaml")],
        }, sort_keys=False))
        (work / "nodes.d").mkdir()
        p = run_bootserver("sync-images", "--config", str(config), timeout=120)
        assert p.returncode == 0, p.stderr
    with serving(["--config", str(config)], f"http://127.0.0.1:{port}/healthz", work / "serve.log",
                 command=bootserver_command()):
        yield config, port, artifacts


def test_the_loaders_folder_and_the_servers_stable_path_hold_the_same_arm64_grub(
        arm64_stack: tuple[Path, int, dict], tmp_path: Path) -> None:
    """``bootserver loaders`` writes the arm64 GRUB beside the x86 loaders, and ``serve`` answers the same
    bytes at its stable path (for UEFI HTTP Boot). The machine that PXE-loads it and boots through it to
    its node's kernel with exactly its kargs is the adopted one of
    :func:`test_an_unknown_arm64_machine_is_discovered_through_grub_then_adopted_and_boots_without_a_reset`:
    a boot of a known node's of its own repeated that one's second half (about 17-48 s of ``make test``)."""
    config, port, _ = arm64_stack
    tftp = tmp_path / "tftp"
    p = run_bootserver("loaders", str(tftp), "--config", str(config), timeout=120)
    assert p.returncode == 0, p.stderr
    assert sorted(Path(line).name for line in p.stdout.split()) == ["grubaa64.efi", "ipxe.efi", "undionly.kpxe"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/loaders/grubaa64.efi", timeout=30) as r:
        assert r.read() == (tftp / "grubaa64.efi").read_bytes()


def test_arm64_guest_boots_its_uefi_only_image_without_dhcp(arm64: rig.Arm64Tools,
                                                            arm64_stack: tuple[Path, int, dict],
                                                            tmp_path: Path) -> None:
    """``bootserver iso`` of an aarch64 node: a UEFI-only image whose arm64 GRUB sets the node's static
    address and sources its signed ``/grub/<node>``; the kernel runs with the node's ``ip=`` karg."""
    config, port, artifacts = arm64_stack
    image = tmp_path / "arm-iso-0.iso"
    p = run_bootserver("iso", ISO_NODE, "--output", str(image), "--config", str(config), timeout=120)
    assert p.returncode == 0, p.stderr
    assert "static 10.0.2.15/24 via 10.0.2.2" in p.stderr
    rendered = run_bootserver("render", "grub", ISO_NODE, "--config", str(config), timeout=60)
    kernel, *kargs = rig.grub_kernel_line(rendered.stdout)
    assert arm64.aavmf_vars is not None
    vars_file = tmp_path / "vars.fd"
    shutil.copy(arm64.aavmf_vars, vars_file)
    log = tmp_path / "serial.log"
    argv = rig.arm64_command(arm64, None, None, vars_file, log, port, ISO_MAC, cdrom=image)
    result = rig.run_guest(argv, log, "uefi", BOOT_TIMEOUT)
    assert result.reached_init, f"the guest never ran the initramfs's /init:\n{result.tail(60)}"
    assert result.done and result.failure is None, f"/init failed: {result.failure}\n{result.tail(60)}"
    assert result.cmdline == " ".join([f"BOOT_IMAGE={kernel}", *kargs]), (result.cmdline, kargs)
    assert "ip=10.0.2.15::10.0.2.2:24:arm-iso-0:nic0:none" in kargs and "console=ttyAMA0,115200" in kargs
    assert result.net == "static 10.0.2.15/24 via 10.0.2.2"
    assert result.rootfs_sha256 == hashlib.sha256(artifacts["rootfs"]).hexdigest()


def test_an_unknown_arm64_machine_is_discovered_through_grub_then_adopted_and_boots_without_a_reset(
        arm64: rig.Arm64Tools, arm64_stack: tuple[Path, int, dict], tmp_path: Path) -> None:
    """The arm64 GRUB's ``/boot.grub`` for a MAC no node has: GRUB's discovery script reports the MAC,
    ``arm64``/``efi`` and the SMBIOS facts QEMU gives the machine, then waits and asks again; after
    ``bootserver nodes adopt`` the same machine, never reset, boots its node's kernel to ``/init``."""
    config, port, artifacts = arm64_stack
    tftp = tmp_path / "tftp"
    p = run_bootserver("loaders", str(tftp), "--config", str(config), timeout=120)
    assert p.returncode == 0, p.stderr
    assert arm64.aavmf_vars is not None
    vars_file = tmp_path / "vars.fd"
    shutil.copy(arm64.aavmf_vars, vars_file)
    log = tmp_path / "serial.log"
    log.write_bytes(b"")
    smbios = "type=1," + ",".join(f"{k}={v}" for k, v in UNKNOWN_FACTS.items())
    argv = [*rig.arm64_command(arm64, tftp, "grubaa64.efi", vars_file, log, port, UNKNOWN_MAC), "-smbios", smbios]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        end = time.monotonic() + BOOT_TIMEOUT
        row = None
        while row is None:
            assert proc.poll() is None, f"QEMU exited {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}"
            assert time.monotonic() < end, f"not discovered in time:\n{log.read_text(errors='replace')[-3000:]}"
            listed = run_bootserver("nodes", "discovered", "--config", str(config), timeout=60)
            assert listed.returncode == 0, listed.stderr
            row = next((r for r in listed.stdout.splitlines() if r.startswith(UNKNOWN_MAC)), None)
            if row is None:
                time.sleep(1)  # polling interval (a CLI run each), bounded by the deadline above
        for value in (*UNKNOWN_FACTS.values(), "aarch64 (arm64)/efi"):
            assert value.replace(" ", " ") in row, row
        assert "bootserver: this machine is not a node yet" in log.read_text(errors="replace")
        p = run_bootserver("nodes", "adopt", "--file=", UNKNOWN_MAC, "--name", ADOPTED, "--profile", "arm-live",
                           "--config", str(config), timeout=60)
        assert p.returncode == 0 and "the server reloaded" in p.stdout, (p.stdout, p.stderr)
        rendered = run_bootserver("render", "grub", ADOPTED, "--config", str(config), timeout=60)
        assert rendered.returncode == 0, rendered.stderr
        end = time.monotonic() + BOOT_TIMEOUT
        while rig.MARK_DONE not in log.read_text(errors="replace"):
            assert proc.poll() is None or rig.MARK_DONE in log.read_text(errors="replace"), \
                log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < end, log.read_text(errors="replace")[-3000:]
            time.sleep(0.5)  # polling interval, bounded by the deadline above
        result = rig.parse_serial_log(log.read_text(errors="replace"))
        assert result["failure"] is None, result
        assert result["rootfs_sha256"] == hashlib.sha256(artifacts["rootfs"]).hexdigest()
        # GRUB names the kernel it loaded first (BOOT_IMAGE=), then the node's kernel arguments, exactly (the
        # signed URLs' expiry is rounded up to the hour: a boot across the hour matches the render before it)
        lines = [rig.grub_kernel_line(render.stdout) for render in (
            rendered, run_bootserver("render", "grub", ADOPTED, "--config", str(config), timeout=60))]
        kernel, *kargs = next((line for line in lines if result["cmdline"] == " ".join([f"BOOT_IMAGE={line[0]}",
                                                                                         *line[1:]])), lines[-1])
        assert result["cmdline"] == " ".join([f"BOOT_IMAGE={kernel}", *kargs]), (result["cmdline"], kargs)
        assert "console=ttyAMA0,115200" in kargs and "e2e.arm64=yes" in kargs
        assert "ignition.platform.id=metal" in kargs
        # GRUB hands the EFI stub its initramfs: no iPXE initrd=main, so no stub error on the console
        assert "initrd=main" not in kargs and "EFI stub: ERROR" not in log.read_text(errors="replace")
        assert kernel.startswith(f"(http,{rig.GUEST_HOST}:{port})/artifacts/fcos-arm/aarch64/")
        # the node timeline saw the GRUB boot as it sees an iPXE one: script, kernel, initramfs, rootfs
        nodes = run_bootserver("nodes", "show", ADOPTED, "--config", str(config), timeout=60)
        assert nodes.returncode == 0, nodes.stderr
        assert "script" in nodes.stdout and "rootfs" in nodes.stdout, nodes.stdout
    finally:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
