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
import shutil
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import rig
from .signed_parts import OVMF_VARS, network, release_stack, secure_boot_machine
from .stack import Stack, run_bootserver

pytestmark = pytest.mark.e2e

#: The node: a static address in QEMU's user network, as the no-DHCP image test's node.
NODE, MAC = "sb-0", "52:54:00:e2:e0:31"
UNSIGNED_NODE, UNSIGNED_MAC = "sb-unsigned", "52:54:00:e2:e0:32"


@pytest.fixture(scope="session")
def sb_stack(tools: rig.Tools, guest_initramfs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A ``bootserver serve`` (:func:`signed_parts.release_stack`) whose streams ``sb`` and ``sb-unsigned``
    offer the test release with the signed and the unsigned kernel; the nodes ``sb-0`` and ``sb-unsigned``
    have ``secure_boot: true`` and a static network."""
    nodes = {NODE: {"profile": "sb", "mac": MAC, "network": network(MAC)},
             UNSIGNED_NODE: {"profile": "sb-unsigned", "mac": UNSIGNED_MAC, "network": network(UNSIGNED_MAC)}}
    with release_stack(tools, guest_initramfs, tmp_path_factory.mktemp("secureboot"), ("sb", "sb-unsigned"),
                       nodes) as stack:
        yield stack


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
    image"; :func:`signed_parts.secure_boot_machine`), the image as the first boot device, the NIC (no
    option ROM) not in the boot order: nothing but the image's signed chain boots."""
    netdev = f"user,id=n0,restrict=on,guestfwd=tcp:{rig.GUEST_HOST}:{port}-cmd:{busybox} nc 127.0.0.1 {port}"
    return [*secure_boot_machine(vars_file, log),
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
