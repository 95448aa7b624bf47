"""``make playground``'s script runs the whole life of its three machines on the DHCP engine's network (a
namespace of its own): the BIOS and the UEFI node at their reserved addresses and the unknown machine
(discovered, adopted by the playground) install with the stand-in CoreOS, reboot, boot their disk
through boot-once and check in; it ends with every machine ``up`` and a summary table (bounded by
``--minutes``).

What it leaves behind (``--keep``) is checked as ``test_life.py`` checks its machine: the local-boot
answer on each console, the installed system's kernel arguments, the real config's files on each disk.
This is the whole life under OVMF (its own PXE and TFTP, iPXE's ``exit 1``, GRUB on the disk), the
engine's full mode at a reserved address under both firmwares (``test_dhcp_boot.py`` boots no machine
in full mode of its own), and the adoption of a machine that got a pool address by the same dnsmasq
(reloaded, not restarted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.helpers import REPO
from support.netns import in_ci, unavailable

from . import life, rig, standin
from .stack import need, run_bootserver

pytestmark = pytest.mark.e2e


def test_the_playground_brings_its_three_machines_up(tmp_path: Path) -> None:
    tools = rig.find_tools()
    need(tools, "qemu", "ovmf", "ipxe_efi_rom", "busybox", "vmlinuz", "modules_dir", "ignition")
    assert not standin.find_standin_tools(tools).missing()
    if unavailable():
        if in_ci():
            pytest.fail(f"the playground's network: {unavailable()}", pytrace=False)
        pytest.skip(f"the playground's network: {unavailable()}")
    work = tmp_path / "playground"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "playground.py"), "--minutes", "12",
                           "--keep", str(work)], capture_output=True, text=True, timeout=900)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-3000:]
    assert out.startswith("playground: the installer is a stand-in for CoreOS built from Debian's parts")
    assert "playground: discovered 52:54:00:9a:00:99" in out and "Playground Labs" in out
    assert "nodes adopt --file= 52:54:00:9a:00:99 --name pg-new --profile install" in out  # its included file
    first_mile = {"pg-bios": ["dhcp"], "pg-uefi": ["dhcp", "tftp"], "pg-new": []}  # pg-new: before adoption
    for node, before in first_mile.items():
        lines = [line for line in out.splitlines() if line.startswith(f"playground: {node} ")]
        stages = [line.split("->")[1].split()[0] for line in lines if "->" in line]
        assert stages == [*before, *life.LIFE_STAGES], lines
        assert any("local-boot answer" in line for line in lines), lines
    table = out.split("playground: summary", 1)[1]
    for node, firmware, address, times in (("pg-bios", "bios", "192.0.2.11", 8), ("pg-uefi", "uefi", "192.0.2.12", 9),
                                           ("pg-new", "bios", "192.0.2.1", 7)):
        row = next(line for line in table.splitlines() if line.startswith(f"playground:   {node} "))
        assert row.split()[2] == firmware and row.split()[3].startswith(address) and row.count(" s") == times, row
    # every "-" in the table says why: no TFTP under SeaBIOS (iPXE is the NIC's ROM), pg-new's DHCP before adoption
    notes = [line for line in table.splitlines() if line.startswith("playground:   - (")]
    assert notes == ["playground:   - (pg-bios tftp, pg-new tftp): under SeaBIOS the NIC's option ROM is iPXE itself, "
                     "so nothing is loaded over TFTP",
                     "playground:   - (pg-new dhcp): its DHCP answer (a pool address) came before its adoption, "
                     "when it was no node"], table
    assert "playground: every machine is up" in out
    assert out.rstrip().endswith("playground: machines, engine and server stopped")

    # the adoption: the engine's pool address, then a reservation by the same dnsmasq, reloaded
    said = out.splitlines()
    adopted = said[said.index(next(line for line in said if line.startswith("playground: adopting it: "))) + 1]
    assert ("bootserver dhcp reloaded: 3 reservations (1 added, 0 removed, 0 changed) without restarting dnsmasq"
            in adopted), adopted
    hosts = (work / "state" / "dhcp" / "hosts.d" / "pg-new").read_text()  # an added reservation's own file
    assert hosts == "52:54:00:9a:00:99,pg-new\n", hosts
    engine_log = (work / "dhcp.log").read_text()
    assert len(re.findall(r"dnsmasq \(process \d+\) answers on", engine_log)) == 1, engine_log[-3000:]
    assert "reload: 3 reservations (1 added, 0 removed, 0 changed) without restarting dnsmasq" in engine_log
    # OVMF's own PXE: the engine's offer at the reserved address, ipxe.efi over TFTP
    show = run_bootserver("nodes", "show", "pg-uefi", "--config", str(work / "bootserver.yaml")).stdout
    assert "address=192.0.2.12 file=ipxe.efi mode=full" in show, show
    # SeaBIOS's iPXE: the engine's answer at the reserved address, with the node's name, as iPXE took it
    show = run_bootserver("nodes", "show", "pg-bios", "--config", str(work / "bootserver.yaml")).stdout
    assert "address=192.0.2.11 " in show and "mode=full" in show, show
    assert re.search(r"DHCPACK\(br0\) 192\.0\.2\.11 52:54:00:9a:00:01 pg-bios", engine_log), engine_log[-3000:]
    assert "net0: 192.0.2.11/255.255.255.0" in (work / "pg-bios.log").read_text(errors="replace")  # iPXE's own line
    # each machine: the local-boot answer on its console, then its disk's system with the disk's kargs,
    # and Ignition's files on the disk
    files = life.real_config(1)[1]
    for node, machine in (("pg-bios", "pg-bios"), ("pg-uefi", "pg-uefi"), ("pg-new", "unknown")):
        log = work / f"{machine}.log"
        serial = "\n".join(p.read_text(errors="replace") for p in (log, rig.second_serial_log(log)) if p.exists())
        assert f"bootserver: node {node} is installed, booting from the local disk" in serial, serial[-3000:]
        installed = life.cmdlines(serial)[-1]
        assert "ignition.platform.id=metal" in installed and "coreos.inst" not in installed, installed
        life.check_disk(work / f"{machine}.disk", node, files)
        (work / f"{machine}.disk").unlink()  # hundreds of MiB each
