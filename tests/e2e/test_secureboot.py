"""Secure Boot from a per-node image (issue 31): the image's UEFI boot is the vendor's signed chain, and
QEMU's Secure Boot firmware (Debian's ``OVMF_CODE_4M.secboot.fd`` with ``OVMF_VARS_4M.ms.fd``:
Microsoft's UEFI CA enrolled) boots it to the release's kernel with the node's exact kernel arguments.

The test release stands in for a CoreOS one, in CoreOS's layout, made of Debian's signed parts: a live
ISO whose ``images/efiboot.img`` holds ``shim-signed``'s shim as ``EFI/BOOT/BOOTX64.EFI``,
``grub-efi-amd64-signed``'s CD GRUB as ``grubx64.efi`` and MokManager as ``mmx64.efi`` (its GRUB config
at Debian's place, ``boot/grub/grub.cfg``); the release's kernel is Debian's signed kernel (the e2e
kernel). A second stream's release has the same kernel with its signature removed (``sbattach
--remove``): shim refuses it (``bad shim signature``), so the test can fail. The same image boots under
SeaBIOS through ISOLINUX. Images are built once per session and shared; each firmware boots once.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.helpers import free_port
from support.server import serving

from . import rig
from .signed_parts import OVMF_CODE, OVMF_VARS, live_iso, missing_parts, network, unsigned
from .stack import (
    REAL_IGNITION,
    Stack,
    bootserver_command,
    in_ci,
    need,
    run_bootserver,
    stream_metadata,
)

pytestmark = pytest.mark.e2e

#: The node: a static address in QEMU's user network, as the no-DHCP image test's node.
NODE, MAC = "sb-0", "52:54:00:e2:e0:31"
UNSIGNED_NODE, UNSIGNED_MAC = "sb-unsigned", "52:54:00:e2:e0:32"


@pytest.fixture(scope="session")
def sb_stack(tools: rig.Tools, guest_initramfs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A ``bootserver serve`` (base_url the guest's view) whose two streams offer the test release, one
    with the signed kernel and one with the unsigned one, both with the live ISO, synced through a local
    upstream; the nodes ``sb-0`` and ``sb-unsigned`` have ``secure_boot: true`` and a static network."""
    need(tools, "qemu", "busybox", "vmlinuz")
    missing = missing_parts()
    if missing:
        msg = "Secure Boot e2e parts missing: " + "; ".join(missing)
        if in_ci():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    assert tools.vmlinuz
    work = tmp_path_factory.mktemp("secureboot")
    kernel, initramfs = Path(tools.vmlinuz).read_bytes(), guest_initramfs.read_bytes()
    iso = live_iso(work, kernel, initramfs)
    rootfs = os.urandom(1 << 20)
    with rig.StaticServer({}) as upstream:
        streams = {}
        for name, k in (("sb", kernel), ("sb-unsigned", unsigned(Path(tools.vmlinuz), work))):
            arts = {"kernel": k, "initramfs": initramfs, "rootfs": rootfs}
            doc = stream_metadata(upstream.url(f"/{name}"), arts)
            metal = doc["architectures"]["x86_64"]["artifacts"]["metal"]
            release = metal["release"]
            metal["formats"]["iso"] = {"disk": {"location": upstream.url(f"/{name}/{release}/live.x86_64.iso"),
                                                "sha256": hashlib.sha256(iso).hexdigest()}}
            for kind, art in metal["formats"]["pxe"].items():
                upstream.routes[urllib.parse.urlsplit(art["location"]).path] = arts[kind]
            upstream.routes[f"/{name}/{release}/live.x86_64.iso"] = iso
            (work / f"{name}.json").write_text(json.dumps(doc))
            streams[name] = {"metadata": str(work / f"{name}.json")}
        (work / "real.ign").write_text(json.dumps(REAL_IGNITION))
        port = free_port()
        base_url = f"http://{rig.GUEST_HOST}:{port}"
        doc = {"server": {"listen": f"127.0.0.1:{port}", "base_url": base_url},
               "cache_dir": str(work / "cache"), "state_dir": str(work / "state"), "streams": streams,
               "profiles": {name: {"stream": name, "mode": "install", "install_dev": "/dev/vda",
                                   "ignition": "real.ign", "secure_boot": True,
                                   # no provider: platform metal, no console of its own; the rig reads ttyS1
                                   "console": "console=ttyS1,115200n8"} for name in streams},
               "nodes": {NODE: {"profile": "sb", "mac": MAC, "network": network(MAC)},
                         UNSIGNED_NODE: {"profile": "sb-unsigned", "mac": UNSIGNED_MAC,
                                         "network": network(UNSIGNED_MAC)}}}
        config = work / "bootserver.yaml"
        config.write_text(yaml.safe_dump(doc, sort_keys=False))
        p = run_bootserver("sync-images", "--config", str(config), timeout=300)
        assert p.returncode == 0, p.stderr
        log = work / "serve.log"
        with serving(["--config", str(config)], f"http://127.0.0.1:{port}/healthz", log,
                     command=bootserver_command()):
            yield Stack(config=config, port=port, base_url=base_url, artifacts={"rootfs": rootfs}, metadata=doc,
                        real_ignition=work / "real.ign", log=log)


#: Each node's kargs as its iPXE script carries them, read before any boot (a boot that fetches the stub
#: makes the node ``installing``, and boot-once then answers its script with "boot the local disk").
SCRIPT_KARGS: dict[str, list[str]] = {}


@pytest.fixture(scope="session")
def sb_images(sb_stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each node's image, written once by ``bootserver iso NODE`` (shared by the boots below)."""
    out = tmp_path_factory.mktemp("sb-images")
    images = {}
    for node in (NODE, UNSIGNED_NODE):
        SCRIPT_KARGS[node] = rig.kernel_args_from_script(sb_stack.render("ipxe", node)).split()
        images[node] = out / f"{node}.iso"
        p = run_bootserver("iso", node, "-o", str(images[node]), "--config", str(sb_stack.config), timeout=300)
        assert p.returncode == 0, p.stderr
        said = p.stderr
        assert said.startswith(f"bootserver: {node}: wrote {images[node]} (") and "Secure Boot: " in said, said
    return images


def secure_boot_command(image: Path, log: Path, vars_file: Path, port: int, mac: str, busybox: str) -> list[str]:
    """QEMU q35 with SMM and Debian's Secure Boot OVMF (shared/DESIGN.md, "Secure Boot from a per-node
    image"), the image as the first boot device, the NIC (no option ROM) not in the boot order: nothing but
    the image's signed chain boots. Serial ports logged as rig.run_guest reads them."""
    netdev = f"user,id=n0,restrict=on,guestfwd=tcp:{rig.GUEST_HOST}:{port}-cmd:{busybox} nc 127.0.0.1 {port}"
    return ["qemu-system-x86_64", "-machine", "q35,smm=on,accel=tcg", "-m", "512", "-smp", "1",
            "-nodefaults", "-display", "none", "-no-reboot",
            "-global", "driver=cfi.pflash01,property=secure,value=on", "-global", "ICH9-LPC.disable_s3=1",
            "-drive", f"if=pflash,format=raw,unit=0,file={OVMF_CODE},readonly=on",
            "-drive", f"if=pflash,format=raw,unit=1,file={vars_file}",
            "-chardev", f"file,id=s0,path={log}", "-serial", "chardev:s0",
            "-chardev", f"file,id=s1,path={rig.second_serial_log(log)}", "-serial", "chardev:s1",
            "-drive", f"file={image},media=cdrom,if=none,id=cd0,readonly=on", "-device", "ide-cd,drive=cd0,bootindex=0",
            "-netdev", netdev, "-device", f"virtio-net-pci,netdev=n0,mac={mac},romfile="]


def boot_secure(tools: rig.Tools, image: Path, tmp_path: Path, port: int, mac: str,
                stop_at: tuple[str, ...] = ()) -> rig.BootResult:
    vars_file = tmp_path / "OVMF_VARS.fd"
    shutil.copyfile(OVMF_VARS, vars_file)
    assert tools.busybox
    argv = secure_boot_command(image, tmp_path / "serial.log", vars_file, port, mac, tools.busybox)
    return rig.run_guest(argv, tmp_path / "serial.log", "uefi", timeout=240, stop_at=stop_at)


def image_kargs(node: str, cmdline: str) -> tuple[list[str], str]:
    """The node's kargs as the server sends them in its iPXE script (:data:`SCRIPT_KARGS`), with the stub
    URL as the image carries it (signed for the image's life, not for one install), and that stub URL."""
    script_args = SCRIPT_KARGS[node]
    stub = next(w for w in cmdline.split() if w.startswith("coreos.inst.ignition_url="))
    expected = [stub if w.startswith("coreos.inst.ignition_url=") else w for w in script_args if w != "initrd=main"]
    return expected, stub.split("=", 1)[1]


def test_the_image_boots_the_signed_kernel_under_secure_boot_with_the_node_kargs(
        tools: rig.Tools, sb_stack: Stack, sb_images: dict[str, Path], tmp_path: Path) -> None:
    result = boot_secure(tools, sb_images[NODE], tmp_path, sb_stack.port, MAC)
    assert result.reached_init, f"the guest never ran the initramfs's /init:\n{result.tail(60)}"
    assert "EFI stub: UEFI Secure Boot is enabled." in result.log, result.tail(80)
    assert "secureboot: Secure boot enabled" in result.log, result.tail(80)
    assert result.done and result.failure is None, f"/init failed: {result.failure}\n{result.tail(60)}"
    assert result.cmdline is not None
    expected, stub = image_kargs(NODE, result.cmdline)
    assert result.cmdline == " ".join(["BOOT_IMAGE=/images/pxeboot/vmlinuz", *expected]), result.cmdline
    assert "ip=10.0.2.15::10.0.2.2:24:sb-0:nic0:none" in expected
    assert result.net == "static 10.0.2.15/24 via 10.0.2.2" and result.rootfs_sha256 == hashlib.sha256(
        sb_stack.artifacts["rootfs"]).hexdigest()
    # the image's stub URL is one the server accepts
    parts = urllib.parse.urlsplit(stub)
    with urllib.request.urlopen(sb_stack.local_url(f"{parts.path}?{parts.query}"), timeout=30) as r:
        assert r.status == 200


def test_a_kernel_without_its_signature_is_refused(tools: rig.Tools, sb_stack: Stack,
                                                   sb_images: dict[str, Path], tmp_path: Path) -> None:
    result = boot_secure(tools, sb_images[UNSIGNED_NODE], tmp_path, sb_stack.port, UNSIGNED_MAC,
                         stop_at=("bad shim signature",))
    assert "bad shim signature" in result.log, result.tail(60)
    assert not result.reached_init and "EFI stub" not in result.log, result.tail(60)


def test_the_same_image_boots_under_seabios_through_isolinux(tools: rig.Tools, sb_stack: Stack,
                                                             sb_images: dict[str, Path], tmp_path: Path) -> None:
    capture = tmp_path / "guest.pcap"
    result = rig.boot_image(tools, sb_images[NODE], tmp_path / "serial.log", port=sb_stack.port, mac=MAC,
                            capture=capture, firmware="bios", timeout=240)
    assert result.done and result.failure is None, f"/init failed: {result.failure}\n{result.tail(60)}"
    assert result.cmdline is not None
    expected, _ = image_kargs(NODE, result.cmdline)
    words = result.cmdline.split()
    assert words[0] == "BOOT_IMAGE=/images/pxeboot/vmlinuz" and words[-1] == "initrd=/images/pxeboot/initrd.img"
    assert words[1:-1] == expected, result.cmdline
    assert rig.dhcp_packets(capture) == []
