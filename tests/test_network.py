"""The ``network`` key: bad input (one line naming node and key, exit 2), ``network: provider`` from an
Equinix device record, the kernel command line limit, and what ``render`` and the server answer."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.fake_metal import validator
from support.helpers import run_cli, write_config
from support.networks import long_network
from support.signing import FIXED_KEY, FIXED_NOW, fixed_signer

from bootserver.config import parse_config
from bootserver.equinix_network import equinix_network
from bootserver.errors import ConfigError, DeviceRecordError
from bootserver.http.app import create_app
from bootserver.kargs import CommandLineTooLong, command_line_bytes
from bootserver.nmstate import NetworkState, dracut_kargs
from bootserver.signing import sign
from bootserver.state.sqlite_timeline import Timeline

BOND = {
    "interfaces": [
        {"name": "nic0", "type": "ethernet", "mac-address": "52:54:00:00:00:01"},
        {"name": "nic1", "type": "ethernet", "mac-address": "52:54:00:00:00:02"},
        {"name": "bond0", "type": "bond", "link-aggregation": {"mode": "802.3ad", "port": ["nic0", "nic1"]},
         "ipv4": {"enabled": True, "address": [{"ip": "10.0.0.5", "prefix-length": 24}]}},
    ],
    "routes": {"config": [{"destination": "0.0.0.0/0", "next-hop-address": "10.0.0.1",
                           "next-hop-interface": "bond0"}]},
}


def doc(reference: Path, tmp_path: Path, node_network: Any = None, **profile: Any) -> dict[str, Any]:
    node: dict[str, Any] = {"profile": "metal"}
    if node_network is not None:
        node["network"] = node_network
    return {
        "server": {"base_url": "http://boot.example.net:8080"},
        "cache_dir": str(tmp_path / "cache"),
        "state_dir": str(tmp_path / "state"),
        "streams": {"fcos-stable": {"metadata": str(reference / "fcos-stream-stable.json")}},
        "profiles": {"metal": {"stream": "fcos-stable", "mode": "install", "install_dev": "/dev/sda", **profile}},
        "nodes": {"master-0": node},
    }


def edit(change) -> dict[str, Any]:
    network = copy.deepcopy(BOND)
    change(network)
    return network


BAD = [
    ("address without a prefix length",
     lambda n: n["interfaces"][2]["ipv4"]["address"][0].pop("prefix-length"),
     "interfaces[2].ipv4.address[0].prefix-length: required key is missing"),
    ("gateway outside every subnet",
     lambda n: n["routes"]["config"][0].update({"next-hop-address": "10.9.0.1"}),
     "routes.config[0].next-hop-address: gateway 10.9.0.1 is outside the subnet of every static IPv4 "
     "address of bond0"),
    ("two default routes in one family",
     lambda n: n["routes"]["config"].append({"destination": "0.0.0.0/0", "next-hop-address": "10.0.0.2"}),
     "routes.config[1].destination: a second IPv4 default route (routes.config[0] is one)"),
    ("bond port that is not an interface",
     lambda n: n["interfaces"][2]["link-aggregation"]["port"].__setitem__(1, "ens9"),
     "interfaces[2].link-aggregation.port[1]: no interface named ens9"),
    ("VLAN base that is not an interface",
     lambda n: n["interfaces"].append({"name": "bond1.20", "type": "vlan", "vlan": {"base-iface": "bond1", "id": 20}}),
     "interfaces[3].vlan.base-iface: no interface named bond1"),
    ("unknown interface type",
     lambda n: n["interfaces"][0].update({"type": "team"}),
     "interfaces[0].type: input should be 'ethernet', 'bond' or 'vlan', got 'team'"),
    ("unknown NMState key",
     lambda n: n["interfaces"][0].update({"mtu": 9000}),
     "interfaces[0].mtu: unknown key"),
    ("unknown NMState key in routes",
     lambda n: n["routes"]["config"][0].update({"metric": 100}),
     "routes.config[0].metric: unknown key"),
    ("MAC that does not parse",
     lambda n: n["interfaces"][1].update({"mac-address": "52:54:00:00:02"}),
     "interfaces[1].mac-address: not a MAC address: '52:54:00:00:02'"),
    ("kernel name pinned to a MAC",
     lambda n: (n["interfaces"][0].update({"name": "eth0"}),
                n["interfaces"][2]["link-aggregation"]["port"].__setitem__(0, "eth0")),
     "interfaces[0].name: eth0 is a name the kernel gives itself; an interface found by its MAC needs another "
     "name (e.g. nic0), or the renaming races the kernel (dracut.cmdline(7), ifname=)"),
    ("VLAN name without its id",
     lambda n: n["interfaces"].append({"name": "prov", "type": "vlan", "vlan": {"base-iface": "bond0", "id": 7}}),
     "interfaces[3].name: the kernel argument vlan= reads the VLAN id from the name: call it bond0.7 or vlan7"),
    ("address with its prefix in ip",
     lambda n: n["interfaces"][2]["ipv4"]["address"][0].update({"ip": "10.0.0.5/24"}),
     "interfaces[2].ipv4.address[0].ip: '10.0.0.5/24': write the address without '/'; the prefix goes in "
     "prefix-length"),
    ("IPv6 address under ipv4",
     lambda n: n["interfaces"][2]["ipv4"]["address"][0].update({"ip": "2001:db8::5"}),
     "interfaces[2].ipv4.address[0].ip: 2001:db8::5 is not an IPv4 address"),
    ("addresses on a bond port",
     lambda n: n["interfaces"][0].update({"ipv4": {"address": [{"ip": "10.0.1.5", "prefix-length": 24}]}}),
     "interfaces[0].ipv4: nic0 is a port of bond0; a bond port has no addresses"),
    ("state other than up",
     lambda n: n["interfaces"][0].update({"state": "absent"}),
     "interfaces[0].state: input should be 'up', got 'absent'"),
]


@pytest.mark.parametrize("change,message", [(c, m) for _, c, m in BAD], ids=[name for name, _, _ in BAD])
def test_bad_network_is_one_line_naming_node_and_key(change, message: str, reference: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(doc(reference, tmp_path, edit(change)), "bootserver.yaml", tmp_path)
    assert str(info.value) == f"bootserver.yaml: nodes.master-0.network.{message}"
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("network,message", [
    ("static", "nodes.master-0.network: must be dhcp, provider or an NMState mapping (interfaces, routes, "
               "dns-resolver), got 'static'"),
    (["dhcp"], "nodes.master-0.network: expected a mapping, got list ['dhcp']"),
])
def test_network_is_dhcp_provider_or_a_mapping(network, message: str, reference: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="^bootserver.yaml: " + message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]") + "$"):
        parse_config(doc(reference, tmp_path, network), "bootserver.yaml", tmp_path)


def test_profile_network_is_checked_too(reference: Path, tmp_path: Path) -> None:
    bad = edit(lambda n: n["interfaces"][2]["link-aggregation"]["port"].__setitem__(1, "ens9"))
    with pytest.raises(ConfigError) as info:
        parse_config(doc(reference, tmp_path, None, network=bad), "b.yaml", tmp_path)
    assert (
        str(info.value)
        == "b.yaml: profiles.metal.network.interfaces[2].link-aggregation.port[1]: no interface named ens9"
    )


def test_network_kargs_in_profile_kargs_are_refused_with_a_network(reference: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(doc(reference, tmp_path, BOND, kargs=["nosmt", "ip=dhcp"]), "b.yaml", tmp_path)
    assert str(info.value) == ("b.yaml: profiles.metal.kargs[1]: ip=dhcp is a network argument, and node master-0 "
                               "has a network key; describe the network in one place")
    parse_config(doc(reference, tmp_path, "dhcp", kargs=["ip=dhcp"]), "b.yaml", tmp_path)  # dhcp: theirs


async def test_check_config_exits_2_with_one_line(reference: Path, tmp_path: Path) -> None:
    bad = edit(lambda n: n["interfaces"][2]["link-aggregation"]["port"].__setitem__(1, "ens9"))
    path = write_config(tmp_path / "bootserver.yaml", doc(reference, tmp_path, bad))
    rc, out, err = await run_cli("check-config", "--config", str(path))
    assert (rc, out) == (2, "")
    assert err == (f"bootserver: {path}: nodes.master-0.network.interfaces[2].link-aggregation.port[1]: "
                   "no interface named ens9\n")


# ------------------------------------------------------------------------------ kernel command line


async def test_a_command_line_over_2048_bytes_is_an_error_at_check_config_and_render(
    reference: Path, tmp_path: Path
) -> None:
    path = write_config(tmp_path / "bootserver.yaml", doc(reference, tmp_path, long_network(40)))
    rc, out, err = await run_cli("check-config", "--config", str(path))
    assert (rc, out) == (2, "")
    assert err.startswith(f"bootserver: {path}: node master-0: the kernel command line needs ")
    assert "more than the 2048 of x86_64" in err and err.count("\n") == 1
    rc, out, err = await run_cli("render", "ipxe", "master-0", "--config", str(path))
    assert (rc, out) == (2, "")
    assert err.startswith("bootserver: node master-0: the kernel command line needs ") and err.count("\n") == 1


async def test_the_limit_counts_what_linux_counts(reference: Path, tmp_path: Path) -> None:
    # The largest network that fits renders; its command line, image name and NUL included, is <= 2048.
    from support.services import service

    fits = None
    for n in range(1, 40):
        config = parse_config(doc(reference, tmp_path, long_network(n)), "b.yaml", tmp_path)
        try:
            script = await service(config, fixed_signer()).script("master-0")
        except CommandLineTooLong as e:
            assert str(e).startswith("node master-0: the kernel command line needs ")
            break
        fits = script
    assert fits is not None
    words = next(line for line in fits.splitlines() if line.startswith("kernel ")).split()[1:-3]
    size = command_line_bytes(words[0], words[1:])
    assert size == len(f"{words[0].rsplit('/', 1)[1]} {' '.join(words[1:])}") + 1
    assert 2048 - 60 < size <= 2048  # one more address (about 55 bytes) would not fit


# ------------------------------------------------------------------------------------ Equinix Metal


def equinix_record(network_type: str = "layer3") -> dict[str, Any]:
    """A device as the Equinix Metal API answers it (checked against the spec's Device schema), reduced
    to the record `bootserver provision` stores."""
    device = {
        "id": "6f3c3a8e-1c1b-4e3f-9a3e-6f0b8d9e2a10", "hostname": "m0", "state": "active",
        "ip_addresses": [
            {"address": "139.178.70.33", "address_family": 4, "cidr": 31, "gateway": "139.178.70.32",
             "public": True, "management": True, "netmask": "255.255.255.254", "network": "139.178.70.32"},
            {"address": "2604:1380:4641:c500::3", "address_family": 6, "cidr": 127,
             "gateway": "2604:1380:4641:c500::2", "public": True, "management": True},
            {"address": "10.67.5.131", "address_family": 4, "cidr": 31, "gateway": "10.67.5.130",
             "public": False, "management": True},
        ],
        "network_ports": [
            {"type": "NetworkBondPort", "name": "bond0", "network_type": network_type, "data": {"bonded": True}},
            {"type": "NetworkPort", "name": "eth1", "data": {"mac": "b4:96:91:9f:33:61", "bonded": True},
             "bond": {"name": "bond0"}},
            {"type": "NetworkPort", "name": "eth0", "data": {"mac": "b4:96:91:9f:33:60", "bonded": True},
             "bond": {"name": "bond0"}},
        ],
    }
    assert list(validator("#/components/schemas/Device").iter_errors(device)) == []
    from bootserver.providers.equinix import device_state
    from bootserver.providers.equinix_api import device_from_json

    return json.loads(json.dumps(device_state("p", device_from_json(device))))


@pytest.mark.parametrize("network_type", ["layer3", "hybrid-bonded"])
def test_equinix_network_from_a_device_record(network_type: str) -> None:
    state = equinix_network(equinix_record(network_type), "m0")
    assert dracut_kargs(state, "m0.example.net") == (
        "rd.neednet=1",
        "ifname=nic0:b4:96:91:9f:33:60",
        "ifname=nic1:b4:96:91:9f:33:61",
        "bond=bond0:nic0,nic1:mode=802.3ad,lacp_rate=fast,xmit_hash_policy=layer3+4,miimon=100",
        "ip=139.178.70.33::139.178.70.32:31:m0.example.net:bond0:none",
        "ip=10.67.5.131:::31::bond0:none",
        "ip=[2604:1380:4641:c500::3]::[2604:1380:4641:c500::2]:127::bond0:none",
        "rd.route=10.0.0.0/8:10.67.5.130:bond0",
        "nameserver=147.75.207.207",
        "nameserver=147.75.207.208",
    )


@pytest.mark.parametrize("network_type", ["layer2-bonded", "layer2-individual", "hybrid"])
def test_other_equinix_network_types_are_refused_by_name(network_type: str) -> None:
    with pytest.raises(DeviceRecordError) as info:
        equinix_network(equinix_record(network_type), "m0")
    assert str(info.value) == (f"node m0: device network type {network_type} is not supported by network: "
                               "provider (supported: layer3, hybrid-bonded)")


def test_a_record_from_before_gateways_were_stored_asks_for_a_new_provision() -> None:
    record = equinix_record()
    record.pop("network_ports")
    with pytest.raises(DeviceRecordError, match=r"^node m0: the device record lacks network_ports \(a bond port\); "
                       r"run `bootserver provision m0` again to refresh it$"):
        equinix_network(record, "m0")


def write_record(tmp_path: Path, record: dict[str, Any]) -> None:
    """What `bootserver provision` records: the device in the state store (sqlite in state_dir here)."""
    timeline = Timeline(tmp_path / "state")
    try:
        assert timeline.write_devices({"master-0": record}) == ["master-0"]
    finally:
        timeline.close()


async def test_provider_without_a_device_record_is_exit_1_from_render(reference: Path, tmp_path: Path) -> None:
    path = write_config(tmp_path / "bootserver.yaml", doc(reference, tmp_path, "provider"))
    rc, out, err = await run_cli("render", "ipxe", "master-0", "--config", str(path))
    assert (rc, out) == (1, "")
    assert err == ("bootserver: node master-0: network: provider needs its provisioned device's record, and there "
                   "is none yet; run `bootserver provision master-0` first\n")
    write_record(tmp_path, equinix_record())
    rc, out, err = await run_cli("render", "ipxe", "master-0", "--config", str(path))
    assert rc == 0, err
    assert "bond=bond0:nic0,nic1:mode=802.3ad,lacp_rate=fast,xmit_hash_policy=layer3+4,miimon=100" in out


async def test_a_device_record_file_of_an_older_version_is_moved_into_the_store_once(
        reference: Path, tmp_path: Path) -> None:
    """`db migrate` moves state_dir/nodes/NODE.json in (the file stays, renamed); render then reads it."""
    path = write_config(tmp_path / "bootserver.yaml", doc(reference, tmp_path, "provider"))
    nodes = tmp_path / "state" / "nodes"
    nodes.mkdir(parents=True)
    (nodes / "master-0.json").write_text(json.dumps({"node": "master-0", "device": equinix_record()}))
    rc, out, err = await run_cli("render", "ipxe", "master-0", "--config", str(path))
    assert rc == 1 and "there is none yet" in err  # files are no longer read
    rc, out, err = await run_cli("db", "migrate", "--config", str(path))
    assert rc == 0, err
    store = tmp_path / "state" / "timeline.sqlite3"
    assert out.splitlines()[1:] == [f"{nodes}/master-0.json: device record of node master-0 moved into {store} "
                                    "(file kept as master-0.json.migrated)"]
    assert [p.name for p in nodes.iterdir()] == ["master-0.json.migrated"]
    rc, out, err = await run_cli("render", "ipxe", "master-0", "--config", str(path))
    assert rc == 0, err
    assert "ip=139.178.70.33::139.178.70.32:31:master-0:bond0:none" in out
    rc, out, err = await run_cli("db", "migrate", "--config", str(path))
    assert (rc, out.splitlines()[1:]) == (0, [f"{nodes}: no device record files, nothing to move"])


async def test_serve_moves_device_record_files_in_before_it_listens(reference: Path, tmp_path: Path) -> None:
    import aiohttp
    from support.helpers import free_port
    from support.server import ServerProcess

    port = free_port()
    d = doc(reference, tmp_path, "provider")
    d["server"]["listen"] = f"127.0.0.1:{port}"
    path = write_config(tmp_path / "bootserver.yaml", d)
    nodes = tmp_path / "state" / "nodes"
    nodes.mkdir(parents=True)
    (nodes / "master-0.json").write_text(json.dumps({"node": "master-0", "device": equinix_record()}))
    rc, out, err = await run_cli("url", "master-0", "--config", str(path))
    assert rc == 0, err
    chain = out.splitlines()[0].replace("http://boot.example.net:8080", f"http://127.0.0.1:{port}")
    server = ServerProcess(path, port)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        await server.start(http)
        try:
            async with http.get(chain) as r:
                assert r.status == 200
                assert "ip=139.178.70.33::139.178.70.32:31:master-0:bond0:none" in await r.text()
        finally:
            await server.stop()
    assert [p.name for p in nodes.iterdir()] == ["master-0.json.migrated"]


@pytest.mark.parametrize("text,problem", [
    ("{not json", "not valid JSON: "),
    ('["a"]', "not a JSON object"),
    ('{"node": "master-1", "device": "d-1"}', "device: not a JSON object"),
    ('{"node": "master-9", "device": {}}', "node: 'master-9' is not the node the file is named after ('master-1')"),
])
async def test_a_bad_device_record_file_moves_nothing_and_names_the_file(
        reference: Path, tmp_path: Path, text: str, problem: str) -> None:
    path = write_config(tmp_path / "bootserver.yaml", doc(reference, tmp_path, "provider"))
    nodes = tmp_path / "state" / "nodes"
    nodes.mkdir(parents=True)
    (nodes / "master-0.json").write_text(json.dumps({"node": "master-0", "device": equinix_record()}))
    (nodes / "master-1.json").write_text(text)
    rc, _out, err = await run_cli("db", "migrate", "--config", str(path))
    assert rc == 2 and err.startswith(f"bootserver: {nodes}/master-1.json: {problem}") and len(err.splitlines()) == 1
    assert sorted(p.name for p in nodes.iterdir()) == ["master-0.json", "master-1.json"]
    timeline = Timeline(tmp_path / "state")
    try:
        assert timeline.devices() == {}  # nothing moved, not even the good file's record
    finally:
        timeline.close()


async def test_provider_without_a_device_record_is_503_to_the_device(
    aiohttp_client, reference: Path, tmp_path: Path
) -> None:
    config = parse_config(doc(reference, tmp_path, "provider"), "b.yaml", tmp_path)
    client = await aiohttp_client(create_app(config, fixed_signer()))
    exp = FIXED_NOW + 3600
    url = f"/ipxe/master-0?exp={exp}&sig={sign(FIXED_KEY, 'master-0', '/ipxe/master-0', exp)}"
    r = await client.get(url)
    assert r.status == 503
    body = await r.text()
    assert "run `bootserver provision master-0` first" in body and str(tmp_path) not in body
    write_record(tmp_path, equinix_record("layer2-bonded"))
    r = await client.get(url)
    assert r.status == 503
    assert "device network type layer2-bonded is not supported" in await r.text()
    write_record(tmp_path, equinix_record())
    r = await client.get(url)  # a new device record is read with the node's row: no stale script
    assert r.status == 200
    script = await r.text()
    assert "ip=139.178.70.33::139.178.70.32:31:master-0:bond0:none" in script
    r = await client.get(url)  # a repeat: the same answer (kept per node, issue 43) ...
    assert (r.status, await r.text()) == (200, script)
    write_record(tmp_path, equinix_record("layer2-bonded"))
    r = await client.get(url)  # ... only while the node's device record is the same
    assert r.status == 503


@pytest.mark.parametrize("node,where", [
    ({"provider": "redfish", "redfish": {"address": "https://bmc-0.example"}}, "profiles.metal.network"),
    ({"redfish": {"address": "https://bmc-0.example"}, "network": "provider"}, "nodes.bmc-0.network"),
])
def test_provider_network_on_a_non_equinix_provider_is_refused_naming_the_node(
        node: dict[str, Any], where: str, reference: Path, tmp_path: Path) -> None:
    d = doc(reference, tmp_path, None, network="provider")
    d["nodes"]["bmc-0"] = {"profile": "metal", **node}
    with pytest.raises(ConfigError) as info:
        parse_config(d, "b.yaml", tmp_path)
    assert str(info.value) == (f"b.yaml: {where}: network: provider reads the addresses of an Equinix Metal device "
                               "record, and node bmc-0's provider is redfish; give it an NMState network or dhcp")
    d["nodes"]["bmc-0"]["network"] = "dhcp"
    d["nodes"]["m0"] = {"profile": "metal", "provider": "equinix"}
    parse_config(d, "b.yaml", tmp_path)  # master-0 (no provider) and m0 (equinix) keep network: provider


def test_profile_network_is_the_default_of_its_nodes(reference: Path, tmp_path: Path) -> None:
    d = doc(reference, tmp_path, None, network="provider")
    d["nodes"]["worker-0"] = {"profile": "metal", "network": "dhcp"}
    config = parse_config(d, "b.yaml", tmp_path)
    from bootserver.inventory import inventory
    from bootserver.network import node_kargs

    assert inventory(config)["master-0"].network == "provider"
    assert node_kargs(inventory(config)["worker-0"], None) == ()


def test_an_nmstate_document_from_openshift_agent_config_reads_as_is() -> None:
    # hosts[].networkConfig of an agent-config.yaml (OpenShift docs, "static networking" example)
    text = """
interfaces:
  - name: eno1
    type: ethernet
    state: up
    mac-address: 00:ef:44:21:e6:a5
    ipv4:
      enabled: true
      address:
        - ip: 192.168.111.80
          prefix-length: 23
      dhcp: false
dns-resolver:
  config:
    server:
      - 192.168.111.1
routes:
  config:
    - destination: 0.0.0.0/0
      next-hop-address: 192.168.111.2
      next-hop-interface: eno1
      """
    state = NetworkState.model_validate(yaml.safe_load(text))
    assert dracut_kargs(state, "master-0") == (
        "rd.neednet=1", "ifname=eno1:00:ef:44:21:e6:a5", "ip=192.168.111.80::192.168.111.2:23:master-0:eno1:none",
        "nameserver=192.168.111.1")
