"""``make playground``'s script runs the whole life of its three machines: the BIOS and the UEFI node and
the unknown machine (discovered, adopted by the playground) install with the stand-in CoreOS, reboot,
boot their disk through boot-once and check in; it ends with every machine ``up`` and a summary table
(bounded by ``--minutes``)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.helpers import REPO

from . import rig, standin
from .stack import need

pytestmark = pytest.mark.e2e


def test_the_playground_brings_its_three_machines_up() -> None:
    tools = rig.find_tools()
    need(tools, "qemu", "ovmf", "ipxe_efi_rom", "busybox", "vmlinuz", "modules_dir", "ignition")
    assert not standin.find_standin_tools(tools).missing()
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "playground.py"), "--minutes", "12"],
                          capture_output=True, text=True, timeout=900)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-3000:]
    assert out.startswith("playground: the installer is a stand-in for CoreOS built from Debian's parts")
    assert "playground: discovered 52:54:00:9a:00:99" in out and "Playground Labs" in out
    assert "nodes adopt 52:54:00:9a:00:99 --name pg-new --profile install" in out
    for node in ("pg-bios", "pg-uefi", "pg-new"):
        lines = [line for line in out.splitlines() if line.startswith(f"playground: {node} ")]
        stages = [line.split("->")[1].split()[0] for line in lines if "->" in line]
        assert stages == ["ipxe", "kernel", "initramfs", "rootfs", "installing", "installed", "up"], lines
        assert any("local-boot answer" in line for line in lines), lines
    table = out.split("playground: summary", 1)[1]
    for node, firmware in (("pg-bios", "bios"), ("pg-uefi", "uefi"), ("pg-new", "bios")):
        row = next(line for line in table.splitlines() if line.startswith(f"playground:   {node} "))
        assert row.split()[2] == firmware and row.count(" s") == 7, row
    assert "playground: every machine is up" in out
    assert out.rstrip().endswith("playground: machines and server stopped")
