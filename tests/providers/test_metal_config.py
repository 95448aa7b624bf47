"""The ``metal:`` config mappings (checked at config load by the pydantic models of bootserver.config)
and building a node's DeviceSpec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bootserver.config import Config, parse_config
from bootserver.config.equinix_settings import MetalGlobal, MetalSettings
from bootserver.errors import ConfigError, InputError
from bootserver.providers.equinix import build_device_spec, ipxe_userdata, settings_from_options

KEY = "5d8c0c3e-1a2b-4c5d-8e9f-0a1b2c3d4e5f"
URL = "http://boot.example:8080/ipxe/master-0"


def load(reference: Path, node_metal: Any = None, top: Any = None) -> Config:
    """A config with stream ``r``, profile ``p`` and node ``n`` whose ``metal:`` is ``node_metal``."""
    doc: dict[str, Any] = {
        "streams": {"r": {"metadata": str(reference / "rhcos-stream-4.16.json")}},
        "profiles": {"p": {"stream": "r", "install_dev": "/dev/sda"}},
        "nodes": {"n": {"profile": "p", "metal": node_metal}},
    }
    if top is not None:
        doc["metal"] = top
    return parse_config(doc, "c.yaml", reference)


def test_full_settings_mapping(reference):
    s = load(reference, {
        "plan": "c3.small.x86", "metro": "da", "billing_cycle": "hourly", "tags": ["ocp"],
        "spot_instance": True, "spot_price_max": 1, "hardware_reservation_id": "next-available",
        "project_ssh_keys": [KEY], "customdata": {"a": 1}, "always_pxe": True,
    }).nodes["n"].metal
    assert s == MetalSettings(plan="c3.small.x86", metro="da", billing_cycle="hourly", tags=("ocp",),
                              spot_instance=True, spot_price_max=1.0, hardware_reservation_id="next-available",
                              project_ssh_keys=(KEY,), customdata={"a": 1}, always_pxe=True)
    assert type(s.spot_price_max) is float


def test_empty_mapping_and_facility_list(reference):
    assert load(reference, None).nodes["n"].metal == MetalSettings()
    assert load(reference, {}).nodes["n"].metal == MetalSettings()
    assert load(reference, {"plan": None}).nodes["n"].metal == MetalSettings()
    assert load(reference).profiles["p"].metal == MetalSettings()
    assert load(reference, {"facility": ["da11", "any"]}).nodes["n"].metal.facility == ("da11", "any")
    assert load(reference, {"facility": "da11"}).nodes["n"].metal.facility == "da11"


@pytest.mark.parametrize(
    ("value", "keypath", "message"),
    [
        ([], "nodes.n.metal", "expected a mapping, got list []"),
        ({"plann": "x"}, "nodes.n.metal.plann", "unknown key (known: plan, metro, facility, billing_cycle, tags, "
         "spot_instance, spot_price_max, hardware_reservation_id, project_ssh_keys, customdata, always_pxe)"),
        ({"plan": 3}, "nodes.n.metal.plan", "expected a string, got int 3"),
        ({"plan": ""}, "nodes.n.metal.plan", "must be a non-empty string"),
        ({"plan": "c3 small"}, "nodes.n.metal.plan", "must not contain whitespace: 'c3 small'"),
        ({"metro": "da", "facility": "da11"}, "nodes.n.metal.facility", "set metro or facility (deprecated), not both"),
        ({"facility": []}, "nodes.n.metal.facility", "must name at least one facility"),
        ({"facility": 3}, "nodes.n.metal.facility", "expected a string, got int 3"),
        ({"facility": ["da11", "s v"]}, "nodes.n.metal.facility[1]", "must not contain whitespace: 's v'"),
        ({"billing_cycle": "weekly"}, "nodes.n.metal.billing_cycle",
         "input should be 'hourly', 'daily', 'monthly' or 'yearly', got 'weekly'"),
        ({"tags": "ocp"}, "nodes.n.metal.tags", "expected a list, got str 'ocp'"),
        ({"tags": ["ok", 1]}, "nodes.n.metal.tags[1]", "expected a string, got int 1"),
        ({"spot_instance": "yes"}, "nodes.n.metal.spot_instance", "expected true or false, got str 'yes'"),
        ({"spot_price_max": True}, "nodes.n.metal.spot_price_max", "expected a number, got bool True"),
        ({"spot_price_max": float("inf")}, "nodes.n.metal.spot_price_max", "input should be a finite number"),
        ({"spot_price_max": -1}, "nodes.n.metal.spot_price_max", "must not be negative"),
        ({"spot_instance": False, "spot_price_max": 1}, "nodes.n.metal.spot_price_max", "needs spot_instance: true"),
        ({"project_ssh_keys": ["nope"]}, "nodes.n.metal.project_ssh_keys[0]", "must be a UUID: 'nope'"),
        ({"customdata": [1]}, "nodes.n.metal.customdata", "expected a mapping, got list [1]"),
        ({"always_pxe": 1}, "nodes.n.metal.always_pxe", "expected true or false, got int 1"),
    ],
)
def test_bad_settings_name_file_and_key(reference, value, keypath, message):
    with pytest.raises(ConfigError) as info:
        load(reference, value)
    assert info.value.keypath == keypath
    assert info.value.message == message
    assert str(info.value) == f"c.yaml: {keypath}: {message}"
    assert info.value.exit_code == 2


def test_profile_settings_are_checked_too(reference):
    doc = {"streams": {"r": {"metadata": str(reference / "rhcos-stream-4.16.json")}},
           "profiles": {"p": {"stream": "r", "install_dev": "/dev/sda", "metal": {"billing_cycle": 1}}}}
    with pytest.raises(ConfigError) as info:
        parse_config(doc, "c.yaml", reference)
    assert str(info.value) == "c.yaml: profiles.p.metal.billing_cycle: input should be 'hourly', 'daily', " \
                              "'monthly' or 'yearly', got 1"


def test_node_overrides_profile_and_location_is_one_unit():
    profile = MetalSettings(plan="c3.small.x86", metro="da", tags=("a",), billing_cycle="hourly")
    node = MetalSettings(facility="sv15", tags=("b",))
    merged = node.merged_over(profile)
    assert merged == MetalSettings(plan="c3.small.x86", facility="sv15", tags=("b",), billing_cycle="hourly")
    assert MetalSettings(metro="ny").merged_over(merged).facility is None


def test_global_mapping(reference):
    assert load(reference).metal == MetalGlobal()
    assert load(reference, top={}).metal == MetalGlobal(api_url=None, project=None, tag="bootserver")
    g = load(reference, top={"api_url": "http://127.0.0.1:9/metal/v1/", "project": KEY, "tag": "bs-prod"}).metal
    assert g == MetalGlobal(api_url="http://127.0.0.1:9/metal/v1", project=KEY, tag="bs-prod")


@pytest.mark.parametrize(
    ("value", "keypath", "message"),
    [
        ({"api_url": "ftp://x"}, "metal.api_url", "must be an http(s) URL: 'ftp://x'"),
        ({"project": "my-project"}, "metal.project", "must be a project UUID: 'my-project'"),
        ({"tag": ""}, "metal.tag", "must be a non-empty string"),
        ({"tag": "a b"}, "metal.tag", "must not contain whitespace: 'a b'"),
        ({"token": "x"}, "metal.token", "unknown key (known: api_url, project, tag)"),
        ("x", "metal", "expected a mapping, got str 'x'"),
    ],
)
def test_bad_global(reference, value, keypath, message):
    with pytest.raises(ConfigError) as info:
        load(reference, top=value)
    assert str(info.value) == f"c.yaml: {keypath}: {message}"


def test_command_line_settings_are_checked_and_name_the_option():
    assert settings_from_options(plan="c3.small.x86", metro=None) == MetalSettings(plan="c3.small.x86")
    with pytest.raises(InputError) as info:
        settings_from_options(plan="c3 small")
    assert str(info.value) == "--plan: must not contain whitespace: 'c3 small'"
    with pytest.raises(InputError, match=r"^--hardware-reservation-id: must be a non-empty string$"):
        settings_from_options(hardware_reservation_id="")


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
    from bootserver.inventory import inventory
    from bootserver.providers.equinix import node_settings

    cfg = parse_config({
        "streams": {"r": {"metadata": str(reference / "rhcos-stream-4.16.json")}},
        "profiles": {"install": {"stream": "r", "install_dev": "/dev/sda"},
                     "once-off": {"stream": "r", "install_dev": "/dev/sda", "boot_once": False},
                     "live": {"stream": "r", "mode": "live"}},
        "nodes": {"a": {"profile": "install"}, "b": {"profile": "once-off"}, "c": {"profile": "live"},
                  "d": {"profile": "install", "metal": {"always_pxe": False}}},
    }, "t.yaml", tmp_path)
    assert [node_settings(inventory(cfg)[n]).always_pxe for n in "abcd"] == [True, None, None, False]


def test_a_nodes_platform_comes_from_the_registry_without_importing_a_provider(reference) -> None:
    """``metal`` for a node with no provider (since issue 37; it was Equinix's ``packet``) and for Redfish
    nodes, ``packet`` for Equinix nodes only, a profile's ``platform_id`` first; read from the registry,
    so no provider module (sushy, requests) is loaded."""
    import subprocess
    import sys

    program = f"""
import sys
from pathlib import Path
from bootserver.config import parse_config
from bootserver.inventory import inventory
doc = {{"streams": {{"r": {{"metadata": "rhcos-stream-4.16.json"}}}},
       "profiles": {{"p": {{"stream": "r", "install_dev": "/dev/sda"}},
                    "bmc": {{"stream": "r", "install_dev": "/dev/sda", "provider": "redfish",
                             "redfish": {{"address": "http://127.0.0.1:1", "username": "u",
                                         "password_env": "P"}}}},
                    "own": {{"stream": "r", "install_dev": "/dev/sda", "platform_id": "packet"}},
                    "eq": {{"stream": "r", "install_dev": "/dev/sda", "provider": "equinix"}}}},
       "nodes": {{"n": {{"profile": "p"}}, "b": {{"profile": "bmc", "redfish": {{"system": "/redfish/v1/Systems/1"}}}},
                 "q": {{"profile": "own"}}, "e": {{"profile": "eq"}}}}}}
config = parse_config(doc, "c.yaml", Path({str(reference)!r}))
print(*(inventory(config)[n].platform for n in ("n", "b", "q", "e")))
print(sorted(m for m in sys.modules if m.startswith("bootserver.providers.") and m.split(".")[-1] in
             ("equinix", "redfish")))
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["metal metal packet packet", "[]"]
