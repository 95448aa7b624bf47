"""Kea's DHCPv6 configuration (``bootserver dhcp --print kea6``): what a site running ``kea-dhcp6`` gets
from the same rules as the engine's dnsmasq: the classes (iPXE's user class option 15, UEFI HTTP Boot's
vendor class option 16) with option 59 ``bootfile-url`` on the IPv6 base URL, the reservations with the
nodes' static IPv6 addresses, the pool ``dhcp.range6``, nothing for a ``secure_boot`` node, and a one-line
exit 2 for what it cannot be made from. Every printed document goes through the real ``kea-dhcp6 -t``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.configs import config_doc, master_profile, write
from support.helpers import config_accepted

from bootserver.cli import main
from bootserver.dhcp.kea6 import vendor_class6

#: The server's base URLs, one per address family.
BASE_URLS = ["http://192.0.2.1:8080", "http://[2001:db8::1]:8080"]
HTTP6_URL = "http://[2001:db8::1]:8080/loaders/ipxe.efi"
IPXE6_URL = "http://[2001:db8::1]:8080/boot.ipxe?mac=${net0/mac}"
#: Option 16 as edk2 reads it: enterprise 343, a 2-byte length at byte 4, ``HTTPClient`` at byte 6.
VENDOR_CLASS = {"name": "vendor-class", "csv-format": False, "data": "00000157000a48545450436c69656e74",
                "always-send": True}


def static(mac: str, ipv4: str, ipv6: str | None = None) -> dict[str, Any]:
    """A node network: one NIC ``mac`` with a static IPv4 address (CIDR) and, given, a static IPv6 one."""
    nic: dict[str, Any] = {"name": "nic0", "type": "ethernet", "mac-address": mac,
                           "ipv4": {"enabled": True, "address": [
                               {"ip": ipv4.split("/")[0], "prefix-length": int(ipv4.split("/")[1])}]}}
    if ipv6 is not None:
        nic["ipv6"] = {"enabled": True, "address": [{"ip": ipv6.split("/")[0],
                                                     "prefix-length": int(ipv6.split("/")[1])}]}
    return {"interfaces": [nic]}


def fleet(dhcp: dict[str, Any] | None = None, **nodes: dict[str, Any]) -> dict[str, Any]:
    """A dual-stack config on ``lo`` (``mode: full``, ``ipv6: true`` unless ``dhcp`` says otherwise): node
    ``m0`` with a static IPv6 address, ``m1`` with IPv4 only, ``spare`` without a network, ``nomac``."""
    default = {
        "m0": {"profile": "master", "mac": "52:54:00:00:00:10",
               "network": static("52:54:00:00:00:10", "127.0.0.10/8", "2001:db8::10/64")},
        "m1": {"profile": "master", "mac": "52:54:00:00:00:11", "network": static("52:54:00:00:00:11", "127.0.0.11/8")},
        "spare": {"profile": "master", "mac": "52:54:00:00:00:12"},
        "nomac": {"profile": "master"},
    }
    return config_doc(profiles={"master": master_profile(), "sb": master_profile(secure_boot=True)},
                      nodes=nodes or default, server={"base_url": BASE_URLS},
                      dhcp={"interface": "lo", "mode": "full", "ipv6": True, **(dhcp or {})})


def print_kea6(capsys: pytest.CaptureFixture[str], doc: dict[str, Any], tmp_path: Path) -> tuple[int, str, str]:
    path = write(doc, tmp_path)
    rc = main(["dhcp", "--print", "kea6", "--config", str(path)])
    out, err = capsys.readouterr()
    return rc, out, err.replace(str(path), "CONFIG")


def test_print_kea6(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = print_kea6(capsys, fleet({"range6": "2001:db8::100-2001:db8::1ff", "lease_time": 1800}), tmp_path)
    assert (rc, err) == (0, "")
    assert json.loads(out) == {"Dhcp6": {
        "interfaces-config": {"interfaces": ["lo"]},
        "host-reservation-identifiers": ["hw-address"],
        "preferred-lifetime": 1800,
        "valid-lifetime": 1800,
        "client-classes": [
            {"name": "ipxe", "test": "option[15].hex == 0x000469505845",
             "option-data": [{"name": "bootfile-url", "data": IPXE6_URL}]},
            {"name": "http6", "test": "vendor-class[343].exists and substring(vendor-class[343].data,0,10) == "
                                      "'HTTPClient' and not member('ipxe')",
             "option-data": [{"name": "bootfile-url", "data": HTTP6_URL}, VENDOR_CLASS]},
        ],
        "subnet6": [{
            "id": 1, "subnet": "2001:db8::/64", "interface": "lo",
            "pools": [{"pool": "2001:db8::100 - 2001:db8::1ff"}],
            "reservations": [
                {"hw-address": "52:54:00:00:00:10", "hostname": "m0", "ip-addresses": ["2001:db8::10"]},
                {"hw-address": "52:54:00:00:00:11", "hostname": "m1"},
                {"hw-address": "52:54:00:00:00:12", "hostname": "spare"},
            ],
        }],
    }}
    config_accepted(["kea-dhcp6", "-t"], out, tmp_path / "kea6.json")


def test_the_vendor_class_option_is_what_edk2_reads() -> None:
    data = bytes.fromhex(vendor_class6("HTTPClient"))
    assert int.from_bytes(data[:4], "big") == 343  # the enterprise number
    assert int.from_bytes(data[4:6], "big") == 10 and data[6:] == b"HTTPClient"


def test_without_a_pool_only_reserved_machines_get_an_address(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = print_kea6(capsys, fleet(), tmp_path)
    assert rc == 0
    assert json.loads(out)["Dhcp6"]["subnet6"][0]["pools"] == []
    config_accepted(["kea-dhcp6", "-t"], out, tmp_path / "kea6.json")


def test_without_discovery_known_machines_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = fleet()
    doc["server"]["discovery"] = False
    rc, out, _ = print_kea6(capsys, doc, tmp_path)
    assert rc == 0
    tests = [c["test"] for c in json.loads(out)["Dhcp6"]["client-classes"]]
    assert tests and all(t.endswith(" and member('KNOWN')") for t in tests), tests
    config_accepted(["kea-dhcp6", "-t"], out, tmp_path / "kea6.json")


def test_a_secure_boot_node_gets_no_boot_file_over_dhcpv6(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every MAC of it (its selectors and the NIC its network pins) carries the class ``secureboot`` in its
    reservation, which the HTTP Boot class excludes; its address stays on its boot MAC alone."""
    network = static("52:54:00:5b:00:01", "127.0.0.20/8", "2001:db8::20/64")
    network["interfaces"].append({"name": "nic1", "type": "ethernet", "mac-address": "52:54:00:5b:00:03"})
    rc, out, _ = print_kea6(capsys, fleet(**{
        "sb-0": {"profile": "sb", "mac": ["52:54:00:5b:00:01", "52:54:00:5b:00:02"], "network": network},
        "plain-0": {"profile": "master", "mac": "52:54:00:00:00:09"}}), tmp_path)
    assert rc == 0
    doc = json.loads(out)["Dhcp6"]
    classes = doc["client-classes"]
    assert classes[0] == {"name": "secureboot"}  # no test: the reservations assign it
    http6 = next(c for c in classes if c["name"] == "http6")
    assert http6["test"].endswith(" and not member('ipxe') and not member('secureboot')")
    assert doc["subnet6"][0]["reservations"] == [
        {"hw-address": "52:54:00:5b:00:01", "hostname": "sb-0", "ip-addresses": ["2001:db8::20"],
         "client-classes": ["secureboot"]},
        {"hw-address": "52:54:00:00:00:09", "hostname": "plain-0"},
        {"hw-address": "52:54:00:5b:00:02", "client-classes": ["secureboot"]},
        {"hw-address": "52:54:00:5b:00:03", "client-classes": ["secureboot"]},
    ]
    # the shim is not handed over DHCPv6: its GRUB fetches over IPv4
    assert "secureboot/" not in out
    config_accepted(["kea-dhcp6", "-t"], out, tmp_path / "kea6.json")


def test_a_comma_in_the_url_is_escaped_for_keas_option_data(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    doc = fleet()
    doc["server"]["base_url"] = ["http://192.0.2.1:8080", "http://[2001:db8::1]:8080/a,b"]
    rc, out, _ = print_kea6(capsys, doc, tmp_path)
    assert rc == 0
    urls = [o["data"] for c in json.loads(out)["Dhcp6"]["client-classes"] for o in c["option-data"]
            if o["name"] == "bootfile-url"]
    assert urls == ["http://[2001:db8::1]:8080/a\\,b/boot.ipxe?mac=${net0/mac}",
                    "http://[2001:db8::1]:8080/a\\,b/loaders/ipxe.efi"]
    config_accepted(["kea-dhcp6", "-t"], out, tmp_path / "kea6.json")


@pytest.mark.parametrize(("doc", "message"), [
    (fleet({"ipv6": False}), "CONFIG: dhcp.ipv6: not set: --print kea6 is Kea's DHCPv6 configuration; set ipv6: "
     "true (mode: full) to answer DHCPv6, or print Kea's DHCPv4 one with --print kea"),
    (fleet(m1={"profile": "master", "mac": "52:54:00:00:00:11", "network": static("52:54:00:00:00:11",
                                                                                    "127.0.0.11/8")}),
     "CONFIG: dhcp.interface: lo is not on this machine (or has no global IPv6 address) and neither the "
     "reservations' IPv6 addresses nor dhcp.range6 tell one IPv6 prefix to answer DHCPv6 on"),
    (fleet(a={"profile": "master", "mac": "52:54:00:00:00:01",
              "network": static("52:54:00:00:00:01", "127.0.0.1/8", "2001:db8::10/64")},
           b={"profile": "master", "mac": "52:54:00:00:00:02",
              "network": static("52:54:00:00:00:02", "127.0.0.2/8", "2001:db8:1::10/64")}),
     "CONFIG: dhcp.interface: lo is not on this machine (or has no global IPv6 address) and neither the "
     "reservations' IPv6 addresses nor dhcp.range6 tell one IPv6 prefix to answer DHCPv6 on"),
    (fleet({"range6": "2001:db8:1::100-2001:db8:1::1ff"}),
     "CONFIG: dhcp.range6: 2001:db8:1::100-2001:db8:1::1ff is not inside lo's IPv6 prefix 2001:db8::/64"),
], ids=["no-ipv6", "no-prefix", "two-prefixes", "pool-outside"])
def test_what_kea6_cannot_be_made_from_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    doc: dict[str, Any], message: str) -> None:
    rc, out, err = print_kea6(capsys, doc, tmp_path)
    assert (rc, out) == (2, "")
    assert err == f"bootserver: {message}\n"
