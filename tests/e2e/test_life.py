"""The whole life of a node on real firmware, with a stand-in CoreOS built from Debian's parts
(:mod:`standin`), its node imported from an OpenShift install directory (issue 51): ``bootserver
openshift import`` of a directory the test makes as openshift-install leaves it (install-config.yaml,
``master.ign`` a pointer config as ``create ignition-configs`` writes it, ``rhcos.json``), then
power-on, network boot, install, reboot, boot-once's local-boot answer, the disk's first boot with the
real Ignition merging the stub, which merges the pointer config, which merges the role's real config from
a stand-in Machine Config Server on the test's network (``/config/master``), and the check-in (``up``);
then ``nodes reinstall`` and the whole life again with a changed role config, which replaces the system
on the disk. One machine under OVMF (UEFI: iPXE's ``exit 1``, GRUB on the disk), TCG: two to three
minutes per life. The same life under SeaBIOS is the playground's BIOS machine (``test_playground.py``);
the reinstall is the server's, the same under either firmware, so it runs once here.

Stand-ins, because the real parts cannot run here: CoreOS (:mod:`standin`) and the Machine Config
Server (a static server answering ``/config/master`` over http; the real one answers over https on port
22623 with the cluster's CA, which the pointer config carries). The stand-in's release is the session's
synced one (``life_source``): the cluster is named after its stream (:data:`standin.STANDIN_STREAM`).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.helpers import free_port
from support.server import serving

from . import life, rig, standin
from .stack import bootserver_command, run_bootserver

pytestmark = pytest.mark.e2e

DATA = Path(__file__).resolve().parents[1] / "data"
#: The machine: OVMF, iPXE's option ROM on its NIC; the install-config host it is.
FIRMWARE, NODE, MAC = "uefi", "life-master-0", "52:54:00:e2:11:01"
#: Seconds from power-on to the installer's reboot, and from there to the check-in (TCG, generous: the
#: machine may be shared).
INSTALL_TIMEOUT = 420.0
FIRSTBOOT_TIMEOUT = 420.0


def install_dir(path: Path, work: Path, mcs_port: int) -> Path:
    """The install directory: install-config.yaml with one master (UEFI, its disk named), the
    installer's real pointer config with its merge source moved to the stand-in Machine Config Server on
    ``mcs_port``, and the stand-in's stream metadata as ``rhcos.json``."""
    path.mkdir(exist_ok=True)
    ic = {
        "apiVersion": "v1", "baseDomain": "example.com", "metadata": {"name": standin.STANDIN_STREAM},
        "controlPlane": {"name": "master", "replicas": 1}, "compute": [{"name": "worker", "replicas": 0}],
        # the guest reaches the server through QEMU's user network forwarder, which connects from
        # 127.0.0.1: that is the machine network the server sees it on
        "networking": {"machineNetwork": [{"cidr": "127.0.0.0/8"}]},
        "platform": {"baremetal": {"apiVIPs": ["192.0.2.5"], "ingressVIPs": ["192.0.2.4"], "hosts": [
            {"name": NODE, "role": "master", "bootMACAddress": MAC, "bootMode": "UEFI",
             "rootDeviceHints": {"deviceName": "/dev/vda"}}]}},
        "pullSecret": '{"auths": {}}', "sshKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE2eLife e2e",
    }
    (path / "install-config.yaml").write_text(yaml.safe_dump(ic))
    pointer = json.loads((DATA / "openshift-pointer-master.ign.json").read_text())
    pointer["ignition"]["config"]["merge"][0]["source"] = f"http://{rig.GUEST_HOST}:{mcs_port}/config/master"
    (path / "master.ign").write_text(json.dumps(pointer, separators=(",", ":")))
    (path / "rhcos.json").write_text((work / "stream.json").read_text())
    return path


@contextlib.contextmanager
def serve(work: Path, tmp_path: Path, mcs_port: int) -> Iterator[tuple[Path, int, str]]:
    """The install directory imported (``openshift import``, console ttyS0) into a fresh config, and
    ``bootserver serve`` for it: yields (config, port, admin URL)."""
    port = free_port()
    config = tmp_path / "bootserver.yaml"
    config.write_text(yaml.safe_dump({
        "server": {"listen": f"127.0.0.1:{port}", "base_url": f"http://{rig.GUEST_HOST}:{port}",
                   "admin": {"listen": f"127.0.0.1:{port + 1}"}},
        "cache_dir": str(work / "cache"), "state_dir": str(tmp_path / "state"),
        "include": ["clusters/*.yaml"]}))
    inst = install_dir(tmp_path / "install", work, mcs_port)
    p = run_bootserver("openshift", "import", str(inst), "--config", str(config), "--console",
                       "console=ttyS0,115200n8", "--output", str(tmp_path / "clusters" / "life.yaml"))
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == f"{NODE}: created", p.stdout
    admin = f"http://127.0.0.1:{port + 1}"
    with serving(["--config", str(config)], admin + "/healthz", tmp_path / "serve.log",
                 command=bootserver_command()):
        yield config, port, admin


def wait_stage(admin: str, node: str, stage: str, timeout: float = 30.0) -> dict:
    """Wait until the server shows ``node`` at ``stage``; return its report (``GET /nodes/{node}``)."""
    deadline = time.monotonic() + timeout
    while True:
        report = life.node_report(admin, node)
        if report["stage"] == stage or time.monotonic() > deadline:
            return report
        time.sleep(0.5)  # polling the server's answer, bounded by timeout


def one_life(machine: standin.Machine, admin: str, node: str) -> str:
    """Power the machine on and follow it to ``up``; return its serial console."""
    machine.power_on()
    at = machine.wait_for(standin.MARK_INSTALLED, INSTALL_TIMEOUT)
    at = machine.wait_for(standin.MARK_FIRSTBOOT, FIRSTBOOT_TIMEOUT, after=at)
    machine.wait_for(standin.MARK_UP, FIRSTBOOT_TIMEOUT, after=at)
    report = wait_stage(admin, node, "up")
    assert report["stage"] == "up", (report, machine.tail())
    serial = machine.serial()
    machine.power_off()  # after the check-in the stand-in has synced its disk
    return serial


def test_an_imported_node_installs_boots_its_disk_checks_in_and_reinstalls(
        tools: rig.Tools, life_source: Path, tmp_path: Path) -> None:
    firmware, node, work = FIRMWARE, NODE, life_source
    real, files = life.real_config(1)
    with rig.StaticServer({"/config/master": json.dumps(real).encode()}) as mcs, \
            serve(work, tmp_path, mcs.port) as (config, port, admin):
        disk = standin.blank_disk(tmp_path / "disk.img")
        chain = rig.guest_url(port, "/boot.ipxe?mac=${net0/mac}")
        machine = standin.Machine(tools, firmware, disk, tmp_path / "serial.log", port, MAC, chain,
                                  forwards=(mcs.port,))
        try:
            script = run_bootserver("render", "ipxe", node, "--config", str(config)).stdout
            serial = one_life(machine, admin, node)
            # the live system ran with exactly the node's kargs; the installed one with the disk's own
            cmdlines = life.cmdlines(serial)
            assert cmdlines[0] == rig.expected_cmdline(script, firmware), serial[-3000:]
            assert "ignition.platform.id=metal" in cmdlines[1] and "coreos.inst" not in cmdlines[1]
            # boot-once: after the install the firmware's network boot got the local-boot answer, and the
            # firmware went on to the disk
            assert f"bootserver: node {node} is installed, booting from the local disk" in serial
            events = life.node_report(admin, node)["events"]
            assert life.stages(events) == list(life.LIFE_STAGES), [e["event"] for e in events]
            names = [e["event"] for e in events]
            assert names.index("stub") < names.index("localboot") < names.index("config") < names.index("checkin")
            # the role's config, merged through the installer's pointer config, is on the disk
            assert "/config/master" in mcs.requests
            life.check_disk(disk, node, files)

            # reinstall, with a changed role config: the next boot installs again and replaces the system
            real2, files2 = life.real_config(2)
            mcs.routes["/config/master"] = json.dumps(real2).encode()
            p = run_bootserver("nodes", "reinstall", node, "--config", str(config))
            assert p.returncode == 0, p.stderr
            one_life(machine, admin, node)
            events = life.node_report(admin, node)["events"]
            again = events[[e["event"] for e in events].index("reinstall"):]
            assert life.stages(again) == ["reinstall", *life.LIFE_STAGES], [e["event"] for e in again]
            life.check_disk(disk, node, files2)
            gone = life.disk_files(disk, list(files))
            assert gone[next(iter(files))] is None, "the first system's file survived the reinstall"
        finally:
            machine.power_off()
