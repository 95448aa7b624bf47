"""A machine behind a real IPMI BMC boots from a real ``serve`` because ``bootserver provision`` told it to.

Debian's BMC simulator ``ipmi_sim`` (tests/support/ipmi_sim.py) stands for the BMC; its ``chassis_control``
program (tests/support/ipmi_chassis.py) is the machine's power: power up starts a QEMU guest (Debian's OVMF, iPXE's
EFI option ROM on its NIC, the DHCP bootfile ``/boot.ipxe?mac=${net0/mac}`` as a DHCP server on
premises hands out), power down kills it. ``provision`` sets the one-time UEFI network boot (the BMC's
log shows ``05 a0 04 00 00 00``) and powers the machine up; its firmware then boots the node's script,
kernel, initramfs and rootfs; ``devices`` and ``deprovision`` see and power off the running guest. The
guest halts at the end of its ``/init`` and QEMU keeps it (``-no-shutdown``), as a server whose
installer waits: the power stays on until ``deprovision``. One UEFI boot, ~20 s under TCG.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from support.ipmi_sim import PASSWORD, USERNAME, start_sim

from . import rig
from .stack import IPMI_NODE, Stack, need, run_bootserver

pytestmark = pytest.mark.e2e

BOOT_TIMEOUT = 120.0  # seconds for the guest's whole boot; a healthy one takes ~20 s under TCG
CHASSIS, SET_BOOT_OPTIONS, CHASSIS_CONTROL = 0x00, 0x08, 0x02


def wait_for_init(log: Path, seconds: float) -> rig.BootResult:
    """The guest's serial logs (both ports) once its ``/init`` is done, the firmware gave up or the
    kernel panicked, at most ``seconds``; parsed as :func:`rig.run_guest` does."""
    logs = [log, rig.second_serial_log(log)]
    ends = (rig.MARK_DONE, rig.MARK_UEFI_GAVE_UP, rig.MARK_KERNEL_PANIC)
    start = time.monotonic()
    timed_out = True
    while time.monotonic() - start < seconds:
        text = "\n".join(p.read_text(errors="replace") for p in logs if p.exists())
        if any(mark in text for mark in ends):
            timed_out = False
            break
        time.sleep(0.2)  # polling interval of a bounded wait on a guest we did not start ourselves
    text = "\n".join(rig._ANSI.sub("", p.read_text(errors="replace")) for p in logs if p.exists())
    return rig.BootResult(log=text, returncode=None, timed_out=timed_out, seconds=time.monotonic() - start,
                          **rig.parse_serial_log(text))


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def test_provision_powers_the_guest_behind_ipmi_sim_to_its_script_and_deprovision_powers_it_off(
        tools: rig.Tools, guest_stack: Stack, tmp_path: Path) -> None:
    need(tools, "qemu", "ovmf", "ipxe_efi_rom")
    node = IPMI_NODE
    rendered = guest_stack.render("ipxe", node.name)
    log = tmp_path / "serial.log"
    chain = rig.guest_url(guest_stack.port, "/boot.ipxe?mac=${net0/mac}")
    argv = [*rig.qemu_command(tools, chain, log, port=guest_stack.port, mac=node.mac, firmware="uefi"),
            "-no-shutdown"]
    sim = start_sim(tmp_path / "ipmi", guest={"argv": argv})
    try:
        # provision's config: the server's, with the node's BMC (same state_dir: the same timeline)
        doc = yaml.safe_load(guest_stack.config.read_text())
        (tmp_path / "bmc.pw").write_text(PASSWORD + "\n")
        doc["nodes"][node.name]["ipmi"] = {"address": "127.0.0.1", "port": sim.port, "username": USERNAME,
                                           "password_file": str(tmp_path / "bmc.pw"), "timeout": 10}
        config = guest_stack.config.with_name(f"{guest_stack.config.stem}-ipmi.yaml")  # relative paths as the server's
        config.write_text(yaml.safe_dump(doc, sort_keys=False))
        bmc = f"127.0.0.1:{sim.port}"

        p = run_bootserver("provision", node.name, "--no-wait", "--config", str(config), "--log-level", "debug",
                           timeout=60)
        assert p.returncode == 0, p.stderr
        assert p.stdout == f"{node.name} {bmc} On\n"
        assert PASSWORD not in p.stdout + p.stderr
        # the BMC got the one-time UEFI network boot before the power up
        assert sim.requests(CHASSIS, SET_BOOT_OPTIONS) == ["05 a0 04 00 00 00"]
        assert sim.requests(CHASSIS, CHASSIS_CONTROL) == ["01"]
        calls = sim.calls()
        assert calls.index("set boot pxe") < calls.index("set power 1"), calls

        result = wait_for_init(log, BOOT_TIMEOUT)
        assert result.reached_init, f"the guest never ran the initramfs's /init:\n{result.tail(60)}"
        assert result.done and result.failure is None, f"/init failed: {result.failure}\n{result.tail(60)}"
        # the node's own script, found by the MAC its iPXE sent (the ipmi provider: platform metal)
        assert result.cmdline == rig.expected_cmdline(rendered, "uefi"), (result.cmdline, rendered)
        assert "ignition.platform.id=metal" in result.cmdline.split()
        assert result.rootfs_sha256 == guest_stack.sha256("rootfs")
        p = run_bootserver("nodes", "--config", str(config), timeout=60)
        row = next(line.split() for line in p.stdout.splitlines() if line.startswith(node.name + " "))
        assert row[2] == "rootfs", p.stdout

        pid = sim.guest_pid()
        assert pid is not None and alive(pid)  # halted at the end of /init, still powered
        p = run_bootserver("devices", "--config", str(config), timeout=60)
        assert f"{node.name} {bmc} On rootfs" in p.stdout.splitlines(), p.stdout + p.stderr

        p = run_bootserver("deprovision", node.name, "--grace", "1", "--config", str(config), timeout=60)
        assert p.returncode == 0, p.stderr
        assert p.stdout == f"{node.name} {bmc} Off\n"
        assert not alive(pid)
        assert sim.requests(CHASSIS, CHASSIS_CONTROL)[-2:] == ["05", "00"]  # soft shutdown, then power down
        assert PASSWORD not in p.stdout + p.stderr
    finally:
        sim.stop()
