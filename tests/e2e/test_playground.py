"""``make playground``'s script runs to the point where all three machines were seen: the BIOS and the
UEFI node fetched their rootfs through the local server, and the unknown machine reported itself
(``--until-seen``, bounded by ``--minutes``)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.helpers import REPO

from . import rig
from .conftest import need

pytestmark = pytest.mark.e2e


def test_the_playground_sees_its_three_machines() -> None:
    need(rig.find_tools(), "qemu", "ipxe_lkrn", "ovmf", "ipxe_efi_rom", "busybox", "vmlinuz", "modules_dir")
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "playground.py"), "--until-seen",
                           "--minutes", "12"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "playground: all three machines were seen" in out
    assert "playground: discovered 52:54:00:9a:00:99" in out and "Playground Labs" in out
    assert "nodes adopt 52:54:00:9a:00:99 --name pg-new --profile install" in out
    assert out.rstrip().endswith("playground: machines and server stopped")
