"""Secure Boot over the network (issue 39, item 2), without a firmware: a ``secure_boot`` stream's release
gives its signed shim, GRUB and MokManager (from its live ISO, fetched through the cache once) as a network
loader set, over HTTP (``/loaders/secureboot/<stream>/...``) and in a TFTP root (``bootserver loaders``),
with one GRUB config for every node, where the vendors' network GRUBs look, that sources the node's boot
by MAC. Booting it under Secure Boot is tests/e2e/test_secureboot_network.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from support.helpers import config_accepted, run_cli
from support.secureboot import LOADERS, secureboot_setup
from support.upstreams import Upstream

from bootserver.config import load_config
from bootserver.dhcp.dnsmasq import layout
from bootserver.dhcp.engine import write_secure_boot_sets
from bootserver.http.app import create_app


@pytest.fixture
def setup(reference: Path, tmp_path: Path, upstream: Upstream):
    """The Secure Boot image tests' config (support.secureboot): an FCOS stream with a stand-in live ISO,
    nodes sb-0 and sb-1 on it, and a secure_boot node on a stream without a live ISO."""
    return secureboot_setup(reference, tmp_path, upstream)


#: The generic config: the node's boot by the MAC GRUB booted from, over GRUB's http (IPv4 base URL).
GENERIC = ("# bootserver: Secure Boot over the network; the node's boot comes by the MAC GRUB booted from\n"
           "set timeout=0\n"
           "if insmod http; then\n"
           "  source '(http,boot.example.net:8080)/boot.grub?mac='\"$net_default_mac\"\n"
           "fi\n"
           'source "($root)/secureboot/nodes/$net_default_mac.cfg"\n'
           "echo 'bootserver: no boot config for this machine; falling through to the next boot device'\n"
           "sleep 10\n"
           "exit\n")


async def test_the_server_serves_the_release_loaders_and_one_grub_config(aiohttp_client, setup,
                                                                        upstream: Upstream) -> None:
    path, _ = setup
    client = await aiohttp_client(create_app(load_config(path)))
    for served, inside in (("bootx64.efi", "BOOTX64.EFI"), ("grubx64.efi", "grubx64.efi"),
                           ("mmx64.efi", "mmx64.efi")):
        r = await client.get(f"/loaders/secureboot/fcos/{served}")
        assert r.status == 200 and await r.read() == LOADERS[inside], served
        assert r.headers["Content-Type"] == "application/efi"
    assert upstream.gets["/live.x86_64.iso"] == 1  # fetched once, extracted once
    for where in ("/loaders/secureboot/fcos/grub.cfg", "/grub/grub.cfg"):
        r = await client.get(where)
        assert r.status == 200 and await r.text() == GENERIC, where
    # what shim asks for besides (revocations, certificates) and streams no secure_boot node boots from
    for where in ("/loaders/secureboot/fcos/revocations_sbat.efi", "/loaders/secureboot/plain/bootx64.efi",
                  "/loaders/secureboot/nope/bootx64.efi"):
        r = await client.get(where)
        assert r.status == 404 and await r.text() == "no such loader\n", where
    # a secure_boot stream whose release has no live ISO: the stream is at fault, said without a path
    r = await client.get("/loaders/secureboot/no-iso/bootx64.efi")
    assert r.status == 502 and await r.text() == "no Secure Boot loaders here\n"


async def test_loaders_writes_the_set_into_a_tftp_root(setup, tmp_path: Path) -> None:
    path, files = setup
    root = tmp_path / "tftp"
    # a secure_boot node on a stream whose release has no live ISO: one line naming the stream, exit 2
    rc, out, err = await run_cli("loaders", str(root), "--config", str(path), timeout=120)
    assert (rc, err) == (2, "bootserver: stream no-iso (release 39.20231101.3.0) offers no live ISO "
                            "(metal.formats.iso.disk) to take the signed loaders from\n")
    doc = yaml.safe_load(path.read_text())
    del doc["nodes"]["no-iso"]
    path.write_text(yaml.safe_dump(doc))
    rc, out, err = await run_cli("loaders", str(root), "--config", str(path), timeout=120)
    assert rc == 0, err
    written = {Path(line).relative_to(root).as_posix() for line in out.splitlines()}
    assert {"secureboot/fcos/bootx64.efi", "secureboot/fcos/grubx64.efi", "secureboot/fcos/mmx64.efi",
            "secureboot/fcos/grub.cfg", "grub/grub.cfg", "ipxe.efi", "undionly.kpxe"} <= written
    assert (root / "secureboot/fcos/bootx64.efi").read_bytes() == LOADERS["BOOTX64.EFI"]
    assert (root / "secureboot/fcos/grubx64.efi").read_bytes() == LOADERS["grubx64.efi"]
    assert (root / "secureboot/fcos/grub.cfg").read_text() == (root / "grub/grub.cfg").read_text() == GENERIC
    # for a vendor GRUB without http: each node's own config by MAC, its release's kernel and initramfs
    own = (root / "secureboot/nodes/52:54:00:00:00:01.cfg").read_text()
    linux = next(line for line in own.splitlines() if line.startswith("linux "))
    release = linux.split()[1].split("/")[3]
    assert linux.startswith(f"linux ($root)/secureboot/fcos/{release}/vmlinuz 'coreos.live.rootfs_url=http")
    assert "'ip=192.0.2.10::192.0.2.1:24:sb-0:nic0:none'" in linux and "initrd=main" not in linux
    assert f"initrd ($root)/secureboot/fcos/{release}/initrd.img\nboot\n" in own
    kernel = next(data for p, data in files.items() if "kernel" in p)
    assert (root / f"secureboot/fcos/{release}/vmlinuz").read_bytes() == kernel


async def engine_config(path: Path, what: str, **dhcp: object) -> str:
    """``bootserver dhcp --print WHAT`` of the setup with ``dhcp`` (on ``lo``), its secure_boot nodes sb-0
    and sb-1 as DHCP nodes, and a plain node ``plain-0`` with a MAC, on dual-stack base URLs."""
    doc = yaml.safe_load(path.read_text())
    doc["dhcp"] = {"interface": "lo", **dhcp}
    for node in ("sb-0", "sb-1"):  # their static addresses are not on the interface's subnet: DHCP nodes
        del doc["nodes"][node]["network"]
    doc["nodes"]["plain-0"] = {"profile": "plain", "mac": "52:54:00:00:00:09"}
    doc["server"]["base_url"] = ["http://192.0.2.1:8080", "http://[2001:db8::1]:8080"]
    path.write_text(yaml.safe_dump(doc))
    rc, out, err = await run_cli("dhcp", "--print", what, "--config", str(path), timeout=60)
    assert rc == 0, err
    return out


SHIM_URL = "http://192.0.2.1:8080/loaders/secureboot/fcos/bootx64.efi"


async def test_the_dhcp_engine_hands_a_secure_boot_node_its_shim_never_ipxe(setup, tmp_path: Path) -> None:
    path, _ = setup
    out = await engine_config(path, "dnsmasq", mode="full")
    lines = out.splitlines()
    assert [ln for ln in lines if ln.startswith("dhcp-mac=")] == [
        "dhcp-mac=set:secureboot,52:54:00:00:00:01", "dhcp-mac=set:secureboot-sb-0,52:54:00:00:00:01",
        "dhcp-mac=set:secureboot,52:54:00:00:00:02", "dhcp-mac=set:secureboot-sb-1,52:54:00:00:00:02"]
    boots = [line for line in lines if line.startswith("dhcp-boot=")]
    # each node's own lines, and no line that hands iPXE to a UEFI x86_64 firmware matches a secure_boot node
    assert boots[-4:] == [f"dhcp-boot=tag:!ipxe,tag:http64,tag:secureboot-sb-1,{SHIM_URL}",
                          "dhcp-boot=tag:!ipxe,tag:efi64,tag:secureboot-sb-1,secureboot/fcos/bootx64.efi",
                          f"dhcp-boot=tag:!ipxe,tag:http64,tag:secureboot-sb-0,{SHIM_URL}",
                          "dhcp-boot=tag:!ipxe,tag:efi64,tag:secureboot-sb-0,secureboot/fcos/bootx64.efi"]
    assert "dhcp-boot=tag:!ipxe,tag:http64,tag:!secureboot,http://192.0.2.1:8080/loaders/ipxe.efi" in boots
    assert "dhcp-boot=tag:!ipxe,tag:efi64,tag:!secureboot,ipxe.efi" in boots
    assert [b for b in boots if "ipxe.efi" in b and "!secureboot" not in b] == []
    assert "dhcp-option-force=tag:http64,option:vendor-class,HTTPClient" in lines
    config_accepted(["dnsmasq", "--test", "-C"], out, tmp_path / "dnsmasq.conf")


async def test_proxy_mode_menus_a_secure_boot_node_its_shim_never_ipxe(setup, tmp_path: Path) -> None:
    path, _ = setup
    out = await engine_config(path, "dnsmasq")
    services = [ln for ln in out.splitlines() if ln.startswith("pxe-service=")]
    assert services[:4] == [
        'pxe-service=tag:!ipxe,tag:secureboot-sb-0,X86-64_EFI,"bootserver",secureboot/fcos/bootx64.efi',
        'pxe-service=tag:!ipxe,tag:secureboot-sb-0,BC_EFI,"bootserver",secureboot/fcos/bootx64.efi',
        'pxe-service=tag:!ipxe,tag:secureboot-sb-1,X86-64_EFI,"bootserver",secureboot/fcos/bootx64.efi',
        'pxe-service=tag:!ipxe,tag:secureboot-sb-1,BC_EFI,"bootserver",secureboot/fcos/bootx64.efi']
    ipxe_efi = [ln for ln in services if ln.endswith(",ipxe")]
    assert ipxe_efi == ['pxe-service=tag:!ipxe,tag:!secureboot,X86-64_EFI,"bootserver",ipxe',
                        'pxe-service=tag:!ipxe,tag:!secureboot,BC_EFI,"bootserver",ipxe']
    assert "dhcp-mac=set:secureboot,52:54:00:00:00:01" in out.splitlines()
    assert "dhcp-host=52:54:00:00:00:01" in out.splitlines()  # proxy mode: the MAC alone, no options to tag
    config_accepted(["dnsmasq", "--test", "-C"], out, tmp_path / "dnsmasq.conf")


async def test_kea_hands_a_secure_boot_node_its_shim_over_pxe_and_http_boot(setup, tmp_path: Path) -> None:
    path, _ = setup
    out = await engine_config(path, "kea", mode="full")
    doc = json.loads(out)["Dhcp4"]
    classes = {c["name"]: c for c in doc["client-classes"]}
    assert doc["client-classes"][0] == {
        "name": "secureboot", "test": "pkt4.mac == 0x525400000001 or pkt4.mac == 0x525400000002"}
    assert classes["node-sb-0-http64"] == {
        "name": "node-sb-0-http64",
        "test": "pkt4.mac == 0x525400000001 and (option[93].hex == 0x0010) and not member('ipxe')",
        "boot-file-name": SHIM_URL, "option-data": [{"name": "vendor-class-identifier", "data": "HTTPClient"}]}
    assert classes["node-sb-1-efi64"] == {
        "name": "node-sb-1-efi64",
        "test": "pkt4.mac == 0x525400000002 and (option[93].hex == 0x0007 or option[93].hex == 0x0009) "
                "and not member('ipxe')",
        "boot-file-name": "secureboot/fcos/bootx64.efi", "next-server": "192.0.2.1"}
    # the classes that hand iPXE to a UEFI x86_64 firmware leave the secure_boot nodes out
    for name in ("efi64", "http64"):
        assert classes[name]["test"].endswith("and not member('ipxe') and not member('secureboot')"), name
    assert all("boot-file-name" not in r for r in doc["subnet4"][0]["reservations"])
    config_accepted(["kea-dhcp4", "-t"], out, tmp_path / "kea.json")


async def test_dhcpv6_hands_http_boot_the_loader_and_ipxe_its_script_on_the_ipv6_base(setup, tmp_path: Path) -> None:
    path, _ = setup
    out = await engine_config(path, "dnsmasq", mode="full", ipv6=True)
    lines = out.splitlines()
    assert lines[lines.index("enable-ra") + 2:][:6] == [
        "dhcp-vendorclass=set:http6-vendor,enterprise:343,HTTPClient",
        "dhcp-match=set:http6-arch,option6:61,00:10",
        "tag-if=set:http6,tag:http6-vendor,tag:http6-arch",
        'dhcp-option=tag:http6,tag:!ipxe,tag:!secureboot,option6:bootfile-url,'
        '"http://[2001:db8::1]:8080/loaders/ipxe.efi"',
        "dhcp-option-force=tag:http6,option6:16,HT,HTTPClient",
        'dhcp-option=tag:ipxe,option6:bootfile-url,"http://[2001:db8::1]:8080/boot.ipxe?mac=${net0/mac}"']
    # over DHCPv4 iPXE chains on the IPv4 base URL
    assert "dhcp-boot=tag:ipxe,http://192.0.2.1:8080/boot.ipxe?mac=${net0/mac}" in lines
    config_accepted(["dnsmasq", "--test", "-C"], out, tmp_path / "dnsmasq.conf")


async def test_the_dhcp_engine_keeps_the_sets_in_its_tftp_root_and_check_config_refuses_a_stream_without_iso(
        setup) -> None:
    """The engine's TFTP root gets what ``bootserver loaders`` writes for the ``secure_boot`` streams (its boot
    file for those nodes is ``secureboot/<stream>/bootx64.efi``); a stream without a live ISO is a line
    naming it, and ``check-config`` refuses the node on it, naming its key."""
    path, _ = setup
    config = load_config(path)
    files = layout(config)
    written, failed = await write_secure_boot_sets(config, files)
    for served, inside in (("bootx64.efi", "BOOTX64.EFI"), ("grubx64.efi", "grubx64.efi"), ("mmx64.efi", "mmx64.efi")):
        assert (files.tftp_root / "secureboot" / "fcos" / served).read_bytes() == LOADERS[inside]
    assert (files.tftp_root / "secureboot" / "fcos" / "grub.cfg").read_text() == GENERIC
    assert {p.relative_to(files.tftp_root).as_posix() for p in written} == {
        "secureboot/fcos/bootx64.efi", "secureboot/fcos/grubx64.efi", "secureboot/fcos/mmx64.efi",
        "secureboot/fcos/grub.cfg", "grub/grub.cfg"}
    assert failed == ["stream no-iso: stream no-iso (release 39.20231101.3.0) offers no live ISO "
                      "(metal.formats.iso.disk) to take the signed loaders from"]
    # at the next reload the same sets are in place already: nothing copied again (same inodes, same files)
    inodes = {p: p.stat().st_ino for p in written}
    again, _ = await write_secure_boot_sets(config, files)
    assert again == written and {p: p.stat().st_ino for p in again} == inodes
    rc, out, err = await run_cli("check-config", "--config", str(path))
    assert (rc, out) == (2, "") and err == (
        f"bootserver: {path}: nodes.no-iso.secure_boot: node no-iso boots under Secure Boot, but stream no-iso's "
        "release 39.20231101.3.0 offers no live ISO (metal.formats.iso.disk), the only source of its signed shim "
        "and GRUB\n"), err
    # the stream's metadata at a URL not synced yet: not checked, and check-config says so
    doc = yaml.safe_load(path.read_text())
    doc["streams"]["no-iso"]["metadata"] = "http://127.0.0.1:9/no-iso.json"
    path.write_text(yaml.safe_dump(doc))
    rc, out, err = await run_cli("check-config", "--config", str(path))
    assert rc == 0 and err.splitlines()[0] == (
        "bootserver: warning: stream no-iso: its metadata is not at hand (no file, not synced): whether its release "
        "offers the live ISO its secure_boot nodes need is not checked (run sync-images, then check-config)"), err
    del doc["nodes"]["no-iso"]
    path.write_text(yaml.safe_dump(doc))
    rc, out, err = await run_cli("check-config", "--config", str(path))
    assert rc == 0, err
    assert "not at hand" not in err
