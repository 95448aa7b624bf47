"""Node networks through the real parser: render a node's iPXE script, hand the kernel arguments of its
``kernel`` line to NetworkManager's ``nm-initrd-generator`` (what the live initramfs of RHCOS and Fedora
CoreOS runs), and compare the connections it generates with the node's config, exactly.

The generator is unpacked from Debian's network-manager package by .ci/prepare.d/nm-initrd-generator.sh;
without it these tests skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from support.fake_metal import PROJECT, fake_metal_fixture, metal_env_fixture  # noqa: F401 - fixtures
from support.helpers import write_config
from support.nm_generator import connections
from support.services import service
from support.signing import fixed_signer

from bootserver.cli import main
from bootserver.config import load_config, parse_config

GOLDEN = Path(__file__).parent / "golden"

NIC0, NIC1 = "b8:ce:f6:10:20:30", "b8:ce:f6:10:20:31"

#: Each case: the node's ``network`` and the connections the generator must make of it.
CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "static-ethernet": (
        {"interfaces": [{"name": "nic0", "type": "ethernet", "state": "up", "mac-address": NIC0,
                         "ipv4": {"enabled": True, "address": [{"ip": "192.168.10.20", "prefix-length": 24}]},
                         "ipv6": {"enabled": False}}],
         "routes": {"config": [
             {"destination": "0.0.0.0/0", "next-hop-address": "192.168.10.1", "next-hop-interface": "nic0"},
             {"destination": "172.16.0.0/12", "next-hop-address": "192.168.10.254", "next-hop-interface": "nic0"}]},
         "dns-resolver": {"config": {"server": ["192.168.10.2", "192.168.10.3"]}}},
        {"nic0": {"type": "ethernet", "interface": "nic0",
                  "ipv4": {"method": "manual", "addresses": ["192.168.10.20/24"], "gateway": "192.168.10.1",
                           "routes": ["172.16.0.0/12,192.168.10.254"], "dns": ["192.168.10.2", "192.168.10.3"]},
                  "ipv6": {"method": "disabled"}}},
    ),
    "bond-public-private-ipv6": (
        {"interfaces": [
            {"name": "nic0", "type": "ethernet", "mac-address": NIC0},
            {"name": "nic1", "type": "ethernet", "mac-address": NIC1},
            {"name": "bond0", "type": "bond", "state": "up",
             "link-aggregation": {"mode": "802.3ad", "port": ["nic0", "nic1"],
                                  "options": {"lacp_rate": "fast", "miimon": 100, "xmit_hash_policy": "layer3+4"}},
             "ipv4": {"enabled": True, "address": [{"ip": "147.75.1.3", "prefix-length": 31},
                                                   {"ip": "10.70.1.3", "prefix-length": 31}]},
             "ipv6": {"enabled": True, "address": [{"ip": "2604:1380:1::3", "prefix-length": 127}]}}],
         "routes": {"config": [
             {"destination": "10.0.0.0/8", "next-hop-address": "10.70.1.2", "next-hop-interface": "bond0"},
             {"destination": "0.0.0.0/0", "next-hop-address": "147.75.1.2", "next-hop-interface": "bond0"},
             {"destination": "::/0", "next-hop-address": "2604:1380:1::2", "next-hop-interface": "bond0"}]},
         "dns-resolver": {"config": {"server": ["147.75.207.207", "2001:4860:4860::8888"]}}},
        {"nic0": {"type": "ethernet", "interface": "nic0", "port-of": "bond0", "port-type": "bond"},
         "nic1": {"type": "ethernet", "interface": "nic1", "port-of": "bond0", "port-type": "bond"},
         "bond0": {"type": "bond", "interface": "bond0",
                   "bond": {"mode": "802.3ad", "lacp_rate": "fast", "miimon": "100", "xmit_hash_policy": "layer3+4"},
                   "ipv4": {"method": "manual", "addresses": ["147.75.1.3/31", "10.70.1.3/31"],
                            "gateway": "147.75.1.2", "routes": ["10.0.0.0/8,10.70.1.2"], "dns": ["147.75.207.207"]},
                   "ipv6": {"method": "manual", "addresses": ["2604:1380:1::3/127"], "gateway": "2604:1380:1::2",
                            "dns": ["2001:4860:4860::8888"]}}},
    ),
    "vlan-on-ethernet": (
        {"interfaces": [
            {"name": "nic0", "type": "ethernet", "mac-address": NIC0, "ipv4": {"enabled": False}},
            {"name": "nic0.100", "type": "vlan", "vlan": {"base-iface": "nic0", "id": 100},
             "ipv4": {"enabled": True, "address": [{"ip": "10.100.0.7", "prefix-length": 24}]}}],
         "routes": {"config": [{"destination": "0.0.0.0/0", "next-hop-address": "10.100.0.1",
                                "next-hop-interface": "nic0.100"}]},
         "dns-resolver": {"config": {"server": ["10.100.0.1"]}}},
        {"nic0": {"type": "ethernet", "interface": "nic0",
                  "ipv4": {"method": "disabled"}, "ipv6": {"method": "disabled"}},
         "nic0.100": {"type": "vlan", "interface": "nic0.100", "vlan": {"id": "100", "parent": "nic0"},
                      "ipv4": {"method": "manual", "addresses": ["10.100.0.7/24"], "gateway": "10.100.0.1",
                               "dns": ["10.100.0.1"]},
                      "ipv6": {"method": "disabled"}}},
    ),
    "vlan-on-bond": (
        {"interfaces": [
            {"name": "nic0", "type": "ethernet", "mac-address": NIC0},
            {"name": "nic1", "type": "ethernet", "mac-address": NIC1},
            {"name": "bond0", "type": "bond",
             "link-aggregation": {"mode": "active-backup", "port": ["nic0", "nic1"], "options": {"miimon": "100"}},
             "ipv4": {"enabled": True, "dhcp": True}},
            {"name": "vlan200", "type": "vlan", "vlan": {"base-iface": "bond0", "id": 200},
             "ipv4": {"enabled": True, "address": [{"ip": "172.20.0.9", "prefix-length": 22}]}}],
         "routes": {"config": [{"destination": "172.21.0.0/16", "next-hop-address": "172.20.0.1",
                                "next-hop-interface": "vlan200"}]}},
        {"nic0": {"type": "ethernet", "interface": "nic0", "port-of": "bond0", "port-type": "bond"},
         "nic1": {"type": "ethernet", "interface": "nic1", "port-of": "bond0", "port-type": "bond"},
         "bond0": {"type": "bond", "interface": "bond0", "bond": {"mode": "active-backup", "miimon": "100"},
                   "ipv4": {"method": "auto"}, "ipv6": {"method": "auto"}},
         "vlan200": {"type": "vlan", "interface": "vlan200", "vlan": {"id": "200", "parent": "bond0"},
                     "ipv4": {"method": "manual", "addresses": ["172.20.0.9/22"],
                              "routes": ["172.21.0.0/16,172.20.0.1"]},
                     "ipv6": {"method": "disabled"}}},
    ),
    "ipv6-only": (
        {"interfaces": [{"name": "nic0", "type": "ethernet", "mac-address": NIC0, "ipv4": {"enabled": False},
                         "ipv6": {"enabled": True, "address": [{"ip": "2001:db8:10::20", "prefix-length": 64}]}}],
         "routes": {"config": [
             {"destination": "::/0", "next-hop-address": "2001:db8:10::1", "next-hop-interface": "nic0"},
             {"destination": "2001:db8:99::/48", "next-hop-address": "2001:db8:10::fe", "next-hop-interface": "nic0"}]},
         "dns-resolver": {"config": {"server": ["2001:db8:10::53"]}}},
        {"nic0": {"type": "ethernet", "interface": "nic0", "ipv4": {"method": "disabled"},
                  "ipv6": {"method": "manual", "addresses": ["2001:db8:10::20/64"], "gateway": "2001:db8:10::1",
                           "routes": ["2001:db8:99::/48,2001:db8:10::fe"], "dns": ["2001:db8:10::53"]}}},
    ),
    "dhcp-and-static": (
        {"interfaces": [
            {"name": "nic0", "type": "ethernet", "mac-address": NIC0,
             "ipv4": {"enabled": True, "dhcp": True}, "ipv6": {"enabled": True, "dhcp": True, "autoconf": True}},
            {"name": "nic1", "type": "ethernet", "mac-address": NIC1,
             "ipv4": {"enabled": True, "address": [{"ip": "192.168.50.4", "prefix-length": 24}]}}],
         "routes": {"config": [{"destination": "192.168.0.0/16", "next-hop-address": "192.168.50.1",
                                "next-hop-interface": "nic1"}]}},
        {"nic0": {"type": "ethernet", "interface": "nic0", "ipv4": {"method": "auto"}, "ipv6": {"method": "auto"}},
         "nic1": {"type": "ethernet", "interface": "nic1",
                  "ipv4": {"method": "manual", "addresses": ["192.168.50.4/24"],
                           "routes": ["192.168.0.0/16,192.168.50.1"]},
                  "ipv6": {"method": "disabled"}}},
    ),
    "static-ipv4-slaac-ipv6-one-interface": (
        {"interfaces": [{"name": "lan0", "type": "ethernet", "mac-address": NIC0,
                         "ipv4": {"enabled": True, "address": [{"ip": "192.168.60.8", "prefix-length": 24}]},
                         "ipv6": {"enabled": True, "dhcp": True, "autoconf": True}}],
         "routes": {"config": [{"destination": "0.0.0.0/0", "next-hop-address": "192.168.60.1",
                                "next-hop-interface": "lan0"}]}},
        {"lan0": {"type": "ethernet", "interface": "lan0",
                  "ipv4": {"method": "manual", "addresses": ["192.168.60.8/24"], "gateway": "192.168.60.1"},
                  "ipv6": {"method": "auto"}}},
    ),
}


def network_doc(reference: Path, tmp_path: Path, nodes: dict[str, Any], **profile: Any) -> dict[str, Any]:
    """A config document with the FCOS stream from tests/data, an install profile and ``nodes``."""
    return {
        "server": {"listen": "0.0.0.0:8080", "base_url": "http://boot.example.net:8080"},
        "cache_dir": str(tmp_path / "cache"),
        "state_dir": str(tmp_path / "state"),
        "streams": {"fcos-stable": {"metadata": str(reference / "fcos-stream-stable.json")}},
        "profiles": {"metal": {"stream": "fcos-stable", "mode": "install", "install_dev": "/dev/sda", **profile}},
        "nodes": nodes,
    }


def network_config(reference: Path, tmp_path: Path, nodes: dict[str, Any], **profile: Any):
    """:func:`network_doc`, loaded."""
    return parse_config(network_doc(reference, tmp_path, nodes, **profile), "network.yaml", tmp_path)


async def rendered_kargs(config, node: str) -> tuple[str, list[str]]:
    """``(script, kernel arguments of its kernel line)`` of the script the server sends ``node``."""
    script = await service(config, fixed_signer()).script(node)
    line = next(line for line in script.splitlines() if line.startswith("kernel "))
    words = line.removesuffix(" || goto retry").split()
    return script, words[2:]


@pytest.mark.parametrize("case", sorted(CASES))
async def test_generator_makes_exactly_the_configured_connections(case: str, reference: Path, tmp_path: Path) -> None:
    network, expected = CASES[case]
    config = network_config(reference, tmp_path, {"node-1": {"profile": "metal", "network": network,
                                                              "hostname": "node-1.example.net"}})
    _, kargs = await rendered_kargs(config, "node-1")
    made = connections(kargs)
    assert made["connections"] == expected
    assert made["hostname"] == "node-1.example.net"
    assert kargs[kargs.index("rd.neednet=1") - 1] == "coreos.inst.platform_id=metal"  # after bootserver's own
    pinned = {i["name"]: i["mac-address"] for i in network["interfaces"] if "mac-address" in i}
    assert [k for k in kargs if k.startswith("ifname=")] == [f"ifname={n}:{m}" for n, m in pinned.items()]


@pytest.mark.parametrize("case,golden", [("bond-public-private-ipv6", "network-bond-x86_64.ipxe")])
async def test_network_script_matches_golden_file(case: str, golden: str, reference: Path, tmp_path: Path) -> None:
    config = network_config(reference, tmp_path, {"node-1": {"profile": "metal", "network": CASES[case][0]}})
    script, _ = await rendered_kargs(config, "node-1")
    _compare_golden(script, golden)


def _compare_golden(script: str, golden: str) -> None:
    path = GOLDEN / golden
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(script)
    assert script == path.read_text(), f"script differs from {path}; UPDATE_GOLDEN=1 rewrites it"


EQUINIX_EXPECTED = {
    "nic0": {"type": "ethernet", "interface": "nic0", "port-of": "bond0", "port-type": "bond"},
    "nic1": {"type": "ethernet", "interface": "nic1", "port-of": "bond0", "port-type": "bond"},
    "bond0": {"type": "bond", "interface": "bond0",
              "bond": {"mode": "802.3ad", "lacp_rate": "fast", "miimon": "100", "xmit_hash_policy": "layer3+4"},
              "ipv4": {"method": "manual", "addresses": ["147.75.0.10/31", "10.70.0.10/31"], "gateway": "147.75.0.11",
                       "routes": ["10.0.0.0/8,10.70.0.11"], "dns": ["147.75.207.207", "147.75.207.208"]},
              "ipv6": {"method": "manual", "addresses": ["2604:1380::a/127"], "gateway": "2604:1380::b"}}}


def test_equinix_provider_network_from_the_provisioned_device(metal_env, reference: Path, tmp_path: Path) -> None:
    doc = network_doc(reference, tmp_path, {"m0": {"profile": "metal", "hostname": "m0.example.net"}},
                      network="provider", metal={"plan": "c3.small.x86", "metro": "da"})
    path = write_config(tmp_path / "bootserver.yaml", {**doc, "metal": {"project": PROJECT}})
    assert main(["render", "ipxe", "m0", "--config", str(path)]) == 1  # no device record yet
    assert main(["provision", "m0", "--no-wait", "--config", str(path)]) == 0  # writes the device record
    script, kargs = asyncio.run(rendered_kargs(load_config(path), "m0"))
    made = connections(kargs)
    assert made["connections"] == EQUINIX_EXPECTED
    assert made["hostname"] == "m0.example.net"
    # the NICs are pinned to the MACs of the device's bonded ports, under names that are not the kernel's
    assert [k for k in kargs if k.startswith("ifname=")] == ["ifname=nic0:b8:ce:f6:00:0a:00",
                                                            "ifname=nic1:b8:ce:f6:00:0a:01"]
    _compare_golden(script, "network-equinix-x86_64.ipxe")
