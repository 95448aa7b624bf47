"""What the whole-life test (``test_life.py``) and the playground (and its test) share: the real Ignition
config the nodes install, the server's view of a node (its events replayed into stages, as the page
does), reading what Ignition wrote on a guest's disk after the guest powered off, and checking it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from urllib.parse import quote

from bootserver.timeline import next_stage

from . import rig, standin

#: The stages of an install-mode node's life, in order, as the server's timeline names them.
LIFE_STAGES = ("ipxe", "kernel", "initramfs", "rootfs", "installing", "installed", "up")


def real_config(generation: int = 1) -> tuple[dict, dict[str, tuple[bytes, int]]]:
    """A real Ignition config (spec 3.2.0, self-contained) and the files it writes: path -> (bytes, mode).
    ``generation`` changes every file's content (and which files there are), so a reinstall's disk shows
    that its old system was replaced."""
    blob = b"".join(hashlib.sha256(f"life {generation} {i}".encode()).digest() for i in range(64))  # 2 KiB
    files = {
        f"/etc/life/generation-{generation}": (f"installed by bootserver, generation {generation}\n".encode(), 0o644),
        "/etc/life/secret.bin": (blob, 0o600),
        "/usr/local/bin/life-hello": (f"#!/bin/sh\necho 'hello from generation {generation}'\n".encode(), 0o755),
    }
    entries = []
    for path, (data, mode) in files.items():
        source = ("data:;base64," + base64.b64encode(data).decode()) if path.endswith(".bin") \
            else "data:," + quote(data.decode(), safe="")
        entries.append({"path": path, "mode": mode, "overwrite": True, "contents": {"source": source}})
    return {"ignition": {"version": "3.2.0"}, "storage": {"files": entries}}, files


def stages(events: list[dict], mode: str = "install") -> list[str]:
    """The stages a node went through, oldest first: its events (``GET /nodes/{node}``) replayed with the
    server's own rule (:func:`bootserver.timeline.next_stage`), as its page shows them."""
    out, stage = [], "new"
    for e in events:
        new = next_stage(stage, e["event"], mode)
        if new != stage:
            out.append(new)
            stage = new
    return out


def node_report(admin_url: str, node: str) -> dict:
    """``GET /nodes/{node}`` of the admin listener: ``the stage and its fields, and ``events````."""
    with urllib.request.urlopen(f"{admin_url}/nodes/{node}", timeout=10) as r:
        return json.load(r)


def disk_files(disk: Path, paths: list[str]) -> dict[str, tuple[bytes, int] | None]:
    """Read files from the root file system (partition 2, ext4) of the stand-in's disk image ``disk``,
    with ``debugfs`` (e2fsprogs; read-only, no mount): path -> (bytes, permission bits), ``None`` for a
    path that is not there. Raises :class:`rig.RigError` when debugfs fails."""
    offset, size = standin.ROOT_START * 512, standin.ROOT_SECTORS * 512
    with tempfile.TemporaryDirectory(prefix="life-disk-") as tmp:
        part = Path(tmp) / "root.ext4"
        with open(disk, "rb") as src, open(part, "wb") as dst:
            src.seek(offset)
            dst.write(src.read(size))
        out: dict[str, tuple[bytes, int] | None] = {}
        for path in paths:
            dump = Path(tmp) / "file"
            dump.unlink(missing_ok=True)
            p = subprocess.run(["debugfs", "-R", f"dump -p {path} {dump}", str(part)], capture_output=True,
                               text=True, timeout=60)
            if p.returncode != 0:
                raise rig.RigError(f"debugfs on {disk}: {p.stderr.strip()}")
            out[path] = (dump.read_bytes(), dump.stat().st_mode & 0o7777) if dump.exists() else None
        return out


def check_disk(disk: Path, node: str, files: dict[str, tuple[bytes, int]]) -> None:
    """Assert what Ignition wrote on the stand-in's ``disk`` for ``node``: the real config's ``files`` (path ->
    (bytes, mode)) byte for byte with their modes, the stub's ``/etc/hostname`` and check-in unit."""
    unit = "/etc/systemd/system/bootserver-checkin.service"
    found = disk_files(disk, [*files, "/etc/hostname", unit])
    for path, (data, mode) in files.items():
        assert found[path] is not None, f"{path} is not on the disk"
        assert found[path] == (data, mode), f"{path}: {found[path]!r} != {(data, mode)!r}"
    assert found["/etc/hostname"] == (f"{node}\n".encode(), 0o644)
    text = (found[unit] or (b"", 0))[0].decode()
    assert f"/checkin/{node}" in text and "ExecStart=/usr/bin/curl" in text, text
    assert os.path.getsize(disk) >= standin.IMAGE_BYTES


def cmdlines(serial: str) -> list[str]:
    """The kernel command lines the stand-in printed on its serial console (``E2E-CMDLINE:``), in order: the
    live system's, then each installed boot's."""
    return [line.split("E2E-CMDLINE:", 1)[1].strip() for line in serial.splitlines() if "E2E-CMDLINE:" in line]
