"""The Secure Boot image's shape (issue 31, item 1), without a firmware: made of the release's live ISO
(its ``images/efiboot.img`` loaders, fetched through the cache once), kernel and initramfs, with the
vendor GRUB's config at the place the live ISO keeps its own, and the node's kargs in the region.
Booting it under Secure Boot is tests/e2e/test_secureboot.py; here the live ISO is a stand-in with
placeholder loaders (nothing checks their signatures without a firmware)."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
from support.helpers import run_cli
from support.secureboot import LOADERS, secureboot_setup
from support.signing import relative
from support.upstreams import Upstream

from bootserver.config import load_config
from bootserver.http.app import create_app
from bootserver.urls import Urls


def extract(image: Path, path: str, dest: Path) -> bytes:
    subprocess.run(["xorriso", "-osirrox", "on", "-indev", str(image), "-extract", path, str(dest)], check=True,
                   timeout=60, capture_output=True)
    return dest.read_bytes()


@pytest.fixture
def setup(reference: Path, tmp_path: Path, upstream: Upstream):
    """A config with a Secure Boot profile on an FCOS stream (its artifacts and a stand-in live ISO on
    the local upstream) and a stream without a live ISO; nodes sb-0, sb-1 (static networks) and no-iso."""
    return secureboot_setup(reference, tmp_path, upstream)


async def test_the_image_holds_the_vendor_loaders_the_release_and_the_node_kargs(setup, tmp_path: Path,
                                                                                  upstream: Upstream) -> None:
    path, files = setup
    out = tmp_path / "sb-0.iso"
    rc, stdout, err = await run_cli("iso", "sb-0", "-o", str(out), "--config", str(path), timeout=120)
    assert (rc, stdout) == (0, ""), err
    assert err.startswith(f"bootserver: sb-0: wrote {out} (") and err.count("\n") == 1
    assert "Secure Boot: the signed shim, GRUB and kernel of stream fcos" in err
    # the vendor's loaders, byte for byte, in the image's EFI boot image
    efi = extract(out, "/images/efiboot.img", tmp_path / "efiboot.img")
    assert len(efi) >= sum(map(len, LOADERS.values()))
    for name, data in LOADERS.items():
        got = tmp_path / f"got-{name}"
        subprocess.run(["mcopy", "-i", str(tmp_path / "efiboot.img"), f"::/EFI/BOOT/{name}", str(got)], check=True,
                       timeout=30)
        assert got.read_bytes() == data, name
    kernel = next(d for p, d in files.items() if "kernel" in p)
    initramfs = next(d for p, d in files.items() if "initramfs" in p)
    assert extract(out, "/images/pxeboot/vmlinuz", tmp_path / "k") == kernel
    assert extract(out, "/images/pxeboot/initrd.img", tmp_path / "i") == initramfs
    # where the live ISO keeps its GRUB config, ours: the node's config from the region
    assert extract(out, "/EFI/fedora/grub.cfg", tmp_path / "g").decode() == "set timeout=0\nsource /node/grub.cfg\n"
    grub = extract(out, "/node/grub.cfg", tmp_path / "n").decode().rstrip("\n")
    linux = next(line for line in grub.splitlines() if line.startswith("linux "))
    words = shlex.split(linux)
    assert words[:2] == ["linux", "/images/pxeboot/vmlinuz"] and "initrd=main" not in words
    assert "ip=192.0.2.10::192.0.2.1:24:sb-0:nic0:none" in words
    assert any(w.startswith("coreos.live.rootfs_url=http://boot.example.net:8080/artifacts/fcos/") for w in words)
    stub = next(w for w in words if w.startswith("coreos.inst.ignition_url=")).split("=", 1)[1]
    assert "/ignition/sb-0?exp=" in stub
    assert "initrd /images/pxeboot/initrd.img\nboot\n" in grub + "\n"
    isolinux = extract(out, "/node/isolinux.cfg", tmp_path / "s").decode()
    append = next(line for line in isolinux.splitlines() if line.strip().startswith("APPEND ")).split()[1:]
    assert append == words[2:]  # the same kargs under BIOS
    # the stub URL lives as long as the image (chain_ttl), and the server accepts it
    config = load_config(path)
    exp = int(stub.split("exp=")[1].split("&")[0])
    assert exp >= Urls(config).signer.now() + config.server.signing.chain_ttl - 7200
    assert upstream.gets["/live.x86_64.iso"] == 1


async def test_two_nodes_share_the_release_part_and_the_server_sends_what_iso_writes(
        aiohttp_client, setup, tmp_path: Path, upstream: Upstream) -> None:
    path, _ = setup
    written = {}
    for node in ("sb-0", "sb-1"):
        out = tmp_path / f"{node}.iso"
        rc, _, err = await run_cli("iso", node, "-o", str(out), "--config", str(path), timeout=120)
        assert rc == 0, err
        written[node] = out.read_bytes()
    config = load_config(path)
    client = await aiohttp_client(create_app(config))
    for node, data in written.items():
        r = await client.get(relative(Urls(config).iso(node)))
        assert r.status == 200 and await r.read() == data, node
    (base,) = (config.cache_dir / "iso").glob("secureboot-*")
    meta = json.loads((base / "region.json").read_text())
    lo, hi = meta["offset"], meta["offset"] + 2 * 8192
    a, b = written["sb-0"], written["sb-1"]
    assert a[:lo] == b[:lo] and a[hi:] == b[hi:] and a[lo:hi] != b[lo:hi]
    assert upstream.gets["/live.x86_64.iso"] == 1  # fetched once, into the cache
    assert sum(p.stat().st_size for p in (config.cache_dir / "iso" / "nodes").iterdir()) == 2 * 16384


async def test_a_secure_boot_node_whose_stream_has_no_live_iso_is_one_line_and_exit_2(setup, tmp_path: Path) -> None:
    path, _ = setup
    out = tmp_path / "no-iso.iso"
    rc, stdout, err = await run_cli("iso", "no-iso", "-o", str(out), "--config", str(path), timeout=120)
    assert (rc, stdout) == (2, "")
    assert err.startswith("bootserver: node no-iso: secure_boot is set, but stream no-iso (x86_64, release ")
    assert err.endswith(") offers no live ISO (metal.formats.iso.disk) to take the signed loaders from\n")
    assert err.count("\n") == 1 and not out.exists()


async def test_sync_images_mirrors_the_live_iso_of_secure_boot_releases(setup, upstream: Upstream) -> None:
    path, _ = setup
    rc, out, err = await run_cli("sync-images", "--config", str(path), timeout=120)
    assert rc == 0, err
    assert upstream.gets.get("/live.x86_64.iso") == 1 and " iso: downloaded " in out, out
