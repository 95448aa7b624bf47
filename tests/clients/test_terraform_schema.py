"""The Terraform provider's values between Terraform's form and the API's (clients/terraform,
bootserver_terraform.schema): what a plan compares must mean what the server means, or every plan after an
apply would show a change of spelling; a password is never taken from the API."""

from __future__ import annotations

from typing import Any

import pytest
from bootserver_terraform.schema import NESTED, PLAIN, from_api, replacing_patch, same, tf_name, to_api


def state(**keys: Any) -> dict[str, Any]:
    """A Terraform value of bootserver_node: every attribute, null where not given."""
    value: dict[str, Any] = {tf_name(k): None for k in PLAIN} | dict.fromkeys(NESTED)
    value |= {"name": "n0", "generation": None, "source": None}
    return value | keys


@pytest.mark.parametrize("key, configured, served", [
    ("mac", ["52-54-00-AA-00-01"], ["52:54:00:aa:00:01"]),
    ("addresses", ["10.0.0.5"], ["10.0.0.5/32"]),
    ("selectable", False, None),
    ("mac", [], None),
    ("uuid", "4C4C4544-0042-3510-8054-B2C04F4E4D32", "4c4c4544-0042-3510-8054-b2c04f4e4d32"),
    ("network", '{"interfaces":[{"name":"eno1","type":"ethernet"}]}',
     {"interfaces": [{"type": "ethernet", "name": "eno1"}]}),
    ("network", "interfaces:\n- name: eno1\n  type: ethernet\n",
     {"interfaces": [{"name": "eno1", "type": "ethernet"}]}),
])
def test_the_same_value_in_another_spelling_is_no_change(key: str, configured: Any, served: Any) -> None:
    assert same(key, configured, served)
    prior = state(**{tf_name(key): configured})
    assert from_api({"name": "n0", "profile": "p", key: served} if served is not None else {"name": "n0"},
                    prior)[tf_name(key)] == configured


def test_a_changed_value_is_read_back_as_the_server_has_it() -> None:
    prior = state(hostname="a.example", mac=["52:54:00:aa:00:01"], network="dhcp")
    read = from_api({"name": "n0", "hostname": "b.example", "mac": ["52:54:00:aa:00:02"],
                     "network": {"interfaces": []}, "selectable": True}, prior)
    assert read["hostname"] == "b.example" and read["mac"] == ["52:54:00:aa:00:02"]
    assert read["network"] == '{"interfaces":[]}' and read["selectable"] is True


def test_the_password_is_never_read_back_only_whether_one_is_set() -> None:
    prior = state(redfish=dict.fromkeys(NESTED["redfish"]) | {"address": "https://bmc", "password": "pw"})
    kept = from_api({"name": "n0", "redfish": {"address": "https://bmc", "password_set": True}}, prior)
    assert kept["redfish"]["password"] == "pw"
    lost = from_api({"name": "n0", "redfish": {"address": "https://bmc"}}, prior)
    assert lost["redfish"]["password"] is None  # the next plan shows the configuration's password as a change
    imported = from_api({"name": "n0", "redfish": {"address": "https://bmc", "password_set": True}}, None)
    assert imported["redfish"]["password"] is None and imported["redfish"]["address"] == "https://bmc"


def test_the_body_and_the_patch_carry_only_what_the_configuration_says() -> None:
    before = state(profile="p", hostname="a", redfish=dict.fromkeys(NESTED["redfish"]) | {
        "address": "https://bmc", "password": "pw", "verify_tls": "false"}, machine_provider="redfish")
    after = dict(before, hostname=None, network='{"interfaces":[]}',
                 redfish=dict(before["redfish"], username="admin"))
    body = to_api(before)
    assert body == {"profile": "p", "hostname": "a", "provider": "redfish",
                    "redfish": {"address": "https://bmc", "password": "pw", "verify_tls": False}}
    assert replacing_patch(body, to_api(after)) == {"hostname": None, "network": {"interfaces": []},
                                                    "redfish": {"username": "admin"}}
