"""The mapping of OpenShift's installer files to nodes (bootserver.openshift): every public example of
tests/data/openshift/ (tests/data/SOURCES.md) with its documented result (docs/openshift.md, "The
mapping"), and one case per refusal, each one line naming file, host and key."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from bootserver.openshift import (
    ClusterRefused,
    fill_roles,
    install_device,
    node_entry,
    parse_bmc,
    read_cluster,
)

DATA = Path(__file__).parent / "data" / "openshift"


def txtar(path: Path) -> dict[str, str]:
    """The sections of a txtar file (the installer's test format: ``-- name --`` lines)."""
    out: dict[str, str] = {}
    name = None
    for line in path.read_text().splitlines(keepends=True):
        m = re.match(r"^-- (.+) --$", line.rstrip("\n"))
        if m:
            name = m.group(1)
            out[name] = ""
        elif name is not None:
            out[name] += line
    return out


def example(name: str) -> tuple[Any, Any]:
    """``(install-config, agent-config)`` of a public example, parsed (``None`` where it has none)."""
    path = DATA / name
    if path.suffix == ".yaml":
        return yaml.safe_load(path.read_text()), None
    sections = txtar(path)
    return (yaml.safe_load(sections["install-config.yaml"]) if "install-config.yaml" in sections else None,
            yaml.safe_load(sections["agent-config.yaml"]) if "agent-config.yaml" in sections else None)


def summary(name: str, **options: Any) -> Any:
    """What a user sees of an import: ``(hosts, warnings)`` or the refusal's lines."""
    try:
        cluster = read_cluster(*example(name), **options)
    except ClusterRefused as e:
        return list(e.problems)
    return [(h.name, h.role, list(h.macs), h.install_dev, h.bmc and (h.bmc.provider, dict(h.bmc.settings)))
            for h in cluster.hosts], list(cluster.warnings)


def test_every_public_example_is_in_the_table() -> None:
    assert {p.name for p in DATA.iterdir()} == {name for name, _, _ in EXAMPLES}


IPMI_HOSTS = [
    ("openshift-master-0", "master", ["00:11:07:4e:f6:68"], "/dev/sda",
     ("ipmi", {"address": "192.168.111.1", "port": 6230, "username": "admin", "boot_mode": "legacy"})),
    ("openshift-master-1", "master", ["00:11:07:4e:f6:6c"], "/dev/sda",
     ("ipmi", {"address": "192.168.111.1", "port": 6231, "username": "admin", "boot_mode": "uefi"})),
    ("openshift-master-2", "master", ["00:11:07:4e:f6:70"], "/dev/sda",
     ("ipmi", {"address": "192.168.111.1", "port": 6232, "username": "admin", "boot_mode": "uefi"})),
    ("openshift-worker-0", "worker", ["00:11:07:4e:f6:71"], "/dev/sda",
     ("ipmi", {"address": "192.168.111.1", "port": 6233, "username": "admin", "boot_mode": "uefi"})),
]
AGENT_HOSTS = [("worker-0", "worker", ["aa:bb:dc:dd:a8:04"], None, None),
               ("master-0", "master", ["aa:bb:dc:dd:a8:01"], None, None),
               ("master-1", "master", ["aa:bb:dc:dd:a8:02"], None, None),
               ("master-2", "master", ["aa:bb:dc:dd:a8:03"], None, None)]
OUTSIDE = [f"agent-config.yaml: host {h}: networkConfig.interfaces[0].ipv4.address[0].ip: 10.19.17.{n} is outside "
           "every networking.machineNetwork (192.168.111.0/24); imported as written (the installer accepts it)"
           for h, n in (("worker-0", 129), ("master-0", 126), ("master-1", 127), ("master-2", 128))]
ETH0 = ("networkConfig.interfaces[0].name: eth0 is a name the kernel gives itself; an interface found by its MAC "
        "needs another name (e.g. nic0), or the renaming races the kernel (dracut.cmdline(7), ifname=)")
NO_HOSTS = ["install-config.yaml and agent-config.yaml: no hosts (install-config.yaml platform.baremetal.hosts or "
            "agent-config.yaml hosts, each with its MAC): bootserver boots only the machines it knows"]

#: (file, options, what the user gets): the documented result of each public example (docs/openshift.md).
EXAMPLES: list[tuple[str, dict[str, Any], Any]] = [
    # the installer's IPI doc: minSizeGigabytes names no disk; refused unless --install-dev, then a warning each
    ("ipi-install-config-ipmi-hosts.yaml", {}, [
        f"install-config.yaml: host {h}: rootDeviceHints.minSizeGigabytes: names no device to install to (bootserver "
        "has no disk inspection): give rootDeviceHints.deviceName, or --install-dev DEVICE"
        for h in ("openshift-master-0", "openshift-master-1", "openshift-master-2", "openshift-worker-0")]),
    ("ipi-install-config-ipmi-hosts.yaml", {"install_dev": "/dev/sda"}, (IPMI_HOSTS, [
        f"install-config.yaml: host {h}: rootDeviceHints.minSizeGigabytes: names no device: installing to /dev/sda "
        "(--install-dev); everything on it is wiped"
        for h in ("openshift-master-0", "openshift-master-1", "openshift-master-2", "openshift-worker-0")])),
    # agent-config hosts outside the machine network: warnings, not refusals; agent mode needs no device
    ("agent-image-hosts-no-rendezvousip.txt", {"need_device": False}, (AGENT_HOSTS, OUTSIDE)),
    # Redfish over http:// and eth0 pinned to a MAC: the NMState name races the kernel, refused per host
    ("agent-image-baremetal-host-bmc.txt", {"need_device": False},
     [f"install-config.yaml: host master-{i}: {ETH0}" for i in range(3)]),
    # the pxe-files examples name no host at all: nothing could get the agent's initrd
    ("agent-pxe-sno.txt", {"need_device": False}, NO_HOSTS),
    ("agent-pxe-compact-external.txt", {"need_device": False}, NO_HOSTS),
]


@pytest.mark.parametrize(("name", "options", "expected"), EXAMPLES, ids=[f"{n}{o}" for n, o, _ in EXAMPLES])
def test_public_example(name: str, options: dict[str, Any], expected: Any) -> None:
    assert summary(name, **options) == expected


def test_a_host_boots_from_the_machine_networks_and_its_static_addresses_outside_them() -> None:
    cluster = read_cluster(*example("agent-image-hosts-no-rendezvousip.txt"), need_device=False)
    assert cluster.hosts[0].addresses == ("192.168.111.0/24", "10.19.17.129")
    ic, _ = example("ipi-install-config-ipmi-hosts.yaml")
    del ic["networking"]
    cluster = read_cluster(ic, None, install_dev="/dev/sda")
    assert {h.addresses for h in cluster.hosts} == {("10.0.0.0/16",)}  # the installer's default


def test_the_bmc_example_imports_once_its_interfaces_have_names_of_their_own() -> None:
    ic, ac = example("agent-image-baremetal-host-bmc.txt")
    for h in ic["platform"]["baremetal"]["hosts"]:
        h["networkConfig"]["interfaces"][0]["name"] = "nic0"
        h["networkConfig"]["routes"]["config"][0]["next-hop-interface"] = "nic0"
    cluster = read_cluster(ic, ac, need_device=False)
    assert cluster.warnings == ()
    assert {h.addresses for h in cluster.hosts} == {("192.168.111.0/24",)}
    assert [(h.name, h.role) for h in cluster.hosts] == [("master-0", "master"), ("master-1", "master"),
                                                        ("master-2", "master")]
    host = cluster.hosts[0]
    assert host.bmc is not None and host.bmc.password == "pwd1" and "pwd1" not in repr(host)
    node = node_entry(host, "ostest-master", "/etc/bootserver/ostest.passwords/master-0")
    assert node == {
        "profile": "ostest-master", "hostname": "master-0", "mac": ["00:00:00:aa:bb:01"],
        "addresses": ["192.168.111.0/24"], "network": h_network("nic0", "192.168.111.80"),
        "provider": "redfish",
        "redfish": {"address": "http://172.22.0.10:8000",
                    "system": "/redfish/v1/Systems/d3fe1eb9-f04c-465d-b5d6-d267f0a0059b",
                    "username": "foo", "boot_mode": "uefi",
                    "password_file": "/etc/bootserver/ostest.passwords/master-0"},
    }
    assert "pwd1" not in yaml.safe_dump(node)


def h_network(name: str, ip: str) -> dict[str, Any]:
    return {"interfaces": [{"ipv4": {"address": [{"ip": ip, "prefix-length": 24}], "dhcp": False, "enabled": True},
                            "mac-address": "00:00:00:aa:bb:01", "name": name, "state": "up", "type": "ethernet"}],
            "routes": {"config": [{"destination": "0.0.0.0/0", "next-hop-address": "192.168.111.1",
                                   "next-hop-interface": name, "table-id": 254}]}}


@pytest.mark.parametrize(("address", "expected"), [
    ("ipmi://192.168.111.1:6230", ("ipmi", {"address": "192.168.111.1", "port": 6230})),
    ("ipmi://bmc.example", ("ipmi", {"address": "bmc.example"})),
    ("192.168.111.1:6230", ("ipmi", {"address": "192.168.111.1", "port": 6230})),
    ("ipmi://[fd00::1]:623", ("ipmi", {"address": "fd00::1", "port": 623})),
    ("redfish://10.0.0.1/redfish/v1/Systems/1", ("redfish", {"address": "https://10.0.0.1",
                                                              "system": "/redfish/v1/Systems/1"})),
    ("redfish+http://10.0.0.1:8000/redfish/v1/Systems/abc", ("redfish", {"address": "http://10.0.0.1:8000",
                                                                          "system": "/redfish/v1/Systems/abc"})),
    ("redfish+https://[fd00::5]/redfish/v1/Systems/1", ("redfish", {"address": "https://[fd00::5]",
                                                                     "system": "/redfish/v1/Systems/1"})),
    ("redfish-virtualmedia://10.0.0.1/redfish/v1/Systems/1",
     ("redfish", {"address": "https://10.0.0.1", "system": "/redfish/v1/Systems/1", "boot_source": "virtual-media"})),
    ("idrac-redfish://10.0.0.1/redfish/v1/Systems/System.Embedded.1",
     ("redfish", {"address": "https://10.0.0.1", "system": "/redfish/v1/Systems/System.Embedded.1"})),
    ("idrac-virtualmedia+http://10.0.0.1/redfish/v1/Systems/System.Embedded.1",
     ("redfish", {"address": "http://10.0.0.1", "system": "/redfish/v1/Systems/System.Embedded.1",
                  "boot_source": "virtual-media"})),
    ("ilo5-redfish://10.0.0.1/redfish/v1/Systems/1", ("redfish", {"address": "https://10.0.0.1",
                                                                   "system": "/redfish/v1/Systems/1"})),
    ("ilo5-virtualmedia://10.0.0.1/redfish/v1/Systems/1",
     ("redfish", {"address": "https://10.0.0.1", "system": "/redfish/v1/Systems/1", "boot_source": "virtual-media"})),
    ("redfish://10.0.0.1", ("redfish", {"address": "https://10.0.0.1"})),
    ("http://172.22.0.10:8000/redfish/v1/Systems/x", ("redfish", {"address": "http://172.22.0.10:8000",
                                                                   "system": "/redfish/v1/Systems/x"})),
])
def test_bmc_schemes(address: str, expected: Any) -> None:
    assert parse_bmc(address) == expected


@pytest.mark.parametrize(("scheme", "instead"), [
    ("idrac", "idrac-redfish://"), ("ilo4", "redfish://"), ("ilo4-virtualmedia", "redfish-virtualmedia://"),
    ("ilo5", "ilo5-redfish://"), ("irmc", "redfish://"), ("ibmc", "redfish://")])
def test_a_vendor_native_scheme_is_refused_naming_the_redfish_one(scheme: str, instead: str) -> None:
    ic = ipi(bmc={"address": f"{scheme}://10.0.0.9/redfish/v1/Systems/1", "username": "u", "password": "s3cret"})
    assert refusals(ic) == [f"install-config.yaml: host m0: bmc.address: {scheme}:// is the vendor's own protocol, "
                            f"which bootserver does not speak: write the same BMC as {instead}10.0.0.9/redfish/v1/"
                            "Systems/1"]


def ipi(**host: Any) -> dict[str, Any]:
    """A small install-config with one host ``m0`` (keys overridden by ``host``)."""
    base = {"name": "m0", "role": "master", "bootMACAddress": "52:54:00:00:00:01",
            "rootDeviceHints": {"deviceName": "/dev/vda"},
            "bmc": {"address": "redfish://10.0.0.9/redfish/v1/Systems/1", "username": "u", "password": "s3cret"}}
    base.update(host)
    return {"apiVersion": "v1", "metadata": {"name": "lab"}, "controlPlane": {"name": "master", "replicas": 3},
            "networking": {"machineNetwork": [{"cidr": "192.0.2.0/24"}]},
            "platform": {"baremetal": {"apiVIPs": ["192.0.2.5"], "ingressVIPs": ["192.0.2.4"], "hosts": [base]}},
            "pullSecret": '{"auths": {}}', "sshKey": "ssh-ed25519 AAAA"}


def refusals(ic: Any, ac: Any = None, **options: Any) -> list[str]:
    with pytest.raises(ClusterRefused) as e:
        read_cluster(ic, ac, **options)
    assert "s3cret" not in str(e.value) and all("s3cret" not in p for p in e.value.problems)
    return list(e.value.problems)


def static(ip: str, name: str = "nic0") -> dict[str, Any]:
    return {"interfaces": [{"name": name, "type": "ethernet", "state": "up", "mac-address": "52:54:00:00:00:01",
                            "ipv4": {"enabled": True, "dhcp": False, "address": [{"ip": ip, "prefix-length": 24}]}}]}


def test_the_small_install_config_imports() -> None:
    cluster = read_cluster(ipi(networkConfig=static("192.0.2.10"), bootMode="UEFISecureBoot"), None)
    (host,) = cluster.hosts
    assert host.addresses == ("192.0.2.0/24",)
    assert (host.name, host.role, host.install_dev, host.secure_boot) == ("m0", "master", "/dev/vda", True)
    assert host.bmc is not None and dict(host.bmc.settings) == {
        "address": "https://10.0.0.9", "system": "/redfish/v1/Systems/1", "username": "u", "boot_mode": "uefi"}
    assert cluster.warnings == ()


@pytest.mark.parametrize(("host", "expected"), [
    ({"bmc": {"address": "ipmi://10.0.0.9", "username": "u", "password": "s3cret"}, "bootMode": "UEFISecureBoot"},
     "install-config.yaml: host m0: bootMode: UEFISecureBoot needs a BMC that can turn Secure Boot on (Redfish); "
     "IPMI cannot, as the installer refuses it too"),
    ({"rootDeviceHints": {"serialNumber": "S1"}},
     "install-config.yaml: host m0: rootDeviceHints.serialNumber: names no device to install to (bootserver has no "
     "disk inspection): give rootDeviceHints.deviceName, or --install-dev DEVICE"),
    ({"rootDeviceHints": {"deviceName": "sda"}},
     "install-config.yaml: host m0: rootDeviceHints.deviceName: deviceName 'sda' is not a /dev/ path"),
    ({"networkConfig": static("192.0.2.5")},
     "install-config.yaml: host m0: networkConfig.interfaces[0].ipv4.address[0].ip: 192.0.2.5 is the cluster's VIP "
     "(platform.baremetal.apiVIPs): a host must not hold it"),
    ({"networkConfig": static("192.0.2.4")},
     "install-config.yaml: host m0: networkConfig.interfaces[0].ipv4.address[0].ip: 192.0.2.4 is the cluster's VIP "
     "(platform.baremetal.ingressVIPs): a host must not hold it"),
    ({"bmc": {"address": "redfish://admin:s3cret@10.0.0.9/redfish/v1/Systems/1"}},
     "install-config.yaml: host m0: bmc.address: holds credentials: put them in bmc.username and bmc.password"),
    ({"bmc": {"address": "ftp://10.0.0.9"}},
     "install-config.yaml: host m0: bmc.address: ftp:// is not a BMC scheme bootserver drives (ipmi://, redfish://, "
     "redfish+http://, redfish-virtualmedia://, idrac-redfish://, ilo5-redfish://...)"),
    ({"role": "boss"}, "install-config.yaml: host m0: role: 'boss' is not a role (master, arbiter, worker or empty)"),
    ({"bootMACAddress": "52:54:00"}, "install-config.yaml: host m0: bootMACAddress: not a MAC address: '52:54:00'"),
    ({"bootMACAddress": "01:00:5e:00:00:01"}, "install-config.yaml: host m0: bootMACAddress: 01:00:5e:00:00:01 is a "
     "multicast (group) address, no NIC's own: the first octet's lowest bit is set"),
    ({"name": "M_0!"}, "install-config.yaml: host M_0!: name: not a host name bootserver can use as node name and "
     "hostname"),
    ({"networkConfig": {"interfaces": [{"name": "nic0", "type": "ethernet", "state": "up", "mtu": 9000}]}},
     "install-config.yaml: host m0: networkConfig.interfaces[0].mtu: a key bootserver's NMState subset does not have "
     "(docs/config.md, network)"),
    # a newline in what the file says stays escaped: the refusal cannot print a line of its own
    ({"name": "m0\nbootserver: imported"}, "install-config.yaml: host m0\\nbootserver: imported: name: not a host "
     "name bootserver can use as node name and hostname"),
    ({"bmc": {"address": "ftp\nbootserver-ok://10.0.0.9"}}, "install-config.yaml: host m0: bmc.address: "
     "ftp\\nbootserver-ok:// is not a BMC scheme bootserver drives (ipmi://, redfish://, redfish+http://, "
     "redfish-virtualmedia://, idrac-redfish://, ilo5-redfish://...)"),
])
def test_each_refusal_is_one_line_naming_host_and_key(host: dict[str, Any], expected: str) -> None:
    assert refusals(ipi(**host)) == [expected]


def test_duplicate_names_and_macs_are_refused() -> None:
    ic = ipi()
    hosts = ic["platform"]["baremetal"]["hosts"]
    hosts.append(copy.deepcopy(hosts[0]))
    hosts.append({**copy.deepcopy(hosts[0]), "name": "m2"})
    assert refusals(ic) == [
        "install-config.yaml: host m0: name: m0 is listed twice",
        "install-config.yaml: host m2: bootMACAddress: 52:54:00:00:00:01 is also a MAC of host m0"]


def test_install_dev_fills_vague_hints_with_a_warning_and_the_device_wins_over_other_hints() -> None:
    ic = ipi(rootDeviceHints={"minSizeGigabytes": 20})
    hints = {"deviceName": "/dev/nvme0n1", "rotational": False}
    ic["platform"]["baremetal"]["hosts"].append({"name": "m1", "bootMACAddress": "52:54:00:00:00:02",
                                                 "rootDeviceHints": hints})
    cluster = read_cluster(ic, None, install_dev="/dev/sdb")
    assert [h.install_dev for h in cluster.hosts] == ["/dev/sdb", "/dev/nvme0n1"]
    assert cluster.warnings == (
        "install-config.yaml: host m0: rootDeviceHints.minSizeGigabytes: names no device: installing to /dev/sdb "
        "(--install-dev); everything on it is wiped",
        "install-config.yaml: host m1: rootDeviceHints.rotational: not checked: the install goes to /dev/nvme0n1")


@pytest.mark.parametrize(("hints", "expected"), [
    (None, (None, ())), ({}, (None, ())),
    ({"deviceName": "/dev/disk/by-path/pci-0000:00:1f.2-ata-1"}, ("/dev/disk/by-path/pci-0000:00:1f.2-ata-1", ())),
    ({"wwnWithExtension": "0x5000c500a0b1c2d3"}, ("/dev/disk/by-id/wwn-0x5000c500a0b1c2d3", ())),
    ({"wwn": "0x5000c500a0b1c2d3"}, (None, ("wwn",))),
    ({"minSizeGigabytes": 20, "model": "X"}, (None, ("minSizeGigabytes", "model"))),
])
def test_install_device(hints: Any, expected: Any) -> None:
    assert install_device(hints) == expected


def test_roles_are_filled_as_the_installer_fills_them() -> None:
    assert fill_roles(["", "", "worker", "", "", ""], 3, 1) == ["master", "master", "worker", "master", "arbiter",
                                                               "worker"]
    assert fill_roles(["master", "", ""], 1, 0) == ["master", "worker", "worker"]


def test_agent_config_hosts_take_their_bmc_from_install_config_by_name() -> None:
    ic = ipi(bootMode="legacy")
    ac = {"apiVersion": "v1beta1", "metadata": {"name": "lab"},
          "hosts": [{"hostname": "m0", "interfaces": [{"name": "nic0", "macAddress": "52:54:00:00:00:0A"}]},
                    {"hostname": "m1", "role": "worker",
                     "interfaces": [{"name": "nic0", "macAddress": "52:54:00:00:00:0b"}]}]}
    cluster = read_cluster(ic, ac, need_device=False)
    assert [h.addresses for h in cluster.hosts] == [("192.0.2.0/24",), ("192.0.2.0/24",)]
    assert [(h.name, h.role, h.macs, h.source) for h in cluster.hosts] == [
        ("m0", "master", ("52:54:00:00:00:0a",), "agent-config.yaml"),
        ("m1", "worker", ("52:54:00:00:00:0b",), "agent-config.yaml")]
    assert cluster.hosts[0].bmc is not None and cluster.hosts[0].bmc.settings["boot_mode"] == "legacy"
    assert cluster.hosts[1].bmc is None


def test_the_bootstrap_machine() -> None:
    cluster = read_cluster(ipi(), None, bootstrap_mac="52-54-00-00-00-FF", install_dev="/dev/vda",
                           bootstrap_bmc="ipmi://10.0.0.7")
    boot = cluster.hosts[-1]
    assert (boot.name, boot.role, boot.macs, boot.install_dev) == ("bootstrap", "bootstrap", ("52:54:00:00:00:ff",),
                                                                   "/dev/vda")
    assert boot.bmc is not None and boot.bmc.provider == "ipmi"
    assert boot.addresses == ("192.0.2.0/24",)
    assert refusals(ipi(), bootstrap_mac="52:54:00:00:00:01") == [
        "--bootstrap-mac: host bootstrap: --bootstrap-mac: 52:54:00:00:00:01 is a MAC of host m0",
        "--bootstrap-mac: host bootstrap: --install-dev: the bootstrap machine needs --install-dev DEVICE"]
    assert refusals(ipi(), bootstrap_mac="00:00:00:00:00:00", install_dev="/dev/vda") == [
        "--bootstrap-mac: host bootstrap: --bootstrap-mac: 00:00:00:00:00:00 is the all-zero address, no NIC's own"]
