#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: bootserver developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: node_action
short_description: Reinstall, provision or deprovision a bootserver node, and wait for its stage
version_added: 0.1.0
description:
  - Starts an action on a node through the fleet API (C(POST /api/v1/nodes/NAME/actions/ACTION)) and, with
    O(wait_for), waits until the node reaches that stage (docs/design.md, "Stage order").
  - V(reinstall) marks the node so that its next network boot installs again; V(provision) has its provider
    (Redfish, IPMI, Equinix Metal) boot it from the network; V(deprovision) powers it off or deletes its device.
  - An action is never idempotent, so the task always reports a change.
author: bootserver developers (@bootserver)
extends_documentation_fragment:
  - bootserver.fleet.connection
attributes:
  check_mode:
    support: partial
    details: Reports a change without starting the action (and without waiting), since every action is one.
    description: Reports the change without starting the action.
  diff_mode:
    support: none
    description: Nothing to compare.
options:
  name:
    description: The node's name.
    type: str
    required: true
  action:
    description: What to do.
    type: str
    required: true
    choices: [reinstall, provision, deprovision]
  wait_for:
    description:
      - A stage to wait for after the action; the task succeeds once the node's stage has moved since the action
        and is that stage or a later one (V(up) counts as V(installed)).
      - Not set, the task returns once the server accepted the action.
    type: str
    choices: [new, reinstall, dhcp, tftp, ipxe, kernel, initramfs, rootfs, installing, ignition, installed,
              running, unconfirmed, up]
  timeout:
    description: Seconds to wait for O(wait_for) before the task fails.
    type: int
    default: 1800
  poll_interval:
    description: Seconds between two reads of the node's stage while waiting.
    type: float
    default: 2
'''

EXAMPLES = r'''
- name: Reinstall worker-0 and wait until the installed system checked in
  bootserver.fleet.node_action:
    url: http://127.0.0.1:8081
    token: "{{ bootserver_token }}"
    name: worker-0
    action: reinstall
    wait_for: up
    timeout: 3600
'''

RETURN = r'''
action:
  description: The API's description of the action it accepted.
  returned: success, not in check mode
  type: dict
node:
  description: The node as read last (after the wait, when O(wait_for) is set).
  returned: success, not in check mode
  type: dict
waited:
  description: Seconds spent waiting for O(wait_for).
  returned: when O(wait_for) is set
  type: float
'''

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bootserver.fleet.plugins.module_utils.api import (
    CONNECTION_ARGS, STAGES, ApiError, FleetClient)

#: How far into its round each stage is (bootserver.timeline.STAGE_RANK).
RANK = {"new": 0, "reinstall": 0, "dhcp": 1, "tftp": 2, "ipxe": 3, "kernel": 4, "initramfs": 5, "rootfs": 6,
        "installing": 7, "ignition": 7, "installed": 8, "running": 8, "unconfirmed": 8, "up": 9}


def reached(node, before, target, moved):
    """Whether ``node`` reached ``target``: its stage has changed since the action (``moved``: seen
    below the target since, or its ``since`` differs from ``before``'s) and ranks at the target or later."""
    stage = node.get("stage")
    if stage is None:
        return False
    if not moved and (node.get("since") == before.get("since") and stage == before.get("stage")):
        return False
    return stage == target or RANK.get(stage, -1) >= RANK[target]


def main():
    argument_spec = dict(
        name=dict(type="str", required=True),
        action=dict(type="str", required=True, choices=["reinstall", "provision", "deprovision"]),
        wait_for=dict(type="str", choices=list(STAGES)),
        timeout=dict(type="int", default=1800),
        poll_interval=dict(type="float", default=2.0),
    )
    argument_spec.update(CONNECTION_ARGS)
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    p = module.params
    client = FleetClient.from_module(module)
    if module.check_mode:
        module.exit_json(changed=True)
    try:
        before = client.get_node(p["name"])
        if before is None:
            module.fail_json(msg="node %s does not exist" % p["name"], status=404)
        accepted = client.action(p["name"], p["action"])
        if not p["wait_for"]:
            module.exit_json(changed=True, action=accepted, node=client.get_node(p["name"]) or {})
        target, start, moved = p["wait_for"], time.time(), False
        deadline = start + p["timeout"]
        while True:
            node = client.get_node(p["name"]) or {}
            if reached(node, before, target, moved):
                module.exit_json(changed=True, action=accepted, node=node, waited=round(time.time() - start, 1))
            moved = moved or RANK.get(node.get("stage"), 99) < RANK[target]
            if time.time() >= deadline:
                module.fail_json(msg="node %s: stage %s after %s s of waiting for %s"
                                 % (p["name"], node.get("stage"), p["timeout"], target),
                                 action=accepted, node=node)
            time.sleep(min(p["poll_interval"], max(0.0, deadline - time.time())))
    except ApiError as e:
        module.fail_json(msg=str(e), status=e.status, problem=e.problem)


if __name__ == "__main__":
    main()
