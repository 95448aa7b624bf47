"""Real iPXE in QEMU boots what ``bootserver serve`` hands out: the node's script, the cached kernel and
initramfs, and the rootfs named on the kernel command line; under SeaBIOS (``ipxe.lkrn``) and under UEFI
(Debian's OVMF running iPXE's EFI option ROM, whose kernel EFI stub loads only the initrd the kernel line
names: ``initrd=main``).

The guest's ``/init`` reports ``/proc/cmdline`` and the sha256 of the rootfs it fetched; we compare them
with what ``bootserver render ipxe NODE`` prints and with the stream metadata. One boot is ~10-20 s.
What boot-once answers an installed node's next network boot, and what each firmware does with it (boot
its disk), is the whole life's: ``test_life.py`` (SeaBIOS) and ``test_playground.py`` (both firmwares).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import rig
from .stack import BOOT_TIMEOUT, NODES, Stack, need

pytestmark = pytest.mark.e2e


#: What each firmware needs on the host, as :class:`rig.Tools` fields.
FIRMWARE_TOOLS = {"bios": ("qemu", "ipxe_lkrn"), "uefi": ("qemu", "ovmf", "ipxe_efi_rom")}

firmwares = pytest.mark.parametrize("firmware", rig.FIRMWARES)


def boot(tools: rig.Tools, stack: Stack, chain_path: str, mac: str, log: Path, firmware: str) -> rig.BootResult:
    need(tools, *FIRMWARE_TOOLS[firmware])
    result = rig.boot_ipxe(tools, rig.guest_url(stack.port, chain_path), log, port=stack.port,
                           timeout=BOOT_TIMEOUT, mac=mac, firmware=firmware)
    assert result.reached_init, f"the guest never ran the initramfs's /init:\n{result.tail(60)}"
    assert result.done and result.failure is None, f"/init failed: {result.failure}\n{result.tail(60)}"
    return result


def check_boot(stack: Stack, node: str, result: rig.BootResult, firmware: str, rendered_before: str) -> list[str]:
    """Assertions every node's boot must pass; returns the kernel arguments as a list (without the
    image name UEFI puts first). ``rendered_before`` is ``render ipxe NODE`` from before the boot: the
    signed stub URL's expiry is rounded up to the hour, so a boot across the hour matches one of the two."""
    rendered = stack.render("ipxe", node)
    if result.cmdline != rig.expected_cmdline(rendered, firmware):
        rendered = rendered_before
    expected = rig.expected_cmdline(rendered, firmware)
    # The kernel ran with exactly the arguments bootserver says it sends.
    assert result.cmdline == expected, f"\n/proc/cmdline: {result.cmdline}\nexpected:      {expected}"
    args = rig.kernel_args_from_script(rendered).split()
    # initrd=main must name the initrd the script loads as "main" (UEFI needs it; BIOS ignores it).
    assert "initrd=main" in args
    assert "initrd --name main " in rendered
    assert "console=ttyS1,115200n8" in args
    rootfs_urls = [a.split("=", 1)[1] for a in args if a.startswith("coreos.live.rootfs_url=")]
    assert len(rootfs_urls) == 1 and rootfs_urls[0].startswith(stack.base_url + "/"), args
    # The rootfs the guest fetched is the one the stream metadata pins (the real initramfs checks this).
    assert result.rootfs_sha256 == stack.sha256("rootfs"), result.tail()
    return args


@firmwares
def test_install_node_boots_through_its_chain_url(tools: rig.Tools, guest_stack: Stack, tmp_path: Path,
                                                  firmware: str) -> None:
    node = NODES["install-0"]
    before = guest_stack.render("ipxe", node.name)
    result = boot(tools, guest_stack, guest_stack.chain_path(node.name), node.mac, tmp_path / "serial.log",
                  firmware)
    args = check_boot(guest_stack, node.name, result, firmware, before)
    assert "coreos.inst.install_dev=/dev/vda" in args
    assert any(a.startswith(f"coreos.inst.ignition_url={guest_stack.base_url}/ignition/{node.name}?exp=")
               for a in args), args
    assert "coreos.inst.platform_id=metal" in args  # a node with no provider
    assert not any(a.startswith("ignition.platform.id=") for a in args)


@firmwares
def test_live_node_boots_through_the_generic_entry_by_the_mac_ipxe_sends(tools: rig.Tools, guest_stack: Stack,
                                                                         tmp_path: Path, firmware: str) -> None:
    # One guest covers both the live mode and the generic entry (the install test covers the chain URL;
    # tests/http/test_web.py shows both URLs answer the same script). iPXE expands ${net0/mac} and URL-encodes
    # the colons (?mac=52%3A54%3A...); under UEFI the URL reaches iPXE as the DHCP bootfile and iPXE
    # expands it there.
    node = NODES["live-0"]
    before = guest_stack.render("ipxe", node.name)
    result = boot(tools, guest_stack, "/boot.ipxe?mac=${net0/mac}", node.mac, tmp_path / "serial.log", firmware)
    args = check_boot(guest_stack, node.name, result, firmware, before)
    # The script is live-0's (found by its MAC), in live mode, with no provider: platform metal, and the
    # config source Ignition reads (it would also outrank packet's userdata, docs/design.md rule 5).
    assert "ignition.platform.id=metal" in args
    assert any(a.startswith(f"ignition.config.url={guest_stack.base_url}/ignition/{node.name}?exp=")
               for a in args), args
    assert not any(a.startswith("coreos.inst.") for a in args)
