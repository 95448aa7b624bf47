"""A machine no node matches, in QEMU with SMBIOS facts: real iPXE (SeaBIOS, ``ipxe.lkrn``) runs the
discovery script, the machine shows up in ``bootserver nodes discovered`` with exactly those facts, and
after ``bootserver nodes adopt`` the same machine, never reset, fetches its node's script (within 60 s)
and boots it to the initramfs's ``/init``.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.helpers import free_port
from support.server import serving

from . import rig
from .stack import bootserver_command, need, run_bootserver, write_stack_config

pytestmark = pytest.mark.e2e

MAC = "52:54:00:d1:5c:01"
UUID = "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b"
#: The SMBIOS type 1 facts QEMU gives the machine (``-smbios``; a comma would be doubled there).
FACTS = {"manufacturer": "Acme Test Systems", "product": "E2E-Box 9000", "serial": 'SN-42;"x"<b>'}
#: Seconds between the waiting machine's asks (server.discovery.every; 30 by default).
EVERY = 10


@pytest.fixture
def stack(e2e_source: tuple[Path, dict[str, bytes], dict], tmp_path: Path) -> Iterator[tuple[Path, int, Path]]:
    """``serve`` with the e2e profiles, ``include: [nodes.d/*.yaml]`` and discovery every EVERY s:
    ``(config, port, log)``."""
    work = e2e_source[0]
    port = free_port()
    cfg = write_stack_config(work, f"discovery-{port}.yaml", port=port, base_url=f"http://{rig.GUEST_HOST}:{port}",
                             state_dir=tmp_path / "state")
    doc = yaml.safe_load(cfg.read_text())
    doc["server"]["discovery"] = {"every": EVERY}
    doc["include"] = [str(tmp_path / "nodes.d" / "*.yaml")]
    (tmp_path / "nodes.d").mkdir()
    cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
    log = tmp_path / "serve.log"
    with serving(["--config", str(cfg)], f"http://127.0.0.1:{port}/healthz", log, command=bootserver_command()):
        yield cfg, port, log


def discovered(cfg: Path) -> list[str]:
    p = run_bootserver("nodes", "discovered", "--config", str(cfg), timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()[1:]


def script_served(cfg: Path, node: str) -> bool:
    p = run_bootserver("nodes", "show", node, "--config", str(cfg), timeout=60)
    return p.returncode == 0 and any(" script " in line for line in p.stdout.splitlines())


def test_an_unknown_machine_is_discovered_then_adopted_and_boots_without_a_reset(
        tools: rig.Tools, stack: tuple[Path, int, Path], tmp_path: Path) -> None:
    need(tools, "qemu", "ipxe_lkrn", "busybox")
    cfg, port, server_log = stack
    smbios = "type=1," + ",".join(f"{k}={v.replace(',', ',,')}" for k, v in FACTS.items()) + f",uuid={UUID}"
    serial = tmp_path / "serial.log"
    argv = [*rig.qemu_command(tools, rig.guest_url(port, "/boot.ipxe?mac=${net0/mac}"), serial, port=port, mac=MAC),
            "-smbios", smbios]
    serial.write_bytes(b"")
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        # 1. the machine reports itself: the exact facts QEMU gave it, one row
        end = time.monotonic() + 120
        rows: list[str] = []
        while not rows:
            assert proc.poll() is None, f"QEMU exited {proc.returncode}:\n{serial.read_text(errors='replace')[-3000:]}"
            assert time.monotonic() < end, f"not discovered in 120 s:\n{serial.read_text(errors='replace')[-3000:]}"
            rows = [r for r in discovered(cfg) if r.startswith(MAC)]
            if not rows:
                time.sleep(1)  # polling interval (a CLI run each), bounded by the deadline above
        row = rows[0]
        for value in (UUID, *FACTS.values(), "/pcbios"):  # Debian's ipxe.lkrn is an i386 build
            assert value in row, row
        assert "bootserver: this machine is not a node yet" in serial.read_text(errors="replace")
        # every NIC iPXE sees (here one), reported with its chip and PCI bus
        with contextlib.closing(sqlite3.connect(f"file:{tmp_path / 'state' / 'timeline.sqlite3'}?mode=ro",
                                                uri=True)) as db:
            facts = json.loads(db.execute("SELECT facts FROM discovered WHERE mac = ?", (MAC,)).fetchone()[0])
        assert facts["net0"] == MAC and facts["net0chip"] == "virtio-net" and facts["net0busid"], facts

        # 2. adopted: the same machine, never reset, asks again and gets its node's script within 60 s
        p = run_bootserver("nodes", "adopt", MAC, "--name", "adopted-0", "--profile", "e2e-live", "--file",
                           str(tmp_path / "nodes.d" / "adopted-0.yaml"), "--config", str(cfg), timeout=60)
        assert p.returncode == 0, p.stderr
        assert "the server reloaded" in p.stdout, p.stdout
        adopted = time.monotonic()
        node = yaml.safe_load((tmp_path / "nodes.d" / "adopted-0.yaml").read_text())["nodes"]["adopted-0"]
        assert (node["mac"], node["uuid"], node["hostname"]) == ([MAC], UUID, "adopted-0")
        while not script_served(cfg, "adopted-0"):
            assert time.monotonic() - adopted < 60, "no script within 60 s:\n" + serial.read_text(errors="replace")
            time.sleep(1)  # polling interval (a CLI run each), bounded by the 60 s above
        print(f"script served {time.monotonic() - adopted:.1f} s after adopt")

        # 3. ... and boots it: the initramfs's /init runs and finishes, in the one QEMU run
        end = time.monotonic() + 120
        while rig.MARK_DONE not in serial.read_text(errors="replace"):
            assert proc.poll() is None or rig.MARK_DONE in serial.read_text(errors="replace"), \
                serial.read_text(errors="replace")[-3000:]
            assert time.monotonic() < end, serial.read_text(errors="replace")[-3000:]
            time.sleep(0.5)  # polling interval, bounded by the deadline above
        parsed = rig.parse_serial_log(serial.read_text(errors="replace"))
        assert parsed["failure"] is None, parsed
    finally:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
    # the server logged the machine once, its facts as JSON strings (one line), as the text log writes them:
    # every backslash doubled (logs.TextFormatter), so a line reads one way only
    lines = [line for line in server_log.read_text().splitlines() if f"discovered machine {MAC}" in line]
    logged = json.dumps(FACTS["serial"]).replace("\\", "\\\\")
    assert len(lines) == 1 and logged in lines[0], lines
