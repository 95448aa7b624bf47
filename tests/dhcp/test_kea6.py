"""Kea's DHCPv6 configuration (``bootserver dhcp --print kea6``): what a site running ``kea-dhcp6`` gets
from the same rules as the engine's dnsmasq: the classes (iPXE's user class option 15, UEFI HTTP Boot's
vendor class option 16) with option 59 ``bootfile-url`` on the IPv6 base URL, the reservations with the
nodes' static IPv6 addresses, the pool ``dhcp.range6``, nothing for a ``secure_boot`` node, and a one-line
exit 2 for what it cannot be made from. Every printed document goes through the real ``kea-dhcp6 -t``.

Then the real ``kea-dhcp6`` loads the printed document as it is (plus the site's own lease file and server
identifier) and answers real DHCPv6 clients on a network of the test's own (``TestNetwork("kea6")``, root
only): ISC's ``dhclient -6``, one veth port of the bridge per MAC, sending the vendor class UEFI HTTP Boot
sends (option 16, enterprise 343, ``HTTPClient:Arch:00016:...``) or iPXE's user class (option 15) and asking
for option 59, each with a DUID-UUID as edk2 and iPXE send (Kea learns its MAC from its link-local
address). What each gets is read from its lease file: a node's reserved IPv6 address (Kea matched its
reservation by ``hw-address``), the boot URL on the IPv6 base URL, the vendor class back, and nothing to
boot for any NIC of a ``secure_boot`` node. The firmware's own boots over DHCPv6 are dnsmasq's
(tests/e2e/test_http_boot.py)."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support import netns
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
                                      "'HTTPClient' and (option[61].hex == 0x0010) and not member('ipxe')",
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


# ---------------------------------------------------------------------------------------- the real kea-dhcp6

#: The real programs (found by :func:`support.netns.program`; the ``net`` fixture checks they are installed).
KEA6, DHCLIENT = "kea-dhcp6", "dhclient"

#: dhclient's own names for what it sends and reads that its table lacks: the vendor class (option 16:
#: enterprise number, then the class data as counted strings), the user class (option 15) and the client
#: architecture (option 61, RFC 5970).
DHCLIENT_OPTIONS = ("option dhcp6.vclass code 16 = { unsigned integer 32, string };\n"
                    "option dhcp6.uclass code 15 = string;\n"
                    "option dhcp6.arch code 61 = unsigned integer 16;\n"
                    "also request dhcp6.bootfile-url, dhcp6.vclass;\n")


def counted(text: str) -> str:
    """``text`` as one counted string (2-byte length, then the bytes) in dhclient's colon hex."""
    data = len(text).to_bytes(2, "big") + text.encode()
    return ":".join(f"{b:02x}" for b in data)


#: UEFI HTTP Boot x86_64, as edk2 sends its vendor class and architecture (NetworkPkg/HttpBootDxe,
#: HttpBootDhcp6.c).
SEND_HTTP_BOOT = (f"send dhcp6.vclass 343 {counted('HTTPClient:Arch:00016:UNDI:003000')};\n"
                  "send dhcp6.arch 16;\n")
#: UEFI HTTP Boot arm64 (architecture 19).
SEND_HTTP_BOOT_ARM64 = (f"send dhcp6.vclass 343 {counted('HTTPClient:Arch:00019:UNDI:003000')};\n"
                        "send dhcp6.arch 19;\n")
#: iPXE's user class (src/net/udp/dhcpv6.c).
SEND_IPXE = f"send dhcp6.uclass {counted('iPXE')};\n"

#: Universally administered MACs (RFC 7042's documentation range 00-00-5E-00-53-xx): Kea learns a MAC from
#: an EUI-64 link-local address only when its universal/local bit says universal (a locally administered
#: MAC, such as QEMU's 52:54:00:..., gives an interface identifier without the u-bit, which Kea 2.2 refuses).
NODE_MAC, BOOT_MAC, SECOND_MAC, UNKNOWN_MAC, ARM64_MAC = "00:00:5e:00:53:10", "00:00:5e:00:53:20", \
    "00:00:5e:00:53:21", "00:00:5e:00:53:99", "00:00:5e:00:53:a0"
POOL = ("2001:db8::100", "2001:db8::1ff")


@pytest.fixture
def net() -> Iterator[netns.TestNetwork]:
    """A test network namespace (``kea6-...``), removed at the end, also on failure."""
    with netns.lab("kea6", (KEA6, "kea-dhcp6-server"), (DHCLIENT, "isc-dhcp-client")) as network:
        yield network


def wait_for(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll ``check()`` (every 0.1 s) until it is true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout:.0f} s")
        time.sleep(0.1)


def start_client(net: netns.TestNetwork, n: int, mac: str, send: str, tmp_path: Path) -> Path:
    """``dhclient -6`` on a veth port ``c<n>`` of the bridge with ``mac`` (no duplicate address detection:
    its EUI-64 link-local address is usable at once), sending ``send``; returns its lease file. Its DUID is a
    DUID-UUID (type 4, RFC 6355), as edk2's and iPXE's are: no MAC in it, so Kea must learn the MAC from the
    link-local address to find the reservation."""
    net.ip("link", "add", f"c{n}", "type", "veth", "peer", "name", f"p{n}")
    net.ip("link", "set", f"c{n}", "address", mac)
    assert net.run(["sysctl", "-qw", f"net.ipv6.conf.c{n}.accept_dad=0"]).returncode == 0
    net.ip("link", "set", f"p{n}", "master", netns.BRIDGE, "up")
    net.ip("link", "set", f"c{n}", "up")
    conf, lease = tmp_path / f"dhclient{n}.conf", tmp_path / f"lease{n}"
    conf.write_text(DHCLIENT_OPTIONS + send)
    duid = b"\x00\x04" + bytes.fromhex(f"{n:032x}")  # dhclient takes its DUID from its lease file's first line
    lease.write_text('default-duid "' + "".join(f"\\{b:03o}" for b in duid) + '";\n')
    net.start([str(netns.program(DHCLIENT)), "-6", "-1", "-d", "-v", "-sf", "/bin/true", "-cf", str(conf),
               "-lf", str(lease), "-pf", str(tmp_path / f"dhclient{n}.pid"), f"c{n}"],
              log=tmp_path / f"dhclient{n}.log")
    return lease


def got(lease: Path) -> dict[str, str]:
    """What a bound lease holds: ``address``, and ``bootfile-url`` and ``vclass`` where it got them."""
    text = lease.read_text()
    found = {"address": m.group(1)} if (m := re.search(r"iaaddr ([0-9a-f:]+) \{", text)) else {}
    # dhclient writes a text option quoted, with a backslash before a $, ` or " (for its shell script): undone
    found |= {name: re.sub(r"\\(.)", r"\1", value.strip('"'))
              for name, value in re.findall(r"option dhcp6\.(bootfile-url|vclass) (.+);", text)}
    return found


def test_the_real_kea_dhcp6_answers_http_boot_ipxe_and_no_secure_boot_node(
        net: netns.TestNetwork, tmp_path: Path) -> None:
    network = static(BOOT_MAC, "192.0.2.20/24", "2001:db8::20/64")
    doc = fleet({"interface": netns.BRIDGE, "range6": "-".join(POOL)},
                m0={"profile": "master", "mac": NODE_MAC,
                    "network": static(NODE_MAC, "192.0.2.10/24", "2001:db8::10/64")},
                **{"sb-0": {"profile": "sb", "mac": [BOOT_MAC, SECOND_MAC], "network": network}})
    path = write(doc, tmp_path)
    p = net.run([sys.executable, "-m", "bootserver", "dhcp", "--print", "kea6", "--config", str(path)])
    assert p.returncode == 0, p.stderr
    kea = json.loads(p.stdout)
    assert kea["Dhcp6"]["subnet6"][0]["subnet"] == "2001:db8::/64"  # br0's own prefix
    # the site's own choices around our classes and reservations: a lease file and server identifier
    kea["Dhcp6"]["lease-database"] = {"type": "memfile", "persist": False}
    kea["Dhcp6"]["server-id"] = {"type": "LLT", "persist": False}
    (tmp_path / "kea6.json").write_text(json.dumps(kea))
    # Kea listens on br0's link-local address: once the kernel's duplicate address detection is over
    wait_for("usable link-local address on br0", lambda: not net.run(
        ["ip", "-6", "addr", "show", "dev", netns.BRIDGE, "tentative"]).stdout.strip(), timeout=10)
    log = tmp_path / "kea6.log"
    net.start([str(netns.program(KEA6)), "-c", str(tmp_path / "kea6.json")], log=log,
              env={**os.environ, "KEA_PIDFILE_DIR": str(tmp_path), "KEA_LOCKFILE_DIR": str(tmp_path)})
    wait_for("DHCP6_STARTED in kea-dhcp6's log", lambda: "DHCP6_STARTED" in log.read_text(), timeout=15)
    clients = {
        "node over HTTP Boot": start_client(net, 0, NODE_MAC, SEND_HTTP_BOOT, tmp_path),
        "unknown iPXE": start_client(net, 1, UNKNOWN_MAC, SEND_IPXE, tmp_path),
        "secure_boot node's boot NIC": start_client(net, 2, BOOT_MAC, SEND_HTTP_BOOT, tmp_path),
        "secure_boot node's other NIC": start_client(net, 3, SECOND_MAC, SEND_HTTP_BOOT, tmp_path),
        "unknown arm64 over HTTP Boot": start_client(net, 4, ARM64_MAC, SEND_HTTP_BOOT_ARM64, tmp_path),
    }
    for who, lease in clients.items():
        wait_for(f"lease for the {who} ({lease.name})", lambda lease=lease: "lease6 {" in lease.read_text())
    answers = {who: got(lease) for who, lease in clients.items()}
    # the reservation by hw-address, the loader's URL on the IPv6 base URL and the vendor class back
    # (dhclient prints option 16 as the enterprise number and its hex: 343, then 0:a "HTTPClient")
    assert answers["node over HTTP Boot"] == {
        "address": "2001:db8::10", "bootfile-url": HTTP6_URL, "vclass": "3430:a:48:54:54:50:43:6c:69:65:6e:74"}, \
        log.read_text()
    unknown = answers["unknown iPXE"]
    assert unknown["bootfile-url"] == IPXE6_URL and "vclass" not in unknown, unknown
    in_pool = [ipaddress.IPv6Address(a) for a in POOL]
    assert in_pool[0] <= ipaddress.IPv6Address(unknown["address"]) <= in_pool[1], unknown
    # a secure_boot node: an address, no boot file, from whichever NIC it asks
    assert answers["secure_boot node's boot NIC"] == {"address": "2001:db8::20"}, answers
    other = answers["secure_boot node's other NIC"]
    assert set(other) == {"address"} and in_pool[0] <= ipaddress.IPv6Address(other["address"]) <= in_pool[1], other
    # an arm64 firmware is not handed the x86_64 iPXE: an address, no boot file (its IPv4 entry boots it)
    assert set(answers["unknown arm64 over HTTP Boot"]) == {"address"}, answers
