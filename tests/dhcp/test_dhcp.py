"""The DHCP engine's configuration without a network: the ``dhcp:`` keys, ``check-config``'s refusals,
the boot rules as dnsmasq and Kea get them (``bootserver dhcp --print``, whole outputs as golden
texts), the reservations, and the first mile read from dnsmasq's log lines. Real dnsmasq and Kea boot
real firmware in ``tests/e2e/test_dhcp_boot.py``; ``kea-dhcp4 -t`` checks the Kea output here."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.configs import config_doc, load, write
from support.helpers import REPO, config_accepted, write_config

from bootserver.cli import main
from bootserver.dhcp.engine import FirstMile, refusal
from bootserver.dhcp.reservations import reservations


def static(mac: str, address: str, gateway: str | None = "127.0.0.1", dns: tuple[str, ...] = ("127.0.0.53",),
           ipv6: str | None = None) -> dict[str, Any]:
    """A node network: one NIC with ``mac``, a static IPv4 ``address`` (CIDR), a default route via
    ``gateway``, name servers ``dns``, and an optional static IPv6 address."""
    iface: dict[str, Any] = {"name": "nic0", "type": "ethernet", "mac-address": mac,
                             "ipv4": {"enabled": True, "address": [
                                 {"ip": address.split("/")[0], "prefix-length": int(address.split("/")[1])}]}}
    if ipv6:
        iface["ipv6"] = {"enabled": True, "address": [{"ip": ipv6.split("/")[0],
                                                        "prefix-length": int(ipv6.split("/")[1])}]}
    doc: dict[str, Any] = {"interfaces": [iface]}
    if gateway:
        doc["routes"] = {"config": [{"destination": "0.0.0.0/0", "next-hop-address": gateway,
                                     "next-hop-interface": "nic0"}]}
    if dns:
        doc["dns-resolver"] = {"config": {"server": list(dns)}}
    return doc


def fleet(dhcp: dict[str, Any], **nodes: dict[str, Any]) -> dict[str, Any]:
    """A config on the loopback interface (``127.0.0.1/8``: on every machine) with ``dhcp`` and nodes."""
    default = {
        "m0": {"profile": "master", "mac": "52:54:00:00:00:10", "network": static("52:54:00:00:00:10", "127.0.0.10/8")},
        "m1": {"profile": "master", "mac": "52:54:00:00:00:11", "hostname": "m1.lab.example",
               "network": static("52:54:00:00:00:11", "127.0.0.11/8", gateway=None, dns=())},
        "spare": {"profile": "master", "mac": "52:54:00:00:00:12"},
        "nomac": {"profile": "master"},
    }
    return config_doc(nodes=nodes or default, dhcp={"interface": "lo", **dhcp})


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# ---------------------------------------------------------------------------------------- the keys


@pytest.mark.parametrize(("dhcp", "message"), [
    ({}, "dhcp.interface: required key is missing"),
    ({"interface": "lo", "mode": "relay"}, "dhcp.mode: input should be 'proxy' or 'full', got 'relay'"),
    ({"interface": "lo", "range": "127.0.0.100-127.0.0.200"}, "dhcp: range: only with mode: full"),
    ({"interface": "lo", "mode": "full", "range": "127.0.0.200-127.0.0.100"},
     "dhcp.range: the pool ends (127.0.0.100) before it starts (127.0.0.200)"),
    ({"interface": "lo", "mode": "full", "range": "127.0.0.1"}, "dhcp.range: give the pool as START-END"),
    ({"interface": "lo", "mode": "full", "router": "127.0.0"}, "dhcp.router: not an IPv4 address: '127.0.0'"),
    ({"interface": "lo", "mode": "full", "lease_time": "30s"}, "dhcp.lease_time: input should be greater than or "
     "equal to 120"),
    ({"interface": "eth0; reboot"}, "dhcp.interface: not a network interface name"),
    ({"interface": "lo", "colour": "blue"}, "dhcp.colour: unknown key"),
    ({"interface": "lo", "ipv6": True}, "dhcp: ipv6: only with mode: full"),
    ({"interface": "lo", "mode": "full", "range6": "2001:db8::100-2001:db8::1ff"},
     "dhcp: range6: only with ipv6: true (the DHCPv6 pool)"),
    ({"interface": "lo", "mode": "full", "ipv6": True, "range6": "2001:db8::100-2001:db9::1ff"},
     "dhcp.range6: 2001:db8::100 and 2001:db9::1ff are not in one /64"),
    ({"interface": "lo", "mode": "full", "ipv6": True, "range6": "2001:db8::1ff-2001:db8::100"},
     "dhcp.range6: the pool ends (2001:db8::100) before it starts (2001:db8::1ff)"),
    ({"interface": "lo", "mode": "full", "ipv6": True, "range6": "192.0.2.1-192.0.2.9"},
     "dhcp.range6: not two IPv6 addresses"),
])
def test_bad_dhcp_keys_are_one_line_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   dhcp: dict[str, Any], message: str) -> None:
    path = write(config_doc(dhcp=dhcp), tmp_path)
    rc, out, err = run(capsys, "check-config", "--config", str(path))
    assert rc == 2 and out == ""
    assert err.startswith(f"bootserver: {path}: {message}") and err.count("\n") == 1, err


@pytest.mark.parametrize(("dhcp", "nodes", "message"), [
    ({"mode": "full", "range": "127.0.0.5-127.0.0.20"}, None,
     "dhcp.range: 127.0.0.5-127.0.0.20 holds node m0's reserved address 127.0.0.10"),
    ({"mode": "full", "range": "127.0.0.100-128.0.0.20"}, None, "dhcp.range: 127.0.0.100-128.0.0.20 is not inside "
     "lo's subnet 127.0.0.0/8"),
    ({"mode": "full", "router": "10.0.0.1"}, None, "dhcp.router: 10.0.0.1 is outside lo's subnet 127.0.0.0/8"),
    ({"mode": "full"}, {"a": {"profile": "master", "mac": "52:54:00:00:00:01",
                              "network": static("52:54:00:00:00:01", "10.1.0.5/24", gateway=None)}},
     "nodes.a.network: node a's address 10.1.0.5 is outside lo's subnet 127.0.0.0/8"),
    ({"mode": "full"}, {"a": {"profile": "master", "mac": "52:54:00:00:00:01",
                              "network": static("52:54:00:00:00:01", "127.0.0.9/8")},
                        "b": {"profile": "master", "mac": "52:54:00:00:00:02",
                              "network": static("52:54:00:00:00:02", "127.0.0.9/8")}},
     "nodes.b.network: address 127.0.0.9 is also node a's"),
    ({"interface": "bsnone0"}, None, "dhcp.interface: no interface bsnone0 on this machine"),
    ({"mode": "full", "ipv6": True, "range6": "2001:db8::1-2001:db8::ff"},
     {"a": {"profile": "master", "mac": "52:54:00:00:00:01",
            "network": static("52:54:00:00:00:01", "127.0.0.9/8", ipv6="2001:db8::51/64")}},
     "dhcp.range6: 2001:db8::1-2001:db8::ff holds node a's reserved address 2001:db8::51"),
])
def test_check_config_refuses_what_dhcp_cannot_hand_out(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        dhcp: dict[str, Any], nodes: dict[str, Any] | None,
                                                        message: str) -> None:
    path = write(fleet(dhcp, **(nodes or {})), tmp_path)
    rc, out, err = run(capsys, "check-config", "--config", str(path))
    assert rc == 2 and out == ""
    assert err.startswith(f"bootserver: {path}: {message}") and err.count("\n") == 1, err
    rc, out, err = run(capsys, "dhcp", "--config", str(path))  # nothing started, the same line
    assert rc == 2 and err.startswith(f"bootserver: {path}: {message}")
    assert not (tmp_path / "state").exists()  # nothing written: no engine files, no state store


def test_reservations_come_from_each_nodes_network(tmp_path: Path) -> None:
    config = load(fleet({"mode": "full"}), tmp_path)
    got = {r.node: (r.mac, r.hostname, str(r.ipv4) if r.ipv4 else None, r.gateway, r.dns) for r in reservations(config)}
    assert got == {
        "m0": ("52:54:00:00:00:10", "m0", "127.0.0.10/8", "127.0.0.1", ("127.0.0.53",)),
        "m1": ("52:54:00:00:00:11", "m1", "127.0.0.11/8", None, ()),
        "spare": ("52:54:00:00:00:12", "spare", None, None, ()),
    }


# ---------------------------------------------------------------------------------------- --print

DNSMASQ_FULL = """\
# dnsmasq options for lo (full mode), written by bootserver from {path}
port=0
interface=lo
bind-interfaces
log-dhcp
dhcp-authoritative
dhcp-range=127.0.0.100,127.0.0.200,255.0.0.0,3600
dhcp-option=option:router,127.0.0.1
dhcp-option=option:dns-server,127.0.0.53
dhcp-option=option:domain-name,lab.example
dhcp-userclass=set:ipxe,iPXE
dhcp-match=set:bios,option:client-arch,0
dhcp-match=set:efi64,option:client-arch,7
dhcp-match=set:efi64,option:client-arch,9
dhcp-match=set:arm64,option:client-arch,11
dhcp-match=set:http64,option:client-arch,16
dhcp-match=set:httparm64,option:client-arch,19
dhcp-option-force=tag:http64,option:vendor-class,HTTPClient
dhcp-option-force=tag:httparm64,option:vendor-class,HTTPClient
dhcp-boot=tag:!ipxe,tag:httparm64,http://boot.example.net:8080/loaders/grubaa64.efi
dhcp-boot=tag:!ipxe,tag:http64,http://boot.example.net:8080/loaders/ipxe.efi
dhcp-boot=tag:!ipxe,tag:bios,undionly.kpxe
dhcp-boot=tag:!ipxe,tag:arm64,grubaa64.efi
dhcp-boot=tag:!ipxe,tag:efi64,ipxe.efi
dhcp-boot=tag:ipxe,http://boot.example.net:8080/boot.ipxe?mac=${{net0/mac}}
enable-tftp
tftp-root=/srv/tftp
dhcp-host=52:54:00:00:00:10,set:node-m0,127.0.0.10,m0
dhcp-host=52:54:00:00:00:11,set:node-m1,127.0.0.11,m1
dhcp-host=52:54:00:00:00:12,spare
dhcp-option=tag:node-m0,option:router,127.0.0.1
dhcp-option=tag:node-m0,option:dns-server,127.0.0.53
dhcp-option=tag:node-m1,option:router
dhcp-option=tag:node-m1,option:dns-server
"""

DNSMASQ_PROXY = """\
# dnsmasq options for lo (proxy mode), written by bootserver from {path}
port=0
interface=lo
bind-interfaces
log-dhcp
dhcp-range=127.0.0.0,proxy
dhcp-userclass=set:ipxe,iPXE
dhcp-match=set:bios,option:client-arch,0
dhcp-match=set:efi64,option:client-arch,7
dhcp-match=set:efi64,option:client-arch,9
dhcp-match=set:arm64,option:client-arch,11
dhcp-match=set:http64,option:client-arch,16
dhcp-match=set:httparm64,option:client-arch,19
pxe-prompt="bootserver",0
pxe-service=tag:ipxe,tag:known,x86PC,"bootserver",bootserver
pxe-service=tag:ipxe,tag:known,X86-64_EFI,"bootserver",bootserver
pxe-service=tag:ipxe,tag:known,BC_EFI,"bootserver",bootserver
pxe-service=tag:!ipxe,tag:known,X86-64_EFI,"bootserver",ipxe
pxe-service=tag:!ipxe,tag:known,BC_EFI,"bootserver",ipxe
pxe-service=tag:!ipxe,tag:known,ARM64_EFI,"bootserver",grubaa64
pxe-service=tag:!ipxe,tag:known,x86PC,"bootserver",undionly
enable-tftp
tftp-root=/srv/tftp
dhcp-host=52:54:00:00:00:10
dhcp-host=52:54:00:00:00:11
dhcp-host=52:54:00:00:00:12
"""


def test_print_dnsmasq_full_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(fleet({"mode": "full", "range": "127.0.0.100-127.0.0.200", "router": "127.0.0.1",
                        "dns": ["127.0.0.53"], "domain": "lab.example"}), tmp_path)
    rc, out, err = run(capsys, "dhcp", "--print", "--config", str(path))
    assert (rc, err) == (0, "")
    assert out == DNSMASQ_FULL.format(path=path)
    assert not (tmp_path / "state" / "dhcp").exists()  # --print starts and writes nothing


def test_a_dhcpv6_pool_for_the_nodes_without_a_static_ipv6_address(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = write(fleet({"mode": "full", "ipv6": True, "range6": "2001:db8::100-2001:db8::1ff"}), tmp_path)
    rc, out, err = run(capsys, "dhcp", "--print", "--config", str(path))
    assert (rc, err) == (0, "")
    lines = out.splitlines()
    assert lines[lines.index("enable-ra") + 1:][:2] == ["dhcp-range=::,constructor:lo,static,64,3600",
                                                        "dhcp-range=2001:db8::100,2001:db8::1ff,64,3600"]
    config_accepted(["dnsmasq", "--test", "-C"], out, tmp_path / "dnsmasq.conf")


def test_print_dnsmasq_proxy_mode_answers_known_machines_only_without_discovery(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = fleet({})
    doc["server"]["discovery"] = False
    path = write(doc, tmp_path)
    rc, out, _ = run(capsys, "dhcp", "--print", "dnsmasq", "--config", str(path))
    assert rc == 0 and out == DNSMASQ_PROXY.format(path=path)


def test_the_chain_url_is_never_signed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(fleet({"mode": "full"}), tmp_path)
    for what in ("dnsmasq", "kea"):
        rc, out, _ = run(capsys, "dhcp", "--print", what, "--config", str(path))
        assert rc == 0 and "/boot.ipxe?mac=${net0/mac}" in out
        assert "sig=" not in out and "exp=" not in out and "/ipxe/" not in out


def test_print_kea(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = fleet({"mode": "full", "range": "127.0.0.100-127.0.0.200", "router": "127.0.0.1"})
    doc["server"]["base_url"] = "http://192.0.2.1:8080"  # an IPv4 literal: also the TFTP next-server
    path = write(doc, tmp_path)
    rc, out, _ = run(capsys, "dhcp", "--print", "kea", "--config", str(path))
    assert rc == 0
    got = json.loads(out)["Dhcp4"]
    assert got["interfaces-config"] == {"interfaces": ["lo"]}
    assert got["client-classes"] == [
        {"name": "ipxe", "test": "option[77].hex == 'iPXE'",
         "boot-file-name": "http://192.0.2.1:8080/boot.ipxe?mac=${net0/mac}"},
        {"name": "bios", "test": "(option[93].hex == 0x0000) and not member('ipxe')",
         "boot-file-name": "undionly.kpxe", "next-server": "192.0.2.1"},
        {"name": "efi64", "test": "(option[93].hex == 0x0007 or option[93].hex == 0x0009) and not member('ipxe')",
         "boot-file-name": "ipxe.efi", "next-server": "192.0.2.1"},
        {"name": "arm64", "test": "(option[93].hex == 0x000b) and not member('ipxe')",
         "boot-file-name": "grubaa64.efi", "next-server": "192.0.2.1"},
        {"name": "http64", "test": "(option[93].hex == 0x0010) and not member('ipxe')",
         "boot-file-name": "http://192.0.2.1:8080/loaders/ipxe.efi",
         "option-data": [{"name": "vendor-class-identifier", "data": "HTTPClient"}]},
        {"name": "httparm64", "test": "(option[93].hex == 0x0013) and not member('ipxe')",
         "boot-file-name": "http://192.0.2.1:8080/loaders/grubaa64.efi",
         "option-data": [{"name": "vendor-class-identifier", "data": "HTTPClient"}]},
    ]
    subnet = got["subnet4"][0]
    assert subnet["subnet"] == "127.0.0.0/8" and subnet["pools"] == [{"pool": "127.0.0.100 - 127.0.0.200"}]
    assert subnet["reservations"] == [
        {"hw-address": "52:54:00:00:00:10", "hostname": "m0", "ip-address": "127.0.0.10",
         "option-data": [{"name": "routers", "data": "127.0.0.1"},
                         {"name": "domain-name-servers", "data": "127.0.0.53"}]},
        {"hw-address": "52:54:00:00:00:11", "hostname": "m1", "ip-address": "127.0.0.11"},
        {"hw-address": "52:54:00:00:00:12", "hostname": "spare"},
    ]
    config_accepted(["kea-dhcp4", "-t"], out, tmp_path / "kea.json")


def test_print_for_an_interface_not_on_this_machine_takes_the_reservations_subnet(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = fleet({"mode": "full", "interface": "bsnone0"}, a={
        "profile": "master", "mac": "52:54:00:00:00:01", "network": static("52:54:00:00:00:01", "192.0.2.5/24",
                                                                            gateway="192.0.2.1")})
    path = write(doc, tmp_path)
    rc, out, _ = run(capsys, "dhcp", "--print", "--config", str(path))
    assert rc == 0 and "dhcp-range=192.0.2.0,static,255.255.255.0,3600\n" in out


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra``'s keys laid over it, mappings merged key by key."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def test_the_on_premises_guide_shows_what_print_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/on-premises.md section 2's dnsmasq options are what ``--print`` writes for section 1's config with
    section 2's ``dhcp:`` and static address, line for line: a change of the rules changes the guide with it."""
    text = (REPO / "docs" / "on-premises.md").read_text()
    one = text[text.index("\n## 1. "):text.index("\n## 2. ")]
    two = text[text.index("\n## 2. "):text.index("\n## 3. ")]
    blocks = re.compile(r"^```(yaml|ini)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
    base = next(m[2] for m in blocks.finditer(one) if m[1] == "yaml")
    extra, shown = (m[2] for m in blocks.finditer(two))
    for name, content in (("worker.ign", '{"ignition": {"version": "3.3.0"}}'), ("bmc.pw", "secret"),
                          ("bmc-ca.pem", "")):
        (tmp_path / name).write_text(content)
    write_config(tmp_path / "bootserver.yaml", merged(yaml.safe_load(base), yaml.safe_load(extra)))
    monkeypatch.chdir(tmp_path)  # the guide's command: --config bootserver.yaml
    rc, out, err = run(capsys, "dhcp", "--print", "--config", "bootserver.yaml")
    assert (rc, err) == (0, "")
    assert out == shown
    config_accepted(["dnsmasq", "--test", "-C"], out, tmp_path / "dnsmasq.conf")


# ---------------------------------------------------------------------------------------- the log


def test_the_first_mile_from_dnsmasqs_log() -> None:
    mile = FirstMile("full")
    lines = [
        "dnsmasq-dhcp[7]: 1234 vendor class: PXEClient:Arch:00000:UNDI:002001",
        "dnsmasq-dhcp[7]: 1234 DHCPREQUEST(br0) 192.0.2.10 52:54:00:00:00:10",
        "dnsmasq-dhcp[7]: 1234 tags: node-m0, bios, known, br0",
        "dnsmasq-dhcp[7]: 1234 DHCPACK(br0) 192.0.2.10 52:54:00:00:00:10 m0",
        "dnsmasq-dhcp[7]: 1234 requested options: 66:tftp-server, 67:bootfile-name",
        "dnsmasq-dhcp[7]: 1234 sent size: 14 option: 67 bootfile-name  undionly.kpxe",
    ]
    assert [s for line in lines for s in mile.feed(line)] == []
    seen = mile.feed("dnsmasq-tftp[7]: sent /var/lib/bootserver/dhcp/tftp/undionly.kpxe to 192.0.2.10")
    assert [(s.mac, s.event, s.ip, s.detail) for s in seen] == [
        ("52:54:00:00:00:10", "dhcp", "192.0.2.10", {"mode": "full", "address": "192.0.2.10", "file": "undionly.kpxe"}),
        ("52:54:00:00:00:10", "tftp", "192.0.2.10", {"file": "undionly.kpxe"}),
    ]
    assert mile.feed("dnsmasq-tftp[7]: sent /x/undionly.kpxe to 192.0.2.99") == []  # nobody answered there
    mile.feed("dnsmasq-dhcp[7]: 55 DHCPACK(br0) 192.0.2.10 52:54:00:00:00:10 m0")
    mile.feed("dnsmasq-dhcp[7]: 55 bootfile name: ipxe.efi")  # the BOOTP file field
    assert [s.detail["file"] for s in mile.flush()] == ["ipxe.efi"]
    proxy = FirstMile("proxy")
    assert proxy.feed("dnsmasq-dhcp[7]: 99 PXE(br0) 192.0.2.57 52:54:00:00:00:11 undionly") == []
    assert [(s.event, s.detail) for s in proxy.flush()] == [
        ("dhcp", {"mode": "proxy", "address": "192.0.2.57", "file": "undionly"})]


def test_the_first_mile_over_dhcpv6_from_dnsmasqs_log() -> None:
    """dnsmasq 2.90's own lines (``log-dhcp``) for OVMF's UEFI HTTPv6 and then iPXE's DHCPv6: the reply is a
    ``dhcp`` event of the MAC dnsmasq found for the client, with its IPv6 address and option 59's URL; an
    advertise (no address given yet) is none."""
    mile = FirstMile("full")
    duid = "00:01:00:01:31:e2:be:1a:52:54:00:e2:e0:51"
    lines = [
        "dnsmasq-dhcp[7]: 2124412 available DHCPv6 subnet: 2001:db8::/64",
        "dnsmasq-dhcp[7]: 2124412 vendor class: 343",
        "dnsmasq-dhcp[7]: 2124412 client MAC address: 52:54:00:e2:e0:51",
        f"dnsmasq-dhcp[7]: 2124412 DHCPSOLICIT(br0) {duid} ",
        f"dnsmasq-dhcp[7]: 2124412 DHCPADVERTISE(br0) 2001:db8::51 {duid} hb-0",
        "dnsmasq-dhcp[7]: 2124412 sent size: 42 option: 59 bootfile-url  http://[2001:db8::1]:8080/loaders/ipxe.efi",
        "dnsmasq-dhcp[7]: 2189948 client MAC address: 52:54:00:e2:e0:51",
        f"dnsmasq-dhcp[7]: 2189948 DHCPREQUEST(br0) {duid} ",
        f"dnsmasq-dhcp[7]: 2189948 DHCPREPLY(br0) 2001:db8::51 {duid} hb-0",
        "dnsmasq-dhcp[7]: 2189948 tags: known, node-hb-0, http6, dhcpv6, br0",
        "dnsmasq-dhcp[7]: 2189948 nest size: 24 option:  5 iaaddr  2001:db8::51 PL=3600 VL=3600",
        "dnsmasq-dhcp[7]: 2189948 sent size: 42 option: 59 bootfile-url  http://[2001:db8::1]:8080/loaders/ipxe.efi",
        "dnsmasq-dhcp[7]: 2255484 client MAC address: 52:54:00:e2:e0:51",
        f"dnsmasq-dhcp[7]: 2255484 DHCPADVERTISE(br0) {duid} no addresses available",
        # iPXE's DHCPv6: its DUID holds no MAC, its solicit and request share one transaction id
        "dnsmasq-dhcp[7]: 3308422 client MAC address: 52:54:00:e2:e0:51",
        "dnsmasq-dhcp[7]: 3308422 DHCPADVERTISE(br0) 2001:db8::51 00:04:00:00:00:00:00:00 hb-0",
        "dnsmasq-dhcp[7]: 3308422 client MAC address: 52:54:00:e2:e0:51",
        "dnsmasq-dhcp[7]: 3308422 DHCPREPLY(br0) 2001:db8::51 00:04:00:00:00:00:00:00 hb-0",
        "dnsmasq-dhcp[7]: 3308422 sent size: 51 option: 59 bootfile-url  http://[2001:db8::1]:8080/boot.ipxe?mac=${net0/mac}",
    ]
    seen = [s for line in lines for s in mile.feed(line)] + mile.flush()
    assert [(s.mac, s.event, s.ip, s.detail) for s in seen] == [
        ("52:54:00:e2:e0:51", "dhcp", "2001:db8::51", {"mode": "full", "address": "2001:db8::51",
                                                       "file": "http://[2001:db8::1]:8080/loaders/ipxe.efi"}),
        ("52:54:00:e2:e0:51", "dhcp", "2001:db8::51", {"mode": "full", "address": "2001:db8::51",
                                                       "file": "http://[2001:db8::1]:8080/boot.ipxe?mac=${net0/mac}"}),
    ]


def test_a_first_mile_event_has_the_time_of_its_answer_not_of_its_transactions_end() -> None:
    """A UEFI HTTP Boot client fetches its loader and script within milliseconds of the answer, before the
    transaction's lines end (:meth:`FirstMile.flush` after a quiet spell): its ``dhcp`` still comes first."""
    mile = FirstMile("full")
    assert mile.feed("dnsmasq-dhcp[7]: 8 DHCPACK(br0) 192.0.2.117 52:54:00:e2:e0:b1 arm", at=100.0) == []
    assert mile.feed("dnsmasq-dhcp[7]: 8 sent size: 43 option: 67 bootfile-name  "
                     "http://192.0.2.1:8080/loaders/grubaa64.efi", at=100.001) == []
    assert [(s.event, s.at, s.detail["file"]) for s in mile.flush()] == [
        ("dhcp", 100.0, "http://192.0.2.1:8080/loaders/grubaa64.efi")]
    mile.feed("dnsmasq-dhcp[7]: 9 DHCPACK(br0) 192.0.2.10 52:54:00:00:00:10 m0", at=200.0)
    assert [(s.event, s.at) for s in mile.feed("dnsmasq-tftp[7]: sent /t/ipxe.efi to 192.0.2.10", at=201.5)] == [
        ("dhcp", 200.0), ("tftp", 201.5)]


def test_a_refusal_names_the_key(tmp_path: Path) -> None:
    config = load(fleet({}), tmp_path)
    err = refusal(config, "dnsmasq: unknown interface br9")
    assert str(err) == "t.yaml: dhcp.interface: dnsmasq refused to start: unknown interface br9" and err.exit_code == 2
    err = refusal(config, "dnsmasq: failed to create listening socket for port 67: Address already in use")
    assert str(err) == ("t.yaml: dhcp.interface: dnsmasq cannot listen on lo: failed to create listening socket for "
                        "port 67: Address already in use (another DHCP or TFTP server runs there)")
    assert err.exit_code == 1


def test_print_without_a_subnet_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(fleet({"interface": "bsnone0"}, a={"profile": "master", "mac": "52:54:00:00:00:01"}), tmp_path)
    for what in ("dnsmasq", "kea"):
        rc, out, err = run(capsys, "dhcp", "--print", what, "--config", str(path))
        assert (rc, out) == (2, "")
        assert err == (f"bootserver: {path}: dhcp.interface: bsnone0 is not on this machine (or has no IPv4 "
                       "address) and no reservation tells the subnet to answer on\n")


def test_a_config_without_dhcp_has_no_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(config_doc(), tmp_path)
    for argv in (["dhcp"], ["dhcp", "--print"]):
        rc, _, err = run(capsys, *argv, "--config", str(path))
        assert rc == 2 and err == (f"bootserver: {path}: dhcp: not set: add a dhcp: mapping with the interface "
                                   + ("(docs/config.md) to run the DHCP engine\n" if argv == ["dhcp"]
                                      else "(docs/config.md)\n")), err


@pytest.mark.parametrize("base_url", ["http://localhost:8080", "http://127.0.0.1:8080", None])
def test_a_chain_url_on_loopback_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            base_url: str | None) -> None:
    doc = fleet({})
    doc["server"] = {"listen": "0.0.0.0:8080"} | ({"base_url": base_url} if base_url else {})
    path = write(doc, tmp_path)
    rc, _, err = run(capsys, "check-config", "--config", str(path))
    assert rc == 2 and err.startswith(f"bootserver: {path}: server.base_url: {base_url or 'http://localhost:8080'} "
                                      "is this machine's loopback: machines on lo would be handed a chain URL"), err


def test_a_class_with_a_vendor_class_and_architectures_needs_both() -> None:
    """The shape a new kind of client takes (UEFI HTTP boot: vendor class HTTPClient, architectures 16, 19)."""
    from bootserver.dhcp.dnsmasq import class_lines
    from bootserver.dhcp.kea import class_test
    from bootserver.dhcp.rules import ClientClass

    http = ClientClass("http", vendor_class="HTTPClient", arches=(16, 19))
    assert class_lines((http,)) == ["dhcp-vendorclass=set:http-vendor,HTTPClient",
                                    "dhcp-match=set:http-arch,option:client-arch,16",
                                    "dhcp-match=set:http-arch,option:client-arch,19",
                                    "tag-if=set:http,tag:http-vendor,tag:http-arch"]
    assert class_test(http, not_ipxe=True) == ("substring(option[60].hex,0,10) == 'HTTPClient' and "
                                               "(option[93].hex == 0x0010 or option[93].hex == 0x0013) and "
                                               "not member('ipxe')")


def test_check_config_sums_up_the_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(fleet({"mode": "full"}), tmp_path)
    rc, out, _ = run(capsys, "check-config", "--config", str(path))
    assert rc == 0 and out.splitlines()[-1] == f"{path}: dhcp: full mode on lo, 3 reservations (2 with an address)"


def test_check_config_warns_of_a_reserved_node_boot_ipxe_never_hands_its_script(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A reserved node that has no ``addresses`` and is not ``selectable`` gets the engine's answer, then
    ``/boot.ipxe?mac=`` refuses it its own script: check-config says so per node, with what to add."""
    doc = fleet({"mode": "full"})
    doc["nodes"]["m1"]["addresses"] = ["127.0.0.11/32"]
    path = write(doc, tmp_path)
    rc, out, err = run(capsys, "check-config", "--config", str(path))
    assert rc == 0 and out.splitlines()[-1].endswith("3 reservations (2 with an address)")
    assert err.splitlines() == [
        f"bootserver: warning: {path}: nodes.m0: the DHCP engine reserves 52:54:00:00:00:10 for it, but /boot.ipxe "
        "hands its script to no address (no addresses, not selectable): it would boot as a machine no node has; "
        "add addresses: [127.0.0.10] (its reserved address) or selectable: true",
        f"bootserver: warning: {path}: nodes.spare: the DHCP engine reserves 52:54:00:00:00:12 for it, but "
        "/boot.ipxe hands its script to no address (no addresses, not selectable): it would boot as a machine no "
        "node has; add addresses: [the subnet it boots from] or selectable: true"]
    doc["nodes"]["m0"]["addresses"] = ["127.0.0.10/32"]
    doc["nodes"]["spare"]["selectable"] = True
    path = write(doc, tmp_path)
    rc, _, err = run(capsys, "check-config", "--config", str(path))
    assert rc == 0 and err == ""


def test_a_comma_in_the_base_url_is_quoted_for_dnsmasq(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """dnsmasq's ``dhcp-boot`` separates its fields by commas: a boot file URL with one is quoted, whole
    (what the real dnsmasq then hands out: tests/dhcp/test_engine.py)."""
    doc = fleet({"mode": "full"})
    doc["server"]["base_url"] = "http://192.0.2.1:8080/boot,server"
    path = write(doc, tmp_path)
    rc, out, err = run(capsys, "dhcp", "--print", "--config", str(path))
    assert (rc, err) == (0, "")
    assert [ln for ln in out.splitlines() if "/boot,server" in ln] == [
        'dhcp-boot=tag:!ipxe,tag:httparm64,"http://192.0.2.1:8080/boot,server/loaders/grubaa64.efi"',
        'dhcp-boot=tag:!ipxe,tag:http64,"http://192.0.2.1:8080/boot,server/loaders/ipxe.efi"',
        'dhcp-boot=tag:ipxe,"http://192.0.2.1:8080/boot,server/boot.ipxe?mac=${net0/mac}"']
    config_accepted(["dnsmasq", "--test", "-C"], out, tmp_path / "dnsmasq.conf")


@pytest.mark.parametrize("mac", ["01:00:5e:00:00:fb", "FF:FF:FF:FF:FF:FF", "33:33:00:00:00:01", "00:00:00:00:00:00"])
@pytest.mark.parametrize("where", ["mac", "network"])
def test_a_group_or_zero_mac_is_refused_naming_node_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            mac: str, where: str) -> None:
    """No NIC has a multicast, broadcast or all-zero MAC: a reservation for one would never be answered."""
    node = {"profile": "master", "mac": mac} if where == "mac" else {
        "profile": "master", "mac": "52:54:00:00:00:01", "network": static(mac, "127.0.0.9/8")}
    path = write(fleet({"mode": "full"}, a=node), tmp_path)
    rc, out, err = run(capsys, "check-config", "--config", str(path))
    key = "nodes.a.mac" if where == "mac" else "nodes.a.network.interfaces[0].mac-address"
    what = "the all-zero address" if mac == "00:00:00:00:00:00" else "a multicast (group) address"
    assert (rc, out) == (2, "") and err.startswith(f"bootserver: {path}: {key}: {mac.lower()} is {what}, no NIC's own")
    assert err.count("\n") == 1, err
