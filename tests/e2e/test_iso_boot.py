"""The per-node boot image (``bootserver iso NODE``) boots in QEMU as a CD, as a BMC's virtual media would
be, on a network without DHCP: the image brings up the node's NIC with the node's static address, chains
the node's signed script, and the guest reaches the node's kernel and initramfs with the node's ``ip=``.

The NIC has no option ROM (``romfile=``) and comes after the CD in the boot order, so nothing but the
image can bring the network up; QEMU's ``filter-dump`` captures every frame of the guest's NIC, and no
DHCP request may be among them (the guest's ``/init`` also uses the static ``ip=``, as dracut would).
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest

from . import rig
from .stack import BOOT_TIMEOUT, ISO_NODE, NODES, Stack, need, run_bootserver

pytestmark = pytest.mark.e2e

#: What the image build and each firmware's boot need on the host, as :class:`rig.Tools` fields.
FIRMWARE_TOOLS = {"bios": ("qemu", "busybox"), "uefi": ("qemu", "busybox", "ovmf")}

#: The kernel argument the node's static network (conftest.ISO_NETWORK) becomes.
ISO_IP = f"ip=10.0.2.15::10.0.2.2:24:{ISO_NODE.name}:nic0:none"


def write_image(stack: Stack, path: Path) -> str:
    p = run_bootserver("iso", ISO_NODE.name, "--output", str(path), "--config", str(stack.config), timeout=60)
    assert p.returncode == 0, f"bootserver iso exited {p.returncode}: {p.stderr}"
    assert path.stat().st_size > 0
    return p.stderr


def expected_cmdline(stack: Stack, script: str, firmware: str) -> str:
    """The guest's /proc/cmdline when ``script`` (the node's iPXE script) boots it from the image: under
    BIOS iPXE's kernel arguments; under UEFI GRUB's ``linux`` with the same arguments, GRUB putting
    ``BOOT_IMAGE=<the kernel's file in GRUB's form>`` first and leaving out iPXE's ``initrd=main``."""
    kernel = next(line.split()[1] for line in script.splitlines() if line.startswith("kernel "))
    args = rig.kernel_args_from_script(script)
    if firmware == "bios":
        return args
    path = urllib.parse.urlsplit(kernel).path
    words = " ".join(w for w in args.split() if w != "initrd=main")
    return f"BOOT_IMAGE=(http,{rig.GUEST_HOST}:{stack.port}){path} {words}"


@pytest.mark.parametrize("firmware", rig.FIRMWARES)
def test_the_image_boots_the_node_with_its_static_address_and_no_dhcp(tools: rig.Tools, guest_stack: Stack,
                                                                      tmp_path: Path, firmware: str) -> None:
    need(tools, *FIRMWARE_TOOLS[firmware])
    image = tmp_path / f"{ISO_NODE.name}.iso"
    said = write_image(guest_stack, image)
    assert said.startswith(f"bootserver: {ISO_NODE.name}: wrote {image} (") and said.count("\n") == 1, said
    assert "static 10.0.2.15/24 via 10.0.2.2 on nic0 (52:54:00:e2:e0:04)" in said
    before = guest_stack.render("ipxe", ISO_NODE.name)
    capture = tmp_path / "guest.pcap"
    result = rig.boot_image(tools, image, tmp_path / "serial.log", port=guest_stack.port, mac=ISO_NODE.mac,
                            capture=capture, firmware=firmware, timeout=BOOT_TIMEOUT)
    assert result.reached_init, f"the guest never ran the initramfs's /init:\n{result.tail(60)}"
    assert result.done and result.failure is None, f"/init failed: {result.failure}\n{result.tail(60)}"
    # The node's script, kernel and initramfs: the kernel ran with exactly the arguments the server sends
    # the node (the signed stub URL's expiry is rounded up to the hour: a boot across it matches one).
    after = guest_stack.render("ipxe", ISO_NODE.name)
    assert result.cmdline in {expected_cmdline(guest_stack, s, firmware) for s in (before, after)}, (
        f"\n/proc/cmdline: {result.cmdline}\nexpected:      {expected_cmdline(guest_stack, after, firmware)}")
    args = rig.kernel_args_from_script(after).split()
    assert ISO_IP in args and "nameserver=10.0.2.3" in args and "initrd=main" in args, args
    assert result.rootfs_sha256 == guest_stack.sha256("rootfs"), result.tail()
    assert result.net == "static 10.0.2.15/24 via 10.0.2.2", result.tail()
    # The server saw the node's script request (iPXE's chain, or GRUB's config: the same timeline event).
    p = run_bootserver("nodes", "show", ISO_NODE.name, "--config", str(guest_stack.config), timeout=60)
    assert p.returncode == 0 and " script " in f" {p.stdout} ", p.stdout
    # No DHCP, from the firmware, the loader or the guest: not on the serial log, not on the wire.
    firmware_log = result.log.split(rig.MARK_START)[0]
    assert "Configuring (net" not in firmware_log and "net_bootp" not in firmware_log, result.tail()
    assert rig.frames(capture), "the capture holds no frame: the guest never used its NIC"
    assert rig.dhcp_packets(capture) == [], f"{len(rig.dhcp_packets(capture))} DHCP frames in {capture}"


def test_a_node_without_a_static_network_gets_an_image_that_asks_dhcp(tools: rig.Tools, guest_stack: Stack,
                                                                      tmp_path: Path) -> None:
    # The counterpart of the test above, and the proof that the capture would show DHCP: install-0 has no
    # network key, so its image runs iPXE's dhcp on the node's NIC, and says so when it is written.
    need(tools, *FIRMWARE_TOOLS["bios"])
    node = NODES["install-0"]
    image = tmp_path / "dhcp.iso"
    p = run_bootserver("iso", node.name, "-o", str(image), "--config", str(guest_stack.config), timeout=60)
    assert p.returncode == 0, p.stderr
    assert f"no static network: the image asks DHCP for an address on {node.mac}" in p.stderr, p.stderr
    capture = tmp_path / "guest.pcap"
    result = rig.boot_image(tools, image, tmp_path / "serial.log", port=guest_stack.port, mac=node.mac,
                            capture=capture, timeout=BOOT_TIMEOUT)
    assert result.done and result.failure is None, f"/init failed: {result.failure}\n{result.tail(60)}"
    assert "Configuring (net0" in result.log.split("E2E-INIT-START")[0], result.tail(60)
    assert rig.dhcp_packets(capture), "no DHCP frame in the capture of an image that asks DHCP"
