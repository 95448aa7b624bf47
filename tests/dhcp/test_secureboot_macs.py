"""A ``secure_boot`` node is never handed iPXE, whichever of its NICs its firmware PXE-boots from: every MAC
of it (its ``mac`` selectors and the ``mac-address`` of each NIC of its ``network``, a bond's other port too)
is of the engines' ``secureboot`` class and gets its shim, while its reservation (the address) stays on its
boot MAC alone. The config texts go through the real ``dnsmasq --test`` and ``kea-dhcp4 -t``; the real
dnsmasq answers busybox's ``udhcpc`` as a UEFI x86_64 PXE client from each MAC on a network of the test's
own (the firmware's boot under Secure Boot is tests/e2e/test_secureboot_network.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import netns
from support.configs import config_doc, master_profile, write
from support.helpers import config_accepted

from bootserver.cli import main

#: The node's boot NIC (its reservation), its second selector, and its bond's other port (only in its network).
BOOT_MAC, SECOND_MAC, PORT_MAC = "52:54:00:5b:00:01", "52:54:00:5b:00:02", "52:54:00:5b:00:03"
#: A plain node's MAC: it gets iPXE, as before.
PLAIN_MAC = "52:54:00:5b:00:09"
SB_MACS = (BOOT_MAC, SECOND_MAC, PORT_MAC)


def bonded(address: str, gateway: str) -> dict[str, Any]:
    """The node's network: a bond of two NICs pinned by MAC (``BOOT_MAC``, ``PORT_MAC``) with a static
    IPv4 ``address`` (CIDR) and the default route via ``gateway``."""
    ip, prefix = address.split("/")
    return {"interfaces": [
        {"name": "nic0", "type": "ethernet", "mac-address": BOOT_MAC},
        {"name": "nic1", "type": "ethernet", "mac-address": PORT_MAC},
        {"name": "bond0", "type": "bond", "link-aggregation": {"mode": "802.3ad", "port": ["nic0", "nic1"]},
         "ipv4": {"enabled": True, "address": [{"ip": ip, "prefix-length": int(prefix)}]}}],
        "routes": {"config": [{"destination": "0.0.0.0/0", "next-hop-address": gateway}]}}


def fleet_doc(dhcp: dict[str, Any], address: str = "127.0.0.10/8", gateway: str = "127.0.0.1",
              base_url: str = "http://192.0.2.1:8080") -> dict[str, Any]:
    """Secure Boot node ``sb-0`` (selectors ``BOOT_MAC`` and ``SECOND_MAC``, the bond of :func:`bonded`) and
    plain node ``plain-0`` (``PLAIN_MAC``), with ``dhcp``."""
    return config_doc(profiles={"sb": master_profile(secure_boot=True), "plain": master_profile()},
                      nodes={"sb-0": {"profile": "sb", "mac": [BOOT_MAC, SECOND_MAC],
                                      "network": bonded(address, gateway)},
                             "plain-0": {"profile": "plain", "mac": PLAIN_MAC}},
                      server={"base_url": base_url}, dhcp=dhcp)


def printed(capsys: pytest.CaptureFixture[str], path: Path, what: str = "dnsmasq") -> str:
    rc = main(["dhcp", "--print", what, "--config", str(path)])
    out, err = capsys.readouterr()
    assert (rc, err) == (0, "")
    return out


@pytest.mark.parametrize("dhcp", [{"mode": "full"}, {"mode": "full", "range": "127.0.0.100-127.0.0.200"},
                                  {"mode": "proxy"}, {"mode": "full", "ipv6": True}],
                         ids=["full", "full-pool", "proxy", "full-ipv6"])
def test_every_mac_of_a_secure_boot_node_is_of_the_secureboot_class_in_every_mode(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], dhcp: dict[str, Any]) -> None:
    out = printed(capsys, write(fleet_doc({"interface": "lo", **dhcp}), tmp_path))
    lines = out.splitlines()
    # every MAC: the secureboot tag and the node's own, which its shim rules test; a tag only (dhcp-mac)
    assert [ln for ln in lines if ln.startswith("dhcp-mac=")] == [
        f"dhcp-mac=set:{tag},{mac}" for mac in SB_MACS for tag in ("secureboot", "secureboot-sb-0")]
    # one reservation, on the boot MAC alone: no second NIC holds the address or the node's options
    hosts = [ln for ln in lines if ln.startswith("dhcp-host=")]
    assert [h.split(",")[0] for h in hosts] == [f"dhcp-host={BOOT_MAC}", f"dhcp-host={PLAIN_MAC}"]
    assert not any(mac in ln for ln in lines for mac in (SECOND_MAC, PORT_MAC) if not ln.startswith("dhcp-mac="))
    # what hands a UEFI x86_64 firmware iPXE leaves them out; the shim is theirs by the node's MAC tag
    ipxe = [ln for ln in lines if ("ipxe.efi" in ln or ln.endswith(",ipxe")) and not ln.startswith("dhcp-host")]
    assert ipxe and all("tag:!secureboot" in ln for ln in ipxe), ipxe
    shim = [ln for ln in lines if "secureboot/rhcos-4.16/bootx64.efi" in ln]
    assert shim and all("tag:secureboot-sb-0," in ln for ln in shim), shim
    if dhcp.get("ipv6"):
        assert ('dhcp-option=tag:http6,tag:!ipxe,tag:!secureboot,option6:bootfile-url,'
                '"http://192.0.2.1:8080/loaders/ipxe.efi"') in lines
    config_accepted(["dnsmasq", "--test", "-C"], out, tmp_path / "dnsmasq.conf")


def test_check_config_warns_of_a_secure_boot_nic_only_its_network_names(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The bond's other port gets the shim, but the shim's GRUB finds the node by its ``mac`` selectors
    only: check-config says which MAC to add, and nothing once it is listed."""
    doc = fleet_doc({"interface": "lo", "mode": "full"})
    doc["nodes"]["sb-0"]["addresses"] = doc["nodes"]["plain-0"]["addresses"] = ["127.0.0.0/8"]
    path = write(doc, tmp_path)
    assert main(["check-config", "--config", str(path)]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"bootserver: warning: {path}: nodes.sb-0: secure_boot, and its network names NIC {PORT_MAC}, which is "
        "not among its mac selectors: the DHCP engine hands that NIC the shim, but the shim's GRUB finds the node "
        f"by its mac selectors only, so a boot from it falls through; add {PORT_MAC} to nodes.sb-0.mac"]
    doc["nodes"]["sb-0"]["mac"].append(PORT_MAC)
    path = write(doc, tmp_path)
    assert main(["check-config", "--config", str(path)]) == 0
    assert capsys.readouterr().err == ""


def test_kea_classes_every_mac_of_a_secure_boot_node_bond_ports_too(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = printed(capsys, write(fleet_doc({"interface": "lo", "mode": "full"}), tmp_path), "kea")
    doc = json.loads(out)["Dhcp4"]
    classes = {c["name"]: c for c in doc["client-classes"]}
    macs = " or ".join(f"pkt4.mac == 0x{m.replace(':', '')}" for m in SB_MACS)
    assert doc["client-classes"][0] == {"name": "secureboot", "test": macs}
    assert classes["node-sb-0-efi64"]["test"].startswith(f"({macs}) and ")
    assert [r["hw-address"] for r in doc["subnet4"][0]["reservations"]] == [BOOT_MAC, PLAIN_MAC]
    config_accepted(["kea-dhcp4", "-t"], out, tmp_path / "kea.json")


# ---------------------------------------------------------------------------------------- the real dnsmasq

UDHCPC_SCRIPT = '#!/bin/sh\n[ "$1" = bound ] && echo "bound $ip $boot_file"\nexit 0\n'


@pytest.fixture
def net() -> Iterator[netns.TestNetwork]:
    """A test network namespace (``sb-macs-...``), removed at the end, also on failure."""
    with netns.lab("sb-macs", ("dnsmasq", "dnsmasq-base"), ("busybox", "busybox-static")) as network:
        yield network


def pxe_client(net: netns.TestNetwork, mac: str, n: int, script: Path) -> str:
    """What the real dnsmasq hands a UEFI x86_64 PXE client (option 93 = 7, the vendor class its firmware
    sends) with ``mac``: busybox ``udhcpc`` on a veth port ``c<n>`` of the bridge; ``bound <ip> <boot file>``,
    or ``""`` when nothing bound within its tries (5 discovers, 1 s apart)."""
    net.ip("link", "add", f"c{n}", "type", "veth", "peer", "name", f"p{n}")
    net.ip("link", "set", f"c{n}", "address", mac)
    net.ip("link", "set", f"p{n}", "master", netns.BRIDGE, "up")
    net.ip("link", "set", f"c{n}", "up")
    p = net.run(["busybox", "udhcpc", "-i", f"c{n}", "-f", "-q", "-n", "-B", "-t", "5", "-T", "1", "-s", str(script),
                 "-V", "PXEClient:Arch:00007:UNDI:003016", "-x", "0x5d:0007"], timeout=30)
    return next((ln for ln in p.stdout.splitlines() if ln.startswith("bound ")), "")


def test_the_real_dnsmasq_hands_every_nic_of_a_secure_boot_node_its_shim(
        net: netns.TestNetwork, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # full mode with a pool and discovery on: the case where a NIC without the reservation got ipxe.efi
    doc = fleet_doc({"interface": netns.BRIDGE, "mode": "full", "range": "192.0.2.100-192.0.2.200"},
                    address="192.0.2.10/24", gateway=netns.SERVER_IPV4)
    out = printed(capsys, write(doc, tmp_path))
    (tmp_path / "tftp").mkdir()
    conf = tmp_path / "dnsmasq.conf"
    conf.write_text(out.replace("tftp-root=/srv/tftp", f"tftp-root={tmp_path / 'tftp'}"))
    script = tmp_path / "udhcpc.sh"
    script.write_text(UDHCPC_SCRIPT)
    script.chmod(0o755)
    log = tmp_path / "dnsmasq.log"
    dnsmasq = str(netns.program("dnsmasq"))  # the net fixture checked it is installed
    # --no-ping: dnsmasq pings a pool address for seconds before it offers it; nothing else is on this bridge
    net.start([dnsmasq, "--no-daemon", "-C", str(conf), f"--dhcp-leasefile={tmp_path / 'leases'}",
               f"--pid-file={tmp_path / 'dnsmasq.pid'}", "--no-ping"], log=log)
    got = {mac: pxe_client(net, mac, n, script) for n, mac in enumerate((*SB_MACS, PLAIN_MAC))}
    shim = "secureboot/rhcos-4.16/bootx64.efi"
    assert got[BOOT_MAC] == f"bound 192.0.2.10 {shim}", log.read_text()  # its reservation
    for mac in (SECOND_MAC, PORT_MAC):  # a pool address, the shim: never iPXE
        words = got[mac].split()
        assert words[:1] == ["bound"] and words[2:] == [shim] and words[1] != "192.0.2.10", (mac, got[mac])
    assert got[PLAIN_MAC].split()[2:] == ["ipxe.efi"], got[PLAIN_MAC]
