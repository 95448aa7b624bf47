# -*- coding: utf-8 -*-
# Copyright: bootserver developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What the node module sends for a task against a node read: the merge patch, the password rule, the diff."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.bootserver.fleet.plugins.module_utils.nodes import NODE_ARGS, plan, replacing_patch


def task(**keys):
    """Module params as AnsibleModule gives them: every node option, None where the task is silent."""
    params = dict((k, None) for k in NODE_ARGS)
    params.update(keys)
    return params


NODE = {"name": "w0", "profile": "fcos", "mac": ["52:54:00:12:34:56"], "generation": 4, "source": "store",
        "stage": "new", "since": None,
        "redfish": {"address": "https://bmc.example", "username": "admin", "password_set": True}}


def test_create_sends_the_keys_given_and_no_defaults():
    body, diff = plan(None, task(profile="fcos", mac=["52-54-00-AA-BB-CC"], selectable=False,
                                 redfish=dict(address="https://bmc.example", password="s3cret", username=None)),
                      "on_create")
    assert body == {"profile": "fcos", "mac": ["52:54:00:aa:bb:cc"],
                    "redfish": {"address": "https://bmc.example", "password": "s3cret"}}
    assert diff["before"] == {}
    assert diff["after"]["redfish"] == {"address": "https://bmc.example", "password_set": True}
    assert "s3cret" not in repr(diff)


def test_same_keys_other_spelling_is_no_change():
    body, diff = plan(NODE, task(profile="fcos", mac=["52:54:00:12:34:56".upper()], selectable=False,
                                 redfish=dict(address="https://bmc.example", password="s3cret")), "on_create")
    assert body == {}
    assert diff["before"] == diff["after"]


def test_password_set_is_sent_only_when_none_is_set_unless_always():
    given = task(redfish=dict(password="s3cret"))
    assert plan(NODE, given, "on_create")[0] == {}
    assert plan(NODE, given, "always")[0] == {"redfish": {"password": "s3cret"}}
    unset = dict(NODE, redfish={"address": "https://bmc.example"})
    assert plan(unset, given, "on_create")[0] == {"redfish": {"password": "s3cret"}}


def test_one_changed_key_is_the_whole_patch():
    body, diff = plan(NODE, task(hostname="w0.example", redfish=dict(username="root")), "on_create")
    assert body == {"hostname": "w0.example", "redfish": {"username": "root"}}
    assert diff["before"].get("hostname") is None and diff["after"]["hostname"] == "w0.example"


def test_addresses_compare_as_networks():
    node = dict(NODE, addresses=["10.0.0.5/32"])
    assert plan(node, task(addresses=["10.0.0.5"]), "on_create")[0] == {}
    assert plan(node, task(addresses=["10.0.0.6"]), "on_create")[0] == {"addresses": ["10.0.0.6/32"]}


@pytest.mark.parametrize("before, after, patch", [
    ({"a": 1}, {"a": 1}, {}),
    ({"a": 1, "b": 2}, {"a": 1}, {"b": None}),
    ({"n": {"x": 1, "y": 2}}, {"n": {"x": 1}}, {"n": {"y": None}}),
    ({"n": {"x": [1, 2]}}, {"n": {"x": [2]}}, {"n": {"x": [2]}}),
    ({"n": "dhcp"}, {"n": {"interfaces": []}}, {"n": {"interfaces": []}}),
])
def test_replacing_patch_gives_exactly_the_document(before, after, patch):
    assert replacing_patch(before, after) == patch


def test_network_document_is_replaced_whole():
    node = dict(NODE, network={"interfaces": [{"name": "eno1"}], "dns-resolver": {"config": {"server": ["10.0.0.1"]}}})
    body = plan(node, task(network={"interfaces": [{"name": "eno2"}]}), "on_create")[0]
    assert body == {"network": {"interfaces": [{"name": "eno2"}], "dns-resolver": None}}
