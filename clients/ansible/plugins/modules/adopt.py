#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: bootserver developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: adopt
short_description: Make a discovered machine a bootserver node
version_added: 0.1.0
description:
  - A machine that network-booted and matched no node is listed as discovered (C(GET /api/v1/discovered)); this
    module makes it a node of a profile (C(POST /api/v1/discovered/MAC/adopt)), with the MAC and SMBIOS UUID it
    reported.
  - Idempotent by name. A node of that name that has the MAC already is left as it is; one that has not fails
    the task.
author: bootserver developers (@bootserver)
extends_documentation_fragment:
  - bootserver.fleet.connection
attributes:
  check_mode:
    support: full
    description: Reports whether the machine would be adopted.
  diff_mode:
    support: none
    description: Nothing to compare.
options:
  mac:
    description: The discovered machine's MAC address.
    type: str
    required: true
  name:
    description: The new node's name.
    type: str
    required: true
  profile:
    description: The profile the node boots.
    type: str
    required: true
'''

EXAMPLES = r'''
- name: Adopt the machine that booted from 52:54:00:12:34:56
  bootserver.fleet.adopt:
    url: http://127.0.0.1:8081
    token: "{{ bootserver_token }}"
    mac: "52:54:00:12:34:56"
    name: worker-1
    profile: fcos-install
'''

RETURN = r'''
node:
  description: The node (the new one, or the one there already).
  returned: success, not in check mode for a new node
  type: dict
'''

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bootserver.fleet.plugins.module_utils.api import CONNECTION_ARGS, ApiError, FleetClient


def main():
    argument_spec = dict(
        mac=dict(type="str", required=True),
        name=dict(type="str", required=True),
        profile=dict(type="str", required=True),
    )
    argument_spec.update(CONNECTION_ARGS)
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    p = module.params
    mac = p["mac"].strip().lower().replace("-", ":")
    client = FleetClient.from_module(module)
    try:
        node = client.get_node(p["name"])
        if node is not None:
            if mac in [m.lower() for m in node.get("mac") or []]:
                module.exit_json(changed=False, node=node)
            module.fail_json(msg="node %s exists and has not MAC %s" % (p["name"], mac))
        if module.check_mode:
            module.exit_json(changed=True)
        node = client.adopt(mac, p["name"], p["profile"])
    except ApiError as e:
        module.fail_json(msg=str(e), status=e.status, problem=e.problem)
    module.exit_json(changed=True, node=node)


if __name__ == "__main__":
    main()
