"""Self-test of the e2e rig, independent of bootserver: a handwritten iPXE script on a static server
boots the real kernel and the test initramfs in QEMU, and the guest is isolated from everything but the
one forwarded port."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from . import rig
from .stack import need

pytestmark = pytest.mark.e2e


def test_handwritten_script_boots_and_guest_is_isolated(tools: rig.Tools, guest_initramfs: Path,
                                                         tmp_path: Path) -> None:
    need(tools, "qemu", "ipxe_lkrn", "vmlinuz")
    rootfs = os.urandom(1 << 20)
    routes: dict[str, bytes | Path] = {"/vmlinuz": Path(tools.vmlinuz or ""), "/initrd": guest_initramfs,
                                       "/rootfs": rootfs}
    with rig.StaticServer(routes) as srv:
        g = lambda path: rig.guest_url(srv.port, path)  # noqa: E731
        kargs = f"initrd=main coreos.live.rootfs_url={g('/rootfs')} console=ttyS1,115200n8 e2e.word=1"
        srv.routes["/script.ipxe"] = (f"#!ipxe\nkernel {g('/vmlinuz')} {kargs}\n"
                                      f"initrd --name main {g('/initrd')}\nboot\n").encode()
        result = rig.boot_ipxe(tools, g("/script.ipxe"), tmp_path / "serial.log", port=srv.port, timeout=90)
    assert result.done and not result.timed_out, result.tail()
    assert result.failure is None, result.tail()
    # Output through ttyS1 (the console karg) reached the log: both serial ports are captured.
    assert result.cmdline == kargs, result.tail()
    assert result.rootfs_sha256 == hashlib.sha256(rootfs).hexdigest()
    assert srv.requests == ["/script.ipxe", "/vmlinuz", "/initrd", "/rootfs"]
    assert result.reach == {f"10.0.2.2:{srv.port}": False, "1.1.1.1:80": False}, result.tail()


def test_kernel_args_from_script() -> None:
    script = ("#!ipxe\nset a 1\n:fetch\nkernel http://h/k initrd=main a=b c || goto retry\n"
              "initrd --name main http://h/i || goto retry\nboot\n")
    assert rig.kernel_args_from_script(script) == "initrd=main a=b c"
    assert rig.kernel_args_from_script("kernel --name k http://h/k x=1\n") == "x=1"
    with pytest.raises(ValueError):
        rig.kernel_args_from_script("#!ipxe\nboot\n")


def test_expected_cmdline_puts_the_image_name_first_under_uefi() -> None:
    script = "#!ipxe\nkernel http://h/a/fcos-live-kernel.x86_64?x=1 initrd=main a=b || goto retry\n"
    assert rig.expected_cmdline(script, "bios") == "initrd=main a=b"
    assert rig.expected_cmdline(script, "uefi") == "fcos-live-kernel.x86_64 initrd=main a=b"
    assert rig.expected_cmdline("kernel --name vmlinuz http://h/k x=1\n", "uefi") == "vmlinuz x=1"


def test_uefi_command_line_uses_ovmf_and_the_efi_rom_with_the_chain_url_as_bootfile(tmp_path: Path) -> None:
    tools = rig.Tools(qemu="/q", ipxe_lkrn=None, busybox="/bb", vmlinuz=None, modules_dir=None, ignition=None,
                      ignition_validate=None, ovmf="/ovmf.fd", ipxe_efi_rom="/efi-virtio.rom")
    argv = rig.qemu_command(tools, "http://10.0.2.100:8/boot.ipxe?mac=${net0/mac}", tmp_path / "s.log", port=8,
                            mac="52:54:00:00:00:01", firmware="uefi")
    assert argv[argv.index("-bios") + 1] == "/ovmf.fd"
    assert argv[argv.index("-boot") + 1] == "n"
    assert argv[argv.index("-netdev") + 1].endswith(",bootfile=http://10.0.2.100:8/boot.ipxe?mac=${net0/mac}")
    assert argv[argv.index("-device") + 1] == "virtio-net-pci,netdev=n0,mac=52:54:00:00:00:01,romfile=/efi-virtio.rom"
    assert "-kernel" not in argv
    with pytest.raises(rig.RigError, match=r"ipxe\.lkrn"):
        rig.qemu_command(tools, "http://h/", tmp_path / "s.log", port=8, firmware="bios")
