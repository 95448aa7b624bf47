"""The arm64 GRUB (bootserver.images.firmware): built once from Debian's grub-efi-arm64-bin and cached, served at
``/loaders/grubaa64.efi``, written by ``bootserver loaders DIR``; its built-in config sources
``/boot.grub?mac=``, the GRUB form of the generic entry (the node's boot with ``console=ttyAMA0`` on
aarch64, the same boot-once rule and timeline event as ``/boot.ipxe``). The arm64 guest that boots it is
tests/e2e/test_arm64_boot.py."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.helpers import write_config
from support.signing import fixed_signer

from bootserver.cli import main
from bootserver.config import parse_config
from bootserver.grub import GrubUnsupported
from bootserver.http.app import ADMIN_APP, create_app
from bootserver.images.firmware import arm64_grub, embedded_config
from bootserver.kargs import build_kargs

MAC = "52:54:00:00:00:a1"


def doc(reference: Path, base_url: str = "http://boot.example.net:8080") -> dict[str, Any]:
    return {
        "server": {"base_url": base_url},
        "cache_dir": "cache", "state_dir": "state",
        "streams": {"rhcos-4.16": {"metadata": str(reference / "rhcos-stream-4.16.json"),
                                   "architectures": ["x86_64", "aarch64"]}},
        "profiles": {"arm": {"stream": "rhcos-4.16", "arch": "aarch64", "install_dev": "/dev/nvme0n1",
                             "platform_id": "metal"}},
        "nodes": {"arm-0": {"profile": "arm", "mac": MAC, "selectable": True}},
    }


def test_the_embedded_config_sources_the_generic_grub_entry_by_the_mac_grub_booted_from() -> None:
    config = embedded_config("http://boot.example.net:8080")
    assert "source '(http,boot.example.net:8080)/boot.grub?mac='\"$net_default_mac\"\n" in config
    assert 'if [ -z "$net_default_mac" ]; then net_bootp; fi' in config
    with pytest.raises(GrubUnsupported):
        embedded_config("https://boot.example.net")


def test_aarch64_boots_with_the_pl011_console_unless_the_profile_names_one() -> None:
    common = {"mode": "live", "rootfs_url": "http://b/r", "stub_url": "http://b/s", "install_dev": None,
              "extra": (), "platform": "metal"}
    assert "console=ttyAMA0,115200" in build_kargs(arch="aarch64", console=None, **common)
    assert build_kargs(arch="aarch64", console="console=ttyS0", **common).count("console=ttyS0") == 1
    assert not any(k.startswith("console=") for k in build_kargs(arch="x86_64", console=None, **common))


def test_the_arm64_grub_is_built_once_and_again_for_another_base_url(tmp_path: Path) -> None:
    first = arm64_grub(tmp_path, "http://a.example:8080")
    assert first.read_bytes()[:2] == b"MZ"  # a PE/COFF EFI application
    mtime = first.stat().st_mtime_ns
    assert arm64_grub(tmp_path, "http://a.example:8080") == first and first.stat().st_mtime_ns == mtime
    other = arm64_grub(tmp_path, "http://b.example:8080")
    assert other != first
    assert sorted(p.name for p in (tmp_path / "loaders").iterdir()) == sorted([first.parent.name, other.parent.name])


def test_loaders_writes_the_tftp_root(reference: Path, tmp_path: Path, capsys) -> None:
    config = write_config(tmp_path / "bootserver.yaml", doc(reference))
    rc = main(["loaders", str(tmp_path / "tftp"), "--config", str(config)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert out.split() == [str(tmp_path / "tftp" / name) for name in ("grubaa64.efi", "ipxe.efi", "undionly.kpxe")]
    # iPXE on the firmware's network driver (its exit returns to the firmware, which boots the disk)
    assert (tmp_path / "tftp" / "ipxe.efi").read_bytes() == Path("/usr/lib/ipxe/snponly.efi").read_bytes()
    (cached,) = (tmp_path / "cache" / "loaders").iterdir()
    assert (tmp_path / "tftp" / "grubaa64.efi").read_bytes() == (cached / "grubaa64.efi").read_bytes()


def test_loaders_refuses_a_base_url_grub_cannot_fetch(reference: Path, tmp_path: Path, capsys) -> None:
    config = write_config(tmp_path / "bootserver.yaml", doc(reference, "https://boot.example.net"))
    rc = main(["loaders", str(tmp_path / "tftp"), "--config", str(config)])
    _out, err = capsys.readouterr()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "GRUB fetches plain http URLs" in err
    assert not (tmp_path / "tftp" / "grubaa64.efi").exists()


async def test_the_server_offers_the_grub_and_the_generic_grub_entry(aiohttp_client, reference: Path,
                                                                     tmp_path: Path) -> None:
    config = parse_config(doc(reference), "t.yaml", tmp_path)
    client = await aiohttp_client(create_app(config, fixed_signer()))
    r = await client.get("/loaders/grubaa64.efi")
    assert r.status == 200 and r.content_type == "application/efi"
    assert (await r.read()) == arm64_grub(config.cache_dir, config.server.effective_base_url).read_bytes()

    r = await client.get(f"/boot.grub?mac={MAC}")
    assert r.status == 200 and r.content_type == "text/plain"
    grub = await r.text()
    linux = next(line.strip() for line in grub.splitlines() if line.strip().startswith("if linux "))
    kernel, *kargs = shlex.split(linux.removeprefix("if ").removesuffix("; then"))[1:]
    assert kernel.startswith("(http,boot.example.net:8080)/artifacts/rhcos-4.16/aarch64/")
    assert "console=ttyAMA0,115200" in kargs and "coreos.inst.platform_id=metal" in kargs
    # an unknown machine gets GRUB's discovery script (issue 41): it reports what GRUB knows, then waits
    r = await client.get("/boot.grub?mac=52:54:00:00:00:ff")
    waiting = await r.text()
    assert r.status == 200 and "set bs_mac='52:54:00:00:00:ff'\n" in waiting
    assert "smbios --type 1 --get-uuid 8 --set bs_uuid" in waiting and "sleep 30\n" in waiting
    assert "cat '(http,boot.example.net:8080)/discover?'\"mac=${bs_mac}&uuid=${bs_uuid}&" in waiting
    assert "source '(http,boot.example.net:8080)/boot.grub?mac='\"${bs_mac}\"" in waiting
    odd = await (await client.get("/boot.grub?mac=%27%3Breboot")).text()  # not a MAC: GRUB's own is used
    assert 'set bs_mac="$net_default_mac"' in odd and "reboot" not in odd
    for script in (waiting, odd):  # GRUB's own parser reads it (grub-common's grub-script-check)
        (tmp_path / "discover.grub").write_text(script)
        check = subprocess.run(["grub-script-check", str(tmp_path / "discover.grub")], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
    # a script request for the timeline, as /boot.ipxe; boot-once once the installer fetched its stub
    admin = await aiohttp_client(client.app[ADMIN_APP])
    report = await (await admin.get("/nodes/arm-0")).json()
    assert report["stage"] == "ipxe" and [e["event"] for e in report["events"]] == ["script"]
    stub = next(k.split("=", 1)[1] for k in kargs if k.startswith("coreos.inst.ignition_url="))
    assert (await client.get(stub.removeprefix("http://boot.example.net:8080"))).status == 200
    grub = await (await client.get(f"/boot.grub?mac={MAC}")).text()
    assert "echo 'bootserver: node arm-0 is installed, booting from the local disk'\nexit\n" in grub


async def test_the_boot_image_of_an_aarch64_node_is_uefi_only_with_the_arm64_grub(reference: Path,
                                                                                  tmp_path: Path) -> None:
    from support.helpers import run_cli
    from support.networks import STATIC

    config = doc(reference)
    config["nodes"]["arm-0"]["network"] = {**STATIC, "interfaces": [{**STATIC["interfaces"][0],
                                                                     "mac-address": MAC}]}
    path = write_config(tmp_path / "bootserver.yaml", config)
    rc, stdout, err = await run_cli("iso", "arm-0", "--config", str(path), cwd=tmp_path)
    assert (rc, stdout) == (0, ""), err
    image = (tmp_path / "arm-0.iso").read_bytes()
    assert image[0x8001:0x8006] == b"CD001" and b"EL TORITO SPECIFICATION" in image[0x8800:0x9000]
    assert b"BOOTAA64EFI" in image or b"BOOTAA64.EFI" in image  # the arm64 GRUB in the FAT image
    assert b"isolinux" not in image and b"ipxe.lkrn" not in image  # no BIOS boot
    assert b"net_add_addr bootserver $bootnic 192.0.2.10" in image and b"/grub/arm-0?exp=" in image


async def test_grubs_discovery_script_is_on_the_ipv4_base_url_whichever_is_listed_first(
        aiohttp_client, reference: Path, tmp_path: Path) -> None:
    """GRUB fetches over IPv4 (or a host name) only: with an IPv6 base URL listed first, an unknown
    machine's GRUB still gets a discovery script it can follow."""
    d = doc(reference)
    d["server"]["base_url"] = ["http://[2001:db8::1]:8080", "http://192.0.2.1:8080"]
    config = parse_config(d, "t.yaml", tmp_path)
    client = await aiohttp_client(create_app(config, fixed_signer()))
    r = await client.get("/boot.grub?mac=52:54:00:00:00:ff")
    waiting = await r.text()
    assert r.status == 200 and "cat '(http,192.0.2.1:8080)/discover?'" in waiting, waiting
    assert "source '(http,192.0.2.1:8080)/boot.grub?mac='" in waiting and "2001:db8" not in waiting
