"""The DHCP engine with real firmware on a network of its own (tests/e2e/netboot.py, support/netns.py):
``bootserver dhcp`` runs the real dnsmasq inside a test network namespace, ``serve`` beside it, QEMU
guests on taps of its bridge.

- ``full`` mode: SeaBIOS with iPXE's PXE ROM boots to its node's script at exactly its reserved address,
  with the kargs ``render ipxe`` shows, and the timeline shows the first mile (``dhcp``); a reload adds a
  reservation with the same dnsmasq process. (OVMF's own PXE in full mode, and the adoption of a machine
  from the pool, are the playground's: ``test_playground.py`` takes them through their whole life.)
- ``proxy`` mode beside a second dnsmasq that plays the site's DHCP server (addresses only): SeaBIOS's
  iPXE follows the PXE menu; OVMF's PXE loads ``ipxe.0`` (the menu's name for ``ipxe.efi``) and that
  iPXE follows the menu to ``bootserver.0``, the script that chains the generic entry.
- ``--print kea`` loaded by the real ``kea-dhcp4`` boots a guest.
- dnsmasq refusing to start (the port taken) is one line naming the key; ``mode: full`` on an interface
  without an address is refused before anything starts.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support import netns

from bootserver.dhcp.engine import SIGHUP_SAFE, dnsmasq_version

from . import netboot, rig
from .stack import bootserver_command, need

pytestmark = pytest.mark.e2e

BIOS_MAC = "52:54:00:d4:00:01"
UEFI_MAC = "52:54:00:d4:00:02"


@pytest.fixture
def net() -> Iterator[netns.TestNetwork]:
    """A test network namespace (``bs-dhcp-...``), removed at the end, also on failure."""
    with netns.lab("bs-dhcp", ("dnsmasq", "dnsmasq-base")) as network:
        yield network


def node(mac: str, address: str) -> dict:
    """A live node with a static address, which alone may fetch its script (``addresses``)."""
    return {"profile": "e2e-live", "mac": mac, "network": netboot.static_network(mac, address),
            "addresses": [address.split("/")[0] + "/32"]}


def assert_booted(s: netboot.NetStack, name: str, result: rig.BootResult, firmware: str) -> None:
    script = s.bootserver("render", "ipxe", name).stdout
    assert result.cmdline == rig.expected_cmdline(script, firmware), result.tail()
    assert result.rootfs_sha256 is not None, result.tail()


def test_full_mode_reload_adds_a_reservation_with_the_same_dnsmasq(
        net: netns.TestNetwork, e2e_source: tuple) -> None:
    """A reload adds a reservation with the same dnsmasq. A machine booting at its reserved address in full
    mode (SeaBIOS's iPXE: the engine's ``DHCPACK`` with the node's name, iPXE's ``net0`` line, the ``dhcp``
    event; OVMF's own PXE: ``dhcp``, ``tftp`` of ``ipxe.efi``, then iPXE) is the playground's, whose BIOS
    and UEFI machines this engine's full mode takes through their whole life (``test_playground.py``): the
    boot that was here repeated its BIOS machine's first minute."""
    with netboot.stack(net, e2e_source, {"interface": netns.BRIDGE, "mode": "full", "lease_time": "10m"},
                       {"bios-0": node(BIOS_MAC, "192.0.2.10/24")}) as s:
        # a reload adds uefi-0's reservation: dnsmasq re-reads it, the same process
        pid = s.dnsmasq_pid()
        (s.work / "nodes.d" / "uefi-0.yaml").write_text(json.dumps({"nodes": {"uefi-0": node(UEFI_MAC,
                                                                                              "192.0.2.11/24")}}))
        p = s.bootserver("reload")  # serve and the engine, each with its outcome
        assert p.returncode == 0, p.stderr
        assert p.stdout.splitlines()[-1] == ("bootserver dhcp reloaded: 2 reservations (1 added, 0 removed, 0 changed) "
                                             "without restarting dnsmasq"), p.stdout
        s.wait_log(r"reload: 2 reservations \(1 added, 0 removed, 0 changed\) without restarting dnsmasq")
        assert (s.work / "state/dhcp/hosts.d/uefi-0").read_text() == f"{UEFI_MAC},set:node-uefi-0,192.0.2.11,uefi-0\n"
        assert s.dnsmasq_pid() == pid


def site_dnsmasq(net: netns.TestNetwork, folder: Path) -> netns.TestNetwork:
    """The site's own DHCP server on another machine of the network (192.0.2.2): dnsmasq handing out
    addresses 192.0.2.100-150 and nothing else (no boot options, no TFTP, no DNS)."""
    site = net.peer("site", "192.0.2.2/24")
    site.start(["dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--port=0", "--interface=eth0",
                "--bind-interfaces", "--dhcp-range=192.0.2.100,192.0.2.150,255.255.255.0,10m",
                "--dhcp-option=option:router", f"--dhcp-leasefile={folder / 'site.leases'}",
                f"--pid-file={folder / 'site.pid'}", "--log-facility=-", "--log-dhcp", "--no-resolv", "--no-hosts"],
               log=folder / "site.log")
    return site


def test_proxy_mode_boots_bios_and_uefi_beside_the_sites_dhcp_server(
        tools: rig.Tools, net: netns.TestNetwork, e2e_source: tuple, tmp_path: Path) -> None:
    need(tools, "qemu", "ovmf", "ipxe_efi_rom")
    net.tap("tapa")
    net.tap("tapb")
    site_dnsmasq(net, tmp_path)
    nodes = {"proxy-bios": {"profile": "e2e-live", "mac": BIOS_MAC, "selectable": True},  # the site picks the address
             "proxy-uefi": {"profile": "e2e-live", "mac": UEFI_MAC, "selectable": True}}
    guests = (("proxy-bios", BIOS_MAC, "bios", "tapa"), ("proxy-uefi", UEFI_MAC, "uefi", "tapb"))
    with netboot.stack(net, e2e_source, {"interface": netns.BRIDGE, "mode": "proxy"}, nodes) as s, \
            ThreadPoolExecutor(len(guests)) as pool:
        # both machines at once, as on a real network; on idle cores a core each, so the test takes the
        # longer boot's time rather than both
        booting = [pool.submit(netboot.boot, tools, net, tap, tmp_path / f"{firmware}.log", mac, firmware, 180)
                   for _, mac, firmware, tap in guests]
        for (name, mac, firmware, _), future in zip(guests, booting, strict=True):
            result = future.result()
            assert_booted(s, name, result, firmware)
            site_log = (tmp_path / "site.log").read_text()
            address = re.search(rf"DHCPACK\(eth0\) (192\.0\.2\.1\d\d) {mac}", site_log)
            assert address is not None, site_log[-2000:]
            # the PXE menu's iPXE script (BIOS: iPXE's ROM follows the menu; UEFI: the firmware's PXE
            # loads ipxe.efi from the menu, whose own DHCP follows it again)
            s.wait_log(rf"dnsmasq-tftp.*sent \S+/bootserver(\.0)? to {re.escape(address.group(1))}")
            events = s.events(name)
            assert events.index("dhcp") < events.index("script"), events
        assert "Booting from PXE menu" in (tmp_path / "bios.log").read_text()
        s.wait_log(r"dnsmasq-tftp.*sent \S+/ipxe(\.0)? to 192\.0\.2\.1\d\d")
        engine_log = s.dhcp_log.read_text()
        assert "DHCPACK" not in engine_log and "DHCPOFFER" not in engine_log  # proxy: never an address


def test_kea_loads_print_kea_and_boots_a_guest(
        tools: rig.Tools, net: netns.TestNetwork, e2e_source: tuple, tmp_path: Path) -> None:
    need(tools, "qemu", "ipxe_efi_rom")
    kea = netns.program("kea-dhcp4") or netns.skip_or_fail("kea-dhcp4 is not installed (Debian: kea-dhcp4-server)")
    net.tap("tapa")
    with netboot.stack(net, e2e_source, {"interface": netns.BRIDGE, "mode": "full"},
                       {"kea-0": node(BIOS_MAC, "192.0.2.20/24")}, engine=False) as s:
        p = net.run([*bootserver_command(), "dhcp", "--print", "kea", "--config", str(s.config)])
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        # the site's own choices around our classes and reservations: a lease file of the test's own
        doc["Dhcp4"]["lease-database"] = {"type": "memfile", "persist": False}
        (tmp_path / "kea.json").write_text(json.dumps(doc))
        env = {**os.environ, "KEA_PIDFILE_DIR": str(tmp_path), "KEA_LOCKFILE_DIR": str(tmp_path)}
        kea_log = tmp_path / "kea.log"
        net.start([kea, "-c", str(tmp_path / "kea.json")], log=kea_log, env=env)
        s.wait_log(r"DHCP4_STARTED|DHCPSRV_CFGMGR_ADD_IFACE|DHCP4_CONFIG_COMPLETE", log=kea_log)
        result = netboot.boot(tools, net, "tapa", tmp_path / "bios.log", BIOS_MAC, "bios")
        assert_booted(s, "kea-0", result, "bios")
        assert "net0: 192.0.2.20/255.255.255.0" in result.log, result.tail()  # Kea's reservation


def test_refusals_are_one_line_naming_the_key_and_start_nothing(net: netns.TestNetwork, e2e_source: tuple) -> None:
    net.interface("prov0")  # up, no address
    with netboot.stack(net, e2e_source, {"interface": netns.BRIDGE, "mode": "full"},
                       {"bios-0": node(BIOS_MAC, "192.0.2.10/24")}, engine=False) as s:
        # another program holds the DHCP port: dnsmasq cannot start
        holder = net.start([sys.executable, "-c", "import socket, sys, time\n"
                            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('0.0.0.0', 67))\n"
                            "print('bound', flush=True); time.sleep(120)"], stdout=subprocess.PIPE)
        assert holder.stdout is not None and holder.stdout.readline() == b"bound\n"
        p = net.run([*bootserver_command(), "dhcp", "--config", str(s.config)])
        assert p.returncode == 1, p.stderr
        assert p.stderr.strip().splitlines()[-1] == (
            f"bootserver: {s.config}: dhcp.interface: dnsmasq cannot listen on br0: failed to bind DHCP server "
            "socket: Address already in use (another DHCP or TFTP server runs there)"), p.stderr
        net.stop(holder)
        # mode: full on an interface without an address: refused before anything starts
        s.config.write_text(s.config.read_text().replace("interface: br0", "interface: prov0"))
        for command in ("check-config", "dhcp"):
            p = net.run([*bootserver_command(), command, "--config", str(s.config)])
            assert p.returncode == 2 and p.stderr == (
                f"bootserver: {s.config}: dhcp.interface: mode: full needs an IPv4 address on prov0 (the subnet "
                "addresses are handed out of), and it has none\n"), p.stderr


def test_reloads_change_reservations_in_place_and_restart_dnsmasq_only_for_its_own_options(
        net: netns.TestNetwork, e2e_source: tuple) -> None:
    nodes = {"a": node(BIOS_MAC, "192.0.2.10/24"), "b": node(UEFI_MAC, "192.0.2.11/24")}
    nodes["a"]["network"] = netboot.static_network(BIOS_MAC, "192.0.2.10/24", ipv6="2001:db8::10/64")
    with netboot.stack(net, e2e_source, {"interface": netns.BRIDGE, "mode": "full", "ipv6": True}, nodes) as s:
        s.wait_log(r"router advertisement on 2001:db8::, constructed for br0")  # ipv6: RA and DHCPv6
        pid = s.dnsmasq_pid()
        hosts = s.work / "state" / "dhcp" / "hosts" / "nodes"
        # b leaves (b-gone comes), a moves: the hosts file follows; dnsmasq re-reads it in place (SIGHUP), or
        # where its version crashes on that with tagged reservations (2.90) it is restarted
        doc = s.config.read_text().replace("192.0.2.10", "192.0.2.12").replace("\n  b:\n", "\n  b-gone:\n")
        s.config.write_text(doc)
        p = s.bootserver("reload")  # serve's pid file and the engine's
        in_place = dnsmasq_version(str(netns.program("dnsmasq"))) >= SIGHUP_SAFE
        assert p.returncode == 0 and p.stdout.splitlines()[-1].startswith(
            "bootserver dhcp reloaded: 2 reservations (1 added, 1 removed, 1 changed)"), p
        assert p.stdout.endswith(" without restarting dnsmasq\n" if in_place else
                                 f"restarted it (process {s.dnsmasq_pid()})\n"), p
        assert (s.dnsmasq_pid() == pid) == in_place
        pid = s.dnsmasq_pid()
        # an invalid config for the engine alone (the interface is gone): serve reloads, the engine refuses
        s.config.write_text(doc.replace("interface: br0", "interface: br9"))
        p = s.bootserver("reload")
        assert p.returncode == 2 and p.stderr.startswith(
            f"bootserver: bootserver dhcp refused the reload, its running config stays: {s.config}: dhcp.interface: "
            "no interface br9 on this machine"), p
        s.config.write_text(doc)
        s.wait_log(r"reload: 2 reservations \(1 added, 1 removed, 1 changed\)")
        assert f"{BIOS_MAC},set:node-a,192.0.2.12,[2001:db8::10],a\n" in hosts.read_text()
        assert "node-b," not in hosts.read_text() and "node-b-gone," in hosts.read_text()
        assert s.dnsmasq_pid() == pid
        # an invalid config is refused and changes nothing (SIGHUP: what systemd's reload sends)
        s.config.write_text(doc.replace("mode: full", "mode: fool"))
        os.kill(s.dhcp.pid, signal.SIGHUP)
        s.wait_log(r"reload refused, the running config stays: .*dhcp\.mode")
        assert s.dnsmasq_pid() == pid and f"{BIOS_MAC},set:node-a,192.0.2.12,[2001:db8::10],a\n" in hosts.read_text()
        # dnsmasq's own options (the lease time) restart it; its lease file keeps the leases
        s.config.write_text(doc.replace("mode: full", "mode: full\n  lease_time: 20m"))  # after ipv6: in the doc
        os.kill(s.dhcp.pid, signal.SIGHUP)
        restarted = int(s.wait_log(r"dnsmasq's options changed: restarted it \(process (\d+)\)").group(1))
        assert s.dnsmasq_pid() == restarted != pid
        assert "dhcp-range=192.0.2.0,static,255.255.255.0,1200\n" in (s.work / "state/dhcp/dnsmasq.conf").read_text()
        assert s.dhcp.poll() is None
