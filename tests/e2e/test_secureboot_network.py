"""Secure Boot over the network (issue 39): QEMU's Secure Boot firmware (Debian's ``OVMF_CODE_4M.secboot.fd``
with ``OVMF_VARS_4M.ms.fd``, Microsoft's UEFI CA enrolled) boots over PXE, with no image and no iPXE, through
the release's own signed shim and GRUB that ``bootserver loaders`` wrote into a TFTP root, to the release's
kernel with the node's exact kernel arguments; GRUB finds the node's boot by the MAC it booted from, from a
config that is the same for every machine.

The test release is the one of tests/e2e/test_secureboot.py (Debian's signed parts in CoreOS's layout) with
Debian's signed network GRUB (``grubnetx64.efi.signed``: prefix ``/grub`` on the server it came from,
``tftp`` but no ``http`` built in) as the live ISO's ``grubx64.efi``: the generic config finds no ``http``
and reads the node's own config by MAC over TFTP, with the release's kernel and initramfs beside it (a
Fedora or Red Hat GRUB, which has ``http``, takes the node's boot from the server instead). The first mile
is QEMU's own DHCP and TFTP (user networking: the firmware's PXE gets ``bootfile`` and TFTP from it; the
server is reached through ``guestfwd``), so the test needs no network namespace. A second stream's release
has the kernel without its signature: shim refuses it. Each firmware boots once per case.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import rig
from .signed_parts import OVMF_VARS, SIGNED_DIR, network, release_stack, secure_boot_machine
from .stack import Stack, run_bootserver

pytestmark = pytest.mark.e2e

#: Debian's signed network GRUB (package grub-efi-amd64-signed), unpacked by .ci/prepare.d/secureboot-loaders.sh.
NET_GRUB = SIGNED_DIR / "usr/lib/grub/x86_64-efi-signed/grubnetx64.efi.signed"

NODE, MAC = "sbn-0", "52:54:00:e2:e0:41"
UNSIGNED_NODE, UNSIGNED_MAC = "sbn-unsigned", "52:54:00:e2:e0:42"


@pytest.fixture(scope="session")
def sbn_stack(tools: rig.Tools, guest_initramfs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A ``bootserver serve`` (:func:`signed_parts.release_stack`) whose streams ``sbn`` and ``sbn-unsigned``
    offer the test release with the network GRUB, the signed and the unsigned kernel; nodes ``sbn-0`` and
    ``sbn-unsigned`` (static networks, selectable by MAC through the generic entry)."""
    nodes = {NODE: {"profile": "sbn", "mac": MAC, "network": network(MAC), "selectable": True},
             UNSIGNED_NODE: {"profile": "sbn-unsigned", "mac": UNSIGNED_MAC, "selectable": True,
                             "network": network(UNSIGNED_MAC)}}
    absent = () if NET_GRUB.is_file() else (f"{NET_GRUB} (run .ci/prepare.d/secureboot-loaders.sh)",)
    with release_stack(tools, guest_initramfs, tmp_path_factory.mktemp("secureboot-network"), ("sbn", "sbn-unsigned"),
                       nodes, grub=NET_GRUB, also_missing=absent) as stack:
        yield stack


@pytest.fixture(scope="session")
def tftp_root(sbn_stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The TFTP root ``bootserver loaders`` writes: each secure_boot stream's shim, GRUB, MokManager and
    the generic GRUB config, also at ``grub/grub.cfg``."""
    root = tmp_path_factory.mktemp("tftp")
    p = run_bootserver("loaders", str(root), "--config", str(sbn_stack.config), timeout=300)
    assert p.returncode == 0, p.stderr
    assert (root / "secureboot/sbn/bootx64.efi").read_bytes() == (SIGNED_DIR / "usr/lib/shim/shimx64.efi.signed"
                                                                  ).read_bytes()
    assert (root / "secureboot/sbn/grubx64.efi").read_bytes() == NET_GRUB.read_bytes()
    assert (root / "grub/grub.cfg").is_file()
    return root


def pxe_secure_boot(tools: rig.Tools, stack: Stack, root: Path, stream: str, mac: str, tmp_path: Path,
                    stop_at: tuple[str, ...] = ()) -> rig.BootResult:
    """QEMU q35 with SMM and Debian's Secure Boot OVMF, its NIC first in the boot order with no option ROM:
    the firmware's own PXE loads ``secureboot/<stream>/bootx64.efi`` (shim) from QEMU's TFTP."""
    vars_file = tmp_path / "OVMF_VARS.fd"
    shutil.copyfile(OVMF_VARS, vars_file)
    log = tmp_path / "serial.log"
    assert tools.busybox
    netdev = (f"user,id=n0,restrict=on,tftp={root},bootfile=secureboot/{stream}/bootx64.efi,"
              f"guestfwd=tcp:{rig.GUEST_HOST}:{stack.port}-cmd:{tools.busybox} nc 127.0.0.1 {stack.port}")
    argv = [*secure_boot_machine(vars_file, log), "-fw_cfg", "name=opt/org.tianocore/IPv6PXESupport,string=n",
            "-netdev", netdev, "-device", f"virtio-net-pci,netdev=n0,mac={mac},romfile=,bootindex=1"]
    return rig.run_guest(argv, log, "uefi", timeout=300, stop_at=stop_at)


def test_pxe_boots_the_release_shim_grub_and_signed_kernel_with_the_node_kargs(
        tools: rig.Tools, sbn_stack: Stack, tftp_root: Path, tmp_path: Path) -> None:
    kernel, *kargs = rig.grub_kernel_line((tftp_root / f"secureboot/nodes/{MAC}.cfg").read_text())
    result = pxe_secure_boot(tools, sbn_stack, tftp_root, "sbn", MAC, tmp_path)
    assert result.reached_init, f"the guest never ran the initramfs's /init:\n{result.tail(80)}"
    assert "EFI stub: UEFI Secure Boot is enabled." in result.log, result.tail(80)
    assert "secureboot: Secure boot enabled" in result.log, result.tail(80)
    assert result.done and result.failure is None, f"/init failed: {result.failure}\n{result.tail(60)}"
    # GRUB names the kernel it loaded (over TFTP, from the release's folder) first, then the node's kernel
    # arguments, exactly: those of its script, the stub URL signed for as long as the TFTP root keeps it
    assert kernel.startswith("($root)/secureboot/sbn/") and kernel.endswith("/vmlinuz")
    first, *rest = result.cmdline.split()
    assert first.startswith("BOOT_IMAGE=") and first.endswith(kernel.removeprefix("($root)")), first
    assert rest == kargs, (result.cmdline, kargs)
    script = rig.kernel_args_from_script(sbn_stack.render("ipxe", NODE)).split()
    assert [w.split("?")[0] for w in kargs] == [w.split("?")[0] for w in script if w != "initrd=main"]
    assert "ip=10.0.2.15::10.0.2.2:24:sbn-0:nic0:none" in kargs
    assert result.rootfs_sha256 == hashlib.sha256(sbn_stack.artifacts["rootfs"]).hexdigest()


def test_a_kernel_without_its_signature_is_refused_over_the_network(
        tools: rig.Tools, sbn_stack: Stack, tftp_root: Path, tmp_path: Path) -> None:
    result = pxe_secure_boot(tools, sbn_stack, tftp_root, "sbn-unsigned", UNSIGNED_MAC, tmp_path,
                             stop_at=("bad shim signature",))
    assert "bad shim signature" in result.log, result.tail(60)
    assert not result.reached_init and "EFI stub" not in result.log, result.tail(60)
