#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: bootserver developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: node_info
short_description: Read one or every bootserver node, with its stage
version_added: 0.1.0
description:
  - Reads nodes through the fleet API (C(GET /api/v1/nodes), C(GET /api/v1/nodes/NAME)), each with its boot stage
    (C(stage)) and since when (C(since)).
author: bootserver developers (@bootserver)
extends_documentation_fragment:
  - bootserver.fleet.connection
attributes:
  check_mode:
    support: full
    description: Reads only.
  diff_mode:
    support: none
    description: Nothing to compare.
options:
  name:
    description: One node's name; not set, every node (filtered by the options below).
    type: str
  profile:
    description: Only the nodes of this profile.
    type: str
  source:
    description: Only the nodes from this source (V(store), or V(file:PATH)).
    type: str
  stage:
    description: Only the nodes at this stage.
    type: str
  mac:
    description: Only the node with this MAC address.
    type: str
  timeline:
    description: With O(name), also the node's timeline (its events, newest last).
    type: bool
    default: false
'''

EXAMPLES = r'''
- name: Every node at stage up
  bootserver.fleet.node_info:
    url: http://127.0.0.1:8081
    token: "{{ bootserver_token }}"
    stage: up
  register: up

- name: One node and its events
  bootserver.fleet.node_info:
    name: worker-0
    timeline: true
  register: worker
'''

RETURN = r'''
nodes:
  description: The nodes read (one or none with O(name)), as the API shows them, passwords as C(password_set).
  returned: always
  type: list
  elements: dict
  sample: [{"name": "worker-0", "profile": "fcos-install", "stage": "up", "generation": 4, "source": "store"}]
timeline:
  description: The node's events, with O(timeline).
  returned: with O(name) and O(timeline), when the node exists
  type: list
  elements: dict
'''

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bootserver.fleet.plugins.module_utils.api import CONNECTION_ARGS, ApiError, FleetClient


def main():
    argument_spec = dict(
        name=dict(type="str"),
        profile=dict(type="str"),
        source=dict(type="str"),
        stage=dict(type="str"),
        mac=dict(type="str"),
        timeline=dict(type="bool", default=False),
    )
    argument_spec.update(CONNECTION_ARGS)
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    p = module.params
    client = FleetClient.from_module(module)
    result = dict(changed=False)
    try:
        if p["name"]:
            node = client.get_node(p["name"])
            result["nodes"] = [node] if node else []
            if node and p["timeline"]:
                body = client.call("GET", client.node_path(p["name"]) + "/timeline")[1] or {}
                result["timeline"] = body.get("items") or []
        else:
            result["nodes"] = client.list_nodes(profile=p["profile"], source=p["source"], stage=p["stage"],
                                                mac=p["mac"])
    except ApiError as e:
        module.fail_json(msg=str(e), status=e.status, problem=e.problem)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
