"""A stand-in CoreOS release for the Secure Boot tests without a firmware (tests/images/): a live ISO in
CoreOS's layout with placeholder loaders (nothing checks their signatures without a firmware), and a config
with a Secure Boot profile on it."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from support.helpers import write_config
from support.networks import STATIC
from support.upstreams import Upstream, payload, rewrite_stream

LOADERS = {"BOOTX64.EFI": b"shim of the vendor\n" * 100, "grubx64.efi": b"grub of the vendor\n" * 100,
           "mmx64.efi": b"mokmanager of the vendor\n" * 100}


def stand_in_live_iso(work: Path, grub_place: str = "EFI/fedora/grub.cfg") -> bytes:
    """A live ISO in CoreOS's layout: images/efiboot.img (FAT) with the vendor's loaders in EFI/BOOT, the
    vendor's GRUB config at ``grub_place``."""
    tree = work / "live"
    (tree / "images").mkdir(parents=True)
    efi = tree / "images" / "efiboot.img"
    subprocess.run(["mformat", "-C", "-f", "1440", "-i", str(efi), "::"], check=True, timeout=30)
    subprocess.run(["mmd", "-i", str(efi), "::/EFI", "::/EFI/BOOT"], check=True, timeout=30)
    for name, data in LOADERS.items():
        (work / name).write_bytes(data)
        subprocess.run(["mcopy", "-i", str(efi), str(work / name), f"::/EFI/BOOT/{name}"], check=True, timeout=30)
    (tree / grub_place).parent.mkdir(parents=True, exist_ok=True)
    (tree / grub_place).write_text("menuentry 'the vendor's own' { }\n")
    out = work / "live.iso"
    subprocess.run(["xorriso", "-as", "mkisofs", "-quiet", "-o", str(out), "-V", "live", str(tree)], check=True,
                   timeout=60, capture_output=True)
    return out.read_bytes()


def secureboot_setup(reference: Path, tmp_path: Path, upstream: Upstream) -> tuple[Path, dict[str, bytes]]:
    """A config with a Secure Boot profile on an FCOS stream (its artifacts and a stand-in live ISO on
    the local upstream) and a stream without a live ISO; nodes sb-0, sb-1 (static networks) and no-iso."""
    doc, files = rewrite_stream(reference / "fcos-stream-stable.json", upstream.url,
                                {k: payload(k) for k in ("kernel", "initramfs", "rootfs")})
    metal = doc["architectures"]["x86_64"]["artifacts"]["metal"]
    iso = stand_in_live_iso(tmp_path)
    metal["formats"]["iso"]["disk"] = {"location": f"{upstream.url}/live.x86_64.iso",
                                       "sha256": hashlib.sha256(iso).hexdigest()}  # no signature: a stand-in
    files["/live.x86_64.iso"] = iso
    upstream.files.update(files)
    (tmp_path / "fcos.json").write_text(json.dumps(doc))
    del metal["formats"]["iso"]
    (tmp_path / "no-iso.json").write_text(json.dumps(doc))

    def network(i: int) -> dict[str, Any]:
        net = json.loads(json.dumps(STATIC))
        net["interfaces"][0]["ipv4"]["address"][0]["ip"] = f"192.0.2.{10 + i}"
        net["interfaces"][0]["mac-address"] = f"52:54:00:00:00:0{i + 1}"
        return net

    config = {"server": {"base_url": "http://boot.example.net:8080"},
              "cache_dir": str(tmp_path / "cache"), "state_dir": str(tmp_path / "state"),
              "streams": {"fcos": {"metadata": str(tmp_path / "fcos.json")},
                          "no-iso": {"metadata": str(tmp_path / "no-iso.json")}},
              "profiles": {"sb": {"stream": "fcos", "install_dev": "/dev/sda", "secure_boot": True},
                           "plain": {"stream": "no-iso", "install_dev": "/dev/sda"}},
              "nodes": {"sb-0": {"profile": "sb", "mac": "52:54:00:00:00:01", "network": network(0)},
                        "sb-1": {"profile": "sb", "mac": "52:54:00:00:00:02", "network": network(1)},
                        "no-iso": {"profile": "plain", "secure_boot": True}}}
    return write_config(tmp_path / "bootserver.yaml", config), files
