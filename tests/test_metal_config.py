"""Parsing of the ``metal:`` config mappings and building a node's DeviceSpec."""

from __future__ import annotations

import pytest

from bootserver.errors import ConfigError, InputError
from bootserver.metal import (
    MetalGlobal,
    MetalSettings,
    build_device_spec,
    ipxe_userdata,
    parse_metal_global,
    parse_metal_settings,
)

KEY = "5d8c0c3e-1a2b-4c5d-8e9f-0a1b2c3d4e5f"
URL = "http://boot.example:8080/ipxe/master-0"


def test_full_settings_mapping():
    s = parse_metal_settings("c.yaml", "profiles.master.metal", {
        "plan": "c3.small.x86", "metro": "da", "billing_cycle": "hourly", "tags": ["ocp"],
        "spot_instance": True, "spot_price_max": 1, "hardware_reservation_id": "next-available",
        "project_ssh_keys": [KEY], "customdata": {"a": 1}, "always_pxe": True,
    })
    assert s == MetalSettings(plan="c3.small.x86", metro="da", billing_cycle="hourly", tags=("ocp",),
                              spot_instance=True, spot_price_max=1.0, hardware_reservation_id="next-available",
                              project_ssh_keys=(KEY,), customdata={"a": 1}, always_pxe=True)


def test_empty_mapping_and_facility_list():
    assert parse_metal_settings("c.yaml", "nodes.n.metal", None) == MetalSettings()
    assert parse_metal_settings("c.yaml", "k", {"facility": ["da11", "any"]}).facility == ("da11", "any")
    assert parse_metal_settings("c.yaml", "k", {"facility": "da11"}).facility == "da11"


@pytest.mark.parametrize(
    ("value", "keypath", "message"),
    [
        ([], "nodes.n.metal", "must be a mapping"),
        ({"plann": "x"}, "nodes.n.metal.plann", "unknown key"),
        ({"plan": 3}, "nodes.n.metal.plan", "must be a non-empty string"),
        ({"plan": "c3 small"}, "nodes.n.metal.plan", "must not contain whitespace"),
        ({"metro": "da", "facility": "da11"}, "nodes.n.metal.facility", "not both"),
        ({"facility": []}, "nodes.n.metal.facility", "at least one"),
        ({"billing_cycle": "weekly"}, "nodes.n.metal.billing_cycle", "must be one of hourly, daily, monthly, yearly"),
        ({"tags": "ocp"}, "nodes.n.metal.tags", "must be a list of strings"),
        ({"tags": ["ok", 1]}, "nodes.n.metal.tags[1]", "must be a non-empty string"),
        ({"spot_instance": "yes"}, "nodes.n.metal.spot_instance", "must be true or false"),
        ({"spot_price_max": True}, "nodes.n.metal.spot_price_max", "must be a number"),
        ({"spot_price_max": -1}, "nodes.n.metal.spot_price_max", "must not be negative"),
        ({"spot_instance": False, "spot_price_max": 1}, "nodes.n.metal.spot_price_max", "needs spot_instance: true"),
        ({"project_ssh_keys": ["nope"]}, "nodes.n.metal.project_ssh_keys[0]", "must be a UUID"),
        ({"customdata": [1]}, "nodes.n.metal.customdata", "must be a mapping"),
        ({"always_pxe": 1}, "nodes.n.metal.always_pxe", "must be true or false"),
    ],
)
def test_bad_settings_name_file_and_key(value, keypath, message):
    with pytest.raises(ConfigError) as info:
        parse_metal_settings("c.yaml", "nodes.n.metal", value)
    assert info.value.keypath == keypath
    assert message in info.value.message
    assert str(info.value).startswith(f"c.yaml: {keypath}: ")
    assert info.value.exit_code == 2


def test_node_overrides_profile_and_location_is_one_unit():
    profile = MetalSettings(plan="c3.small.x86", metro="da", tags=("a",), billing_cycle="hourly")
    node = MetalSettings(facility="sv15", tags=("b",))
    merged = node.merged_over(profile)
    assert merged == MetalSettings(plan="c3.small.x86", facility="sv15", tags=("b",), billing_cycle="hourly")
    assert MetalSettings(metro="ny").merged_over(merged).facility is None


def test_global_mapping():
    assert parse_metal_global("c.yaml", "metal", None) == MetalGlobal()
    g = parse_metal_global("c.yaml", "metal", {"api_url": "http://127.0.0.1:9/metal/v1/",
                                                "project": KEY, "tag": "bs-prod"})
    assert g == MetalGlobal(api_url="http://127.0.0.1:9/metal/v1", project=KEY, tag="bs-prod")


@pytest.mark.parametrize(
    ("value", "keypath"),
    [
        ({"api_url": "ftp://x"}, "metal.api_url"),
        ({"project": "my-project"}, "metal.project"),
        ({"tag": ""}, "metal.tag"),
        ({"token": "x"}, "metal.token"),
        ("x", "metal"),
    ],
)
def test_bad_global(value, keypath):
    with pytest.raises(ConfigError) as info:
        parse_metal_global("c.yaml", "metal", value)
    assert info.value.keypath == keypath


def test_device_spec_from_settings():
    settings = MetalSettings(plan="c3.small.x86", metro="da", tags=("ocp", "bootserver"), always_pxe=True)
    spec = build_device_spec("master-0", settings, URL, managed_tag="bootserver")
    assert spec.ipxe_script_url == URL and spec.userdata is None
    assert spec.tags == ("bootserver", "ocp")
    assert spec.billing_cycle == "hourly"
    assert spec.operating_system == "custom_ipxe"
    assert spec.always_pxe is True
    spec = build_device_spec("master-0", settings, URL, via="userdata")
    assert spec.userdata == f"#!ipxe\nchain --autofree {URL}\n" and spec.ipxe_script_url is None


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (MetalSettings(metro="da"), "no Equinix Metal plan"),
        (MetalSettings(plan="p"), "no Equinix Metal location"),
        (MetalSettings(plan="p", metro="da", spot_price_max=1.0), "spot_price_max needs"),
    ],
)
def test_device_spec_needs_plan_and_location(settings, message):
    with pytest.raises(InputError, match=message):
        build_device_spec("master-0", settings, URL, node="master-0")


@pytest.mark.parametrize("url", ["ftp://x/y", "http://x/${net0/mac}", "http://x/a b", "http://x/a\nchain http://evil"])
def test_userdata_refuses_unsafe_urls(url):
    with pytest.raises(InputError):
        ipxe_userdata(url)


def test_always_pxe_follows_boot_once_unless_set(tmp_path, reference) -> None:
    from bootserver.config import parse_config
    from bootserver.metal import node_settings

    cfg = parse_config({
        "streams": {"r": {"metadata": str(reference / "rhcos-stream-4.16.json")}},
        "profiles": {"install": {"stream": "r", "install_dev": "/dev/sda"},
                     "once-off": {"stream": "r", "install_dev": "/dev/sda", "boot_once": False},
                     "live": {"stream": "r", "mode": "live"}},
        "nodes": {"a": {"profile": "install"}, "b": {"profile": "once-off"}, "c": {"profile": "live"},
                  "d": {"profile": "install", "metal": {"always_pxe": False}}},
    }, "t.yaml", tmp_path)
    assert [node_settings(cfg, n).always_pxe for n in "abcd"] == [True, None, None, False]
