"""``bootserver iso NODE``: which interface the image brings up and how (static, no DHCP; or DHCP, said on
stderr), bad input (one line naming node and key, exit 2, no file written, also from ``check-config``),
and the iPXE commands the BIOS boot runs. Booting the image is in tests/e2e/test_iso_boot.py."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from support.helpers import run_cli, write_config
from support.networks import MAC, STATIC

from bootserver.config import parse_config
from bootserver.images.netboot import grub_cfg, ipxe_commands
from bootserver.images.network import BootNetwork, boot_network
from bootserver.inventory import inventory

BOND = {
    "interfaces": [
        {"name": "nic0", "type": "ethernet", "mac-address": "52:54:00:00:00:02"},
        {"name": "nic1", "type": "ethernet", "mac-address": MAC},
        {"name": "bond0", "type": "bond", "link-aggregation": {"mode": "active-backup", "port": ["nic0", "nic1"]},
         "ipv4": {"enabled": True, "address": [{"ip": "10.0.0.5", "prefix-length": 16}]}},
    ],
    "routes": {"config": [{"destination": "0.0.0.0/0", "next-hop-address": "10.0.0.1"}]},
}


def doc(reference: Path, tmp_path: Path, network: Any = None, mac: Any = MAC) -> dict[str, Any]:
    node: dict[str, Any] = {"profile": "metal"}
    if mac is not None:
        node["mac"] = mac
    if network is not None:
        node["network"] = network
    return {
        "server": {"base_url": "http://boot.example.net:8080"},
        "cache_dir": str(tmp_path / "cache"),
        "state_dir": str(tmp_path / "state"),
        "streams": {"fcos-stable": {"metadata": str(reference / "fcos-stream-stable.json")}},
        "profiles": {"metal": {"stream": "fcos-stable", "mode": "install", "install_dev": "/dev/sda"}},
        "nodes": {"master-0": node},
    }


def boot_of(reference: Path, tmp_path: Path, network: Any, mac: Any = MAC) -> BootNetwork:
    config = parse_config(doc(reference, tmp_path, network, mac), "b.yaml", tmp_path)
    return boot_network(config.source, inventory(config)["master-0"])


def test_the_interface_with_the_node_mac_gets_its_static_address(reference: Path, tmp_path: Path) -> None:
    boot = boot_of(reference, tmp_path, STATIC)
    assert boot == BootNetwork("nic0", MAC, "192.0.2.10", 24, "192.0.2.1", ("192.0.2.53",))
    assert not boot.dhcp and boot.netmask == "255.255.255.0"


def test_a_bond_port_with_the_node_mac_brings_up_the_bond_address(reference: Path, tmp_path: Path) -> None:
    assert boot_of(reference, tmp_path, BOND) == BootNetwork("bond0", MAC, "10.0.0.5", 16, "10.0.0.1", ())


def test_the_only_interface_with_addresses_when_no_mac_is_pinned(reference: Path, tmp_path: Path) -> None:
    network = copy.deepcopy(STATIC)
    del network["interfaces"][0]["mac-address"]
    assert boot_of(reference, tmp_path, network).address == "192.0.2.10"
    assert boot_of(reference, tmp_path, network).mac == MAC  # the node's MAC finds the NIC
    assert boot_of(reference, tmp_path, network, mac=None).mac is None  # net0


def test_dhcp_nodes_get_an_image_that_asks_dhcp(reference: Path, tmp_path: Path) -> None:
    assert boot_of(reference, tmp_path, None) == BootNetwork("", MAC)
    dhcp = {"interfaces": [{"name": "nic0", "type": "ethernet", "mac-address": MAC, "ipv4": {"dhcp": True}}]}
    assert boot_of(reference, tmp_path, dhcp).dhcp


def test_ipxe_commands_set_the_address_on_the_nic_with_the_mac_and_never_dhcp() -> None:
    line = ipxe_commands(BootNetwork("nic0", MAC, "192.0.2.10", 24, "192.0.2.1", ("192.0.2.53",)),
                         "http://boot.example.net/ipxe/n?exp=1&sig=x")
    assert line.startswith("set nic net0 ; iseq ${net1/mac} 52:54:00:00:00:01 && set nic net1 ; ")
    assert line.endswith(" ; ifopen ${nic} && set ${nic}/ip 192.0.2.10 && set ${nic}/netmask 255.255.255.0 "
                         "&& set ${nic}/gateway 192.0.2.1 && set ${nic}/dns 192.0.2.53 "
                         "&& chain --autofree http://boot.example.net/ipxe/n?exp=1&sig=x")
    assert "dhcp" not in line
    assert ipxe_commands(BootNetwork("", None), "http://b/ipxe/n").endswith("; dhcp ${nic} && chain --autofree "
                                                                            "http://b/ipxe/n")


def _edit(network: dict[str, Any], change) -> dict[str, Any]:
    network = copy.deepcopy(network)
    change(network)
    return network


BAD = [
    ("no interface matching the MAC", _edit(STATIC, lambda n: n["interfaces"][0].update(
        {"mac-address": "52:54:00:00:00:09"})),
     "nodes.master-0.network.interfaces: no interface has the node's MAC (52:54:00:00:00:01); mac-address "
     "names nic0 52:54:00:00:00:09: set mac-address on the boot interface"),
    ("address without a prefix", _edit(STATIC, lambda n: n["interfaces"][0]["ipv4"]["address"][0].pop(
        "prefix-length")),
     "nodes.master-0.network.interfaces[0].ipv4.address[0].prefix-length: required key is missing"),
    ("two default gateways", _edit(STATIC, lambda n: n["routes"]["config"].append(
        {"destination": "0.0.0.0/0", "next-hop-address": "192.0.2.2"})),
     "nodes.master-0.network.routes.config[1].destination: a second IPv4 default route (routes.config[0] is one)"),
    ("two interfaces with addresses, none pinned", _edit(STATIC, lambda n: (
        n["interfaces"][0].pop("mac-address"),
        n["interfaces"].append({"name": "nic1", "type": "ethernet",
                                "ipv4": {"enabled": True, "address": [{"ip": "198.51.100.5", "prefix-length": 24}]}}))),
     "nodes.master-0.network.interfaces: 2 interfaces have addresses and none has the node's MAC: set "
     "mac-address (one of the node's mac) on the boot interface"),
]


@pytest.mark.parametrize("network,message", [(n, m) for _, n, m in BAD], ids=[name for name, _, _ in BAD])
async def test_bad_input_is_exit_2_one_line_naming_node_and_key_and_writes_nothing(
        network: dict[str, Any], message: str, reference: Path, tmp_path: Path) -> None:
    path = write_config(tmp_path / "bootserver.yaml", doc(reference, tmp_path, network))
    out = tmp_path / "out.iso"
    rc, stdout, err = await run_cli("iso", "master-0", "-o", str(out), "--config", str(path))
    assert (rc, stdout, err) == (2, "", f"bootserver: {path}: {message}\n")
    assert not out.exists()
    rc, stdout, err = await run_cli("check-config", "--config", str(path))
    assert (rc, stdout, err) == (2, "", f"bootserver: {path}: {message}\n")


async def test_what_only_the_image_cannot_do_fails_iso_not_check_config(reference: Path, tmp_path: Path) -> None:
    v6 = {"interfaces": [{"name": "nic0", "type": "ethernet", "mac-address": MAC,
                          "ipv6": {"enabled": True, "address": [{"ip": "2001:db8::5", "prefix-length": 64}]}}]}
    path = write_config(tmp_path / "bootserver.yaml", doc(reference, tmp_path, v6))
    rc, stdout, err = await run_cli("check-config", "--config", str(path))
    assert rc == 0, err
    rc, stdout, err = await run_cli("iso", "master-0", "-o", str(tmp_path / "out.iso"), "--config", str(path))
    assert (rc, stdout) == (2, "")
    assert err == ("bootserver: node master-0: nodes.master-0.network: the boot interface nic0 has only IPv6 "
                   "addresses; the boot image sets a static IPv4 address only (add one, or boot it over PXE)\n")
    assert not (tmp_path / "out.iso").exists()


async def test_iso_writes_a_bootable_image_and_says_how_it_boots(reference: Path, tmp_path: Path) -> None:
    path = write_config(tmp_path / "bootserver.yaml", doc(reference, tmp_path, STATIC))
    rc, stdout, err = await run_cli("iso", "master-0", "--config", str(path), cwd=tmp_path)
    assert (rc, stdout) == (0, ""), err
    image = (tmp_path / "master-0.iso").read_bytes()
    assert image[0x8001:0x8006] == b"CD001"  # an ISO 9660 volume descriptor
    assert b"EL TORITO SPECIFICATION" in image[0x8800:0x9000]  # with a boot record
    assert err.startswith(f"bootserver: master-0: wrote master-0.iso ({len(image)} bytes, static 192.0.2.10/24 "
                          f"via 192.0.2.1 on nic0 ({MAC}), ready in ")
    assert b"set ${nic}/ip 192.0.2.10" in image and b"/ipxe/master-0?exp=" in image  # BIOS
    assert b"net_add_addr bootserver $bootnic 192.0.2.10" in image and b"/grub/master-0?exp=" in image  # UEFI


def test_grub_cfg_sets_the_address_on_the_card_with_the_mac_and_never_dhcp() -> None:
    cfg = grub_cfg(BootNetwork("nic0", MAC, "192.0.2.10", 24, "192.0.2.1", ("192.0.2.53",)),
                   "http://boot.example.net:8080/grub/n?exp=1&sig=x")
    assert "for card in efinet0 efinet1 efinet2 efinet3 efinet4 efinet5 efinet6 efinet7; do" in cfg
    assert f'if [ "$net_probe_mac" = "{MAC}" ]; then set bootnic=$card; fi' in cfg
    assert cfg.endswith("net_add_addr bootserver $bootnic 192.0.2.10\n"
                        "net_add_route bootserver-lan 192.0.2.0/24 bootserver\n"
                        "net_add_route bootserver-default 0.0.0.0/0 gw 192.0.2.1\n"
                        "net_add_dns 192.0.2.53\n"
                        "source '(http,boot.example.net:8080)/grub/n?exp=1&sig=x'\n"
                        "echo 'bootserver: the boot config could not be fetched; falling through to the next "
                        "boot device'\nsleep 10\nexit\n")
    assert "net_bootp" not in cfg and "dhcp" not in cfg
    assert "net_bootp $bootnic\n" in grub_cfg(BootNetwork("", None), "http://b/grub/n")


async def test_grub_needs_plain_http(reference: Path, tmp_path: Path) -> None:
    d = doc(reference, tmp_path, STATIC)
    d["server"]["base_url"] = "https://boot.example.net"
    path = write_config(tmp_path / "bootserver.yaml", d)
    rc, stdout, err = await run_cli("iso", "master-0", "-o", str(tmp_path / "out.iso"), "--config", str(path))
    assert (rc, stdout) == (2, "")
    assert err == ("bootserver: GRUB fetches plain http URLs of a host name or IPv4 address only, not "
                   "https://boot.example.net/grub/master-0?exp=" + err.split("?exp=")[1])
    assert err.count("\n") == 1 and not (tmp_path / "out.iso").exists()


async def test_check_config_counts_grubs_boot_image_for_a_node_that_boots_its_image(reference: Path,
                                                                                   tmp_path: Path) -> None:
    # The largest network whose iPXE command line fits leaves no room for GRUB's BOOT_IMAGE=<kernel>:
    # check-config passes for a network-booted node and fails, naming the node, once it boots its image.
    from support.networks import long_network

    found = None
    for n in range(1, 40):
        d = doc(reference, tmp_path, long_network(n), mac=None)
        path = write_config(tmp_path / "bootserver.yaml", d)
        rc, _, err = await run_cli("check-config", "--config", str(path))
        if rc != 0:
            break
        found = d
    assert found is not None
    path = write_config(tmp_path / "bootserver.yaml", found)
    assert (await run_cli("check-config", "--config", str(path)))[0] == 0
    found["profiles"]["metal"] |= {"provider": "redfish", "redfish": {"boot_source": "virtual-media"}}
    found["nodes"]["master-0"]["mac"] = "52:54:00:00:00:01"
    path = write_config(tmp_path / "bootserver.yaml", found)
    rc, out, err = await run_cli("check-config", "--config", str(path))
    assert (rc, out) == (2, "")
    assert err.startswith(f"bootserver: {path}: node master-0: the kernel command line under GRUB needs ")
    assert "(BOOT_IMAGE= included), more than the 2048 of x86_64" in err and err.count("\n") == 1
