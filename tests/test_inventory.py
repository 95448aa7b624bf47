"""bootserver.inventory and bootserver.config.resolved: a node resolved once per loaded config (its setting,
else its profile's, else the default) and which node a request concerns. Pure: no store, no server."""

from __future__ import annotations

import gc
import ipaddress
from pathlib import Path

import pytest
from support.configs import config_doc, load, master_profile

from bootserver.errors import UnknownNodeError
from bootserver.inventory import address_allowed, inventory

MAC = "52:54:00:12:34:56"


def fleet(tmp_path: Path):
    return load(config_doc(
        profiles={"master": master_profile(secure_boot=True, network="dhcp", console="ttyS0,115200"),
                  "bmc": master_profile(provider="redfish", redfish={"address": "https://bmc.example",
                                                                     "username": "root",
                                                                     "boot_source": "pxe"}),
                  "live": {"stream": "rhcos-4.16", "mode": "live"}},
        nodes={"master-0": {"profile": "master", "mac": ["52-54-00-12-34-56"], "secure_boot": False,
                            "uuid": "4C4C4544-0000-0000-0000-000000000001", "hostname": "m0.example.net"},
               "master-1": {"profile": "master", "addresses": ["10.0.0.0/24"]},
               "bmc-0": {"profile": "bmc", "redfish": {"boot_source": "virtual-media",
                                                       "system": "/redfish/v1/Systems/1"}},
               "any": {"profile": "live", "default": True, "selectable": True}}), tmp_path)


def test_a_node_setting_wins_over_its_profiles_which_wins_over_the_default(tmp_path: Path) -> None:
    nodes = inventory(fleet(tmp_path))
    m0, m1, bmc, live = nodes["master-0"], nodes["master-1"], nodes["bmc-0"], nodes["any"]
    assert (m0.secure_boot, m1.secure_boot, live.secure_boot) == (False, True, False)
    assert (m0.hostname, m1.hostname) == ("m0.example.net", "master-1")
    assert (m0.console, live.console) == ("ttyS0,115200", None)
    assert (m0.network, m0.network_key) == ("dhcp", "profiles.master.network")
    assert (m0.provider, m0.platform, m0.settings) == (None, "metal", None)
    # the provider's settings: the node's keys over its profile's
    assert (bmc.provider, bmc.platform) == ("redfish", "metal")
    assert (bmc.settings.address, bmc.settings.boot_source, bmc.settings.system) == (
        "https://bmc.example", "virtual-media", "/redfish/v1/Systems/1")
    assert bmc.boots_image and not m0.boots_image
    assert (m0.stream, m0.arch, m0.mode, m0.boots_once, live.boots_once) == ("rhcos-4.16", "x86_64", "install",
                                                                             True, False)
    assert m0.source == "file:t.yaml" and m0.mac == (MAC,)
    with pytest.raises(AttributeError):
        m0.stream = "other"  # type: ignore[misc]  # frozen


def test_a_config_is_resolved_once(tmp_path: Path) -> None:
    config = fleet(tmp_path)
    assert inventory(config) is inventory(config)
    assert inventory(config)["master-0"] is inventory(config)["master-0"]
    other = fleet(tmp_path)
    assert inventory(other) is not inventory(config) and inventory(other)["master-0"] == inventory(config)["master-0"]
    del other
    gc.collect()
    assert inventory(config)["any"].default  # the first config's generation stays while it lives


def test_lookups_by_selector(tmp_path: Path) -> None:
    nodes = inventory(fleet(tmp_path))
    assert nodes.find(mac="52:54:00:12:34:56").name == "master-0"
    assert nodes.find(mac="52-54-00-12-34-56".upper()).name == "master-0"
    assert nodes.find(uuid="4c4c4544-0000-0000-0000-000000000001").name == "master-0"
    assert nodes.find(hostname="M0.EXAMPLE.NET").name == "master-0"
    assert nodes.by_mac("not a mac") is None
    assert [n.name for n in nodes.of_provider("redfish")] == ["bmc-0"]
    with pytest.raises(UnknownNodeError, match=r"no node 'nope' in t\.yaml"):
        nodes.find(name="nope")
    with pytest.raises(UnknownNodeError, match=r"no node with mac 52:54:00:00:00:99 in t\.yaml"):
        nodes.find(mac="52:54:00:00:00:99")


def test_the_generic_entry_hands_out_a_node_only_where_it_may(tmp_path: Path) -> None:
    nodes = inventory(fleet(tmp_path))
    inside, outside = ipaddress.ip_address("10.0.0.5"), ipaddress.ip_address("192.0.2.1")
    assert address_allowed(nodes["master-1"], inside) and not address_allowed(nodes["master-1"], outside)
    assert address_allowed(nodes["master-1"], ipaddress.ip_address("::ffff:10.0.0.5"))
    assert not address_allowed(nodes["master-1"], None) and address_allowed(nodes["master-0"], None)
    # master-0 has no addresses and is not selectable: the default node instead, and the same public text
    assert nodes.select(inside, mac=MAC).name == "any"
    assert nodes.select(outside, hostname="master-1").name == "any"
    assert nodes.select(inside, hostname="master-1").name == "master-1"
    assert nodes.default is nodes["any"]


def test_without_a_default_node_both_refusals_read_alike(tmp_path: Path) -> None:
    nodes = inventory(load(config_doc(nodes={"master-0": {"profile": "master", "mac": MAC}}), tmp_path))
    with pytest.raises(UnknownNodeError) as known:
        nodes.select(None, mac=MAC)
    with pytest.raises(UnknownNodeError) as unknown:
        nodes.select(None, mac="52:54:00:00:00:99")
    assert known.value.public == f"no node to boot for mac {MAC} from this address"
    assert unknown.value.public == "no node to boot for mac 52:54:00:00:00:99 from this address"
    assert "not selectable" in str(known.value) and "no node with mac" in str(unknown.value)
