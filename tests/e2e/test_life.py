"""The whole life of a node on real firmware, with a stand-in CoreOS built from Debian's parts
(:mod:`standin`): power-on, network boot, install, reboot, boot-once's local-boot answer, the disk's first
boot with the real Ignition merging the real config, the check-in (``up``); then ``nodes reinstall``
and the whole life again, which replaces the system on the disk. One machine under SeaBIOS, TCG: about a
minute and a half per life. The same life under OVMF (its own PXE, iPXE's ``exit 1``, GRUB on the disk)
is the playground's UEFI machine, checked the same way by ``test_playground.py``; the reinstall is the
server's (boot-once reset, the changed config), the same under either firmware, so it runs once here.
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
from support.netns import in_ci
from support.server import serving

from . import life, rig, standin
from .stack import bootserver_command, need, run_bootserver, stream_metadata

pytestmark = pytest.mark.e2e

#: The machine: SeaBIOS, iPXE's option ROM on its NIC.
FIRMWARE, NODE, MAC = "bios", "life-bios", "52:54:00:e2:11:01"
#: Seconds from power-on to the installer's reboot, and from there to the check-in (TCG, generous: the
#: machine may be shared).
INSTALL_TIMEOUT = 420.0
FIRSTBOOT_TIMEOUT = 420.0


@pytest.fixture(scope="session")
def life_source(tools: rig.Tools, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The stand-in's stream, synced: a local upstream serves the stand-in's kernel, initramfs and rootfs
    (the metal image) named in stream metadata, and ``sync-images`` fills a cache. Yields the folder."""
    need(tools, "qemu", "busybox", "vmlinuz", "modules_dir", "ignition", "ipxe_efi_rom")
    parts = standin.find_standin_tools(tools)
    if parts.missing():
        msg = "stand-in part missing: " + "; ".join(parts.missing()) + " (see docs/testing.md)"
        if in_ci():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    artifacts = standin.build_standin(parts).artifacts()
    work = tmp_path_factory.mktemp("life")
    with rig.StaticServer({}) as upstream:
        doc = stream_metadata(upstream.url(""), artifacts)
        for kind, art in doc["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["pxe"].items():
            upstream.routes[art["location"].removeprefix(upstream.url(""))] = artifacts[kind]
        (work / "stream.json").write_text(json.dumps(doc))
        cfg = write_config(work, work / "sync-state", port=1)
        p = run_bootserver("sync-images", "--config", str(cfg), timeout=120)
        assert p.returncode == 0, p.stderr
    yield work


def write_config(work: Path, state: Path, port: int) -> Path:
    """A config of the life node (install mode, platform metal, console ttyS0, the real config of
    :func:`life.real_config` in ``real.ign``), its admin listener on ``port + 1``."""
    if not (work / "real.ign").exists():
        (work / "real.ign").write_text(json.dumps(life.real_config(1)[0]))
    doc = {
        "server": {"listen": f"127.0.0.1:{port}", "base_url": f"http://{rig.GUEST_HOST}:{port}",
                   "admin": {"listen": f"127.0.0.1:{port + 1}"}},
        "cache_dir": str(work / "cache"), "state_dir": str(state),
        "streams": {"standin": {"metadata": str(work / "stream.json")}},
        "profiles": {"life": {"stream": "standin", "mode": "install", "install_dev": "/dev/vda",
                              "platform_id": "metal", "console": "console=ttyS0,115200n8",
                              "ignition": "real.ign"}},
        # selectable: the machine reaches the server through QEMU's forwarder on 127.0.0.1
        "nodes": {NODE: {"profile": "life", "mac": MAC, "selectable": True}},
    }
    path = work / f"{state.name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@contextlib.contextmanager
def serve(work: Path, name: str) -> Iterator[tuple[Path, int, str]]:
    """``bootserver serve`` for the life nodes with a fresh state: yields (config, port, admin URL)."""
    port = free_port()
    config = write_config(work, work / f"state-{name}", port)
    admin = f"http://127.0.0.1:{port + 1}"
    with serving(["--config", str(config)], admin + "/healthz", work / f"serve-{name}.log",
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


def test_a_node_installs_boots_its_disk_checks_in_and_reinstalls(
        tools: rig.Tools, life_source: Path, tmp_path: Path) -> None:
    firmware, node, work = FIRMWARE, NODE, life_source
    real, files = life.real_config(1)
    (work / "real.ign").write_text(json.dumps(real))
    with serve(work, firmware) as (config, port, admin):
        disk = standin.blank_disk(tmp_path / "disk.img")
        chain = rig.guest_url(port, "/boot.ipxe?mac=${net0/mac}")
        machine = standin.Machine(tools, firmware, disk, tmp_path / "serial.log", port, MAC, chain)
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
            life.check_disk(disk, node, files)

            # reinstall, with a changed real config: the next boot installs again and replaces the system
            real2, files2 = life.real_config(2)
            (work / "real.ign").write_text(json.dumps(real2))
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

