#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: bootserver developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: node
short_description: Create, update or delete a bootserver node
version_added: 0.1.0
description:
  - Makes a node of a bootserver fleet (a machine bootserver installs CoreOS on) look as the task says,
    through the fleet API (C(PUT), C(PATCH) and C(DELETE /api/v1/nodes/NAME)).
  - The options are the node keys of the bootserver config (docs/config.md). A key the task leaves out is left
    as it is on the server; inside O(redfish) and O(ipmi) a sub-key left out is left as it is; O(metal) and
    O(network) are replaced whole.
  - Every change is sent with C(If-Match) on the generation the module read, so a change made meanwhile by
    someone else fails the task (412) rather than being overwritten.
  - A BMC password is write-only; the API tells only whether one is set. See O(update_password).
  - Nodes defined in the config file (C(source) V(file:PATH)) cannot be changed through the API (409 file-managed).
author: bootserver developers (@bootserver)
extends_documentation_fragment:
  - bootserver.fleet.connection
attributes:
  check_mode:
    support: full
    description: Computes the change and reports it without sending it.
  diff_mode:
    support: full
    description: Shows the node's keys before and after; passwords only as C(password_set).
options:
  name:
    description: The node's name.
    type: str
    required: true
  state:
    description: Whether the node exists.
    type: str
    choices: [present, absent]
    default: present
  update_password:
    description:
      - V(on_create) sends a BMC password given in O(redfish.password) or O(ipmi.password) when the node is
        created or when its mapping has no password yet, so a second run reports no change.
      - V(always) sends it on every run (the task then always reports a change).
    type: str
    choices: [always, on_create]
    default: on_create
  profile:
    description: The profile the node boots (required to create a node).
    type: str
  facility:
    description: The facility whose cache the node fetches its artifacts from.
    type: str
  mac:
    description: The node's MAC addresses (C(/boot.ipxe?mac=) selects the node by them).
    type: list
    elements: str
  uuid:
    description: The node's SMBIOS UUID.
    type: str
  hostname:
    description: The host name the node calls itself (default its name).
    type: str
  provider:
    description: How C(provision) reaches the machine.
    type: str
    choices: [equinix, redfish, ipmi]
  metal:
    description: Equinix Metal device settings (the keys of C(nodes.NAME.metal), replaced whole).
    type: dict
  redfish:
    description: The node's Redfish BMC (C(nodes.NAME.redfish)).
    type: dict
    suboptions:
      address:
        description: The BMC's base URL.
        type: str
      system:
        description: The C(ComputerSystem) to drive, its path or id.
        type: str
      username:
        description: The BMC user.
        type: str
      password:
        description: The BMC password (write-only, see O(update_password)).
        type: str
      password_file:
        description: A file on the server holding the password.
        type: str
      password_env:
        description: An environment variable of the server holding the password.
        type: str
      boot_mode:
        description: The firmware boot mode to set.
        type: str
        choices: [uefi, legacy]
      boot_source:
        description: How the node boots once.
        type: str
        choices: [pxe, virtual-media, http]
      timeout:
        description: Seconds one BMC request may take.
        type: float
      verify_tls:
        description: V(true), V(false) or a CA file on the server.
        type: raw
  ipmi:
    description: The node's IPMI BMC (C(nodes.NAME.ipmi)).
    type: dict
    suboptions:
      address:
        description: The BMC's host name or IP address.
        type: str
      port:
        description: The BMC's RMCP+ UDP port.
        type: int
      username:
        description: The BMC user.
        type: str
      password:
        description: The BMC password (write-only, see O(update_password)).
        type: str
      password_file:
        description: A file on the server holding the password.
        type: str
      password_env:
        description: An environment variable of the server holding the password.
        type: str
      boot_mode:
        description: The firmware boot mode of the one-time network boot.
        type: str
        choices: [uefi, legacy]
      boot_source:
        description: How the node boots once (IPMI has V(pxe) only).
        type: str
        choices: [pxe, virtual-media, http]
      timeout:
        description: Seconds one BMC command may take.
        type: float
      persistent:
        description: Boot from the network on every boot, not once.
        type: bool
      cipher_suite:
        description: The RMCP+ cipher suite ID.
        type: int
  addresses:
    description: IP addresses or CIDRs allowed to fetch the node's script and configs.
    type: list
    elements: str
  selectable:
    description: Whether C(/boot.ipxe) hands the node's script to any address.
    type: bool
  default:
    description: Whether the node is the generic entry's fallback (live mode only).
    type: bool
  network:
    description: V(dhcp), V(provider) or an NMState document (replaced whole).
    type: raw
  secure_boot:
    description: Whether the node's boot image is the Secure Boot one.
    type: bool
'''

EXAMPLES = r'''
- name: A node with a Redfish BMC
  bootserver.fleet.node:
    url: http://127.0.0.1:8081
    token: "{{ bootserver_token }}"
    name: worker-0
    profile: fcos-install
    mac: ["52:54:00:12:34:56"]
    provider: redfish
    redfish:
      address: https://bmc-0.example
      username: admin
      password: "{{ bmc_password }}"

- name: Gone
  bootserver.fleet.node:
    name: worker-0
    state: absent
'''

RETURN = r'''
node:
  description: The node as the API shows it after the task (nothing when absent), passwords as C(password_set).
  returned: success
  type: dict
  sample: {"name": "worker-0", "profile": "fcos-install", "mac": ["52:54:00:12:34:56"], "generation": 3,
           "source": "store", "stage": "new", "redfish": {"address": "https://bmc-0.example", "password_set": true}}
patch:
  description: The merge patch sent (or that would be sent in check mode), passwords hidden.
  returned: changed and the node existed
  type: dict
'''

import copy

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bootserver.fleet.plugins.module_utils.api import CONNECTION_ARGS, ApiError, FleetClient
from ansible_collections.bootserver.fleet.plugins.module_utils.nodes import NODE_ARGS, SECRETS, plan


def _hidden(body):
    shown = copy.deepcopy(body)
    for key in SECRETS:
        if isinstance(shown.get(key), dict) and "password" in shown[key]:
            shown[key]["password"] = "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
    return shown


def run(module, client):
    """The task's work: ``(changed, node or None, patch or None, diff)``; raises ApiError."""
    p = module.params
    name = p["name"]
    node = client.get_node(name)
    if p["state"] == "absent":
        if node is None:
            return False, None, None, {"before": {}, "after": {}}
        if not module.check_mode:
            client.delete_node(name, node["generation"])
        return True, None, None, {"before": {"name": name}, "after": {}}
    if node is None and not p["profile"]:
        module.fail_json(msg="node %s does not exist: profile is required to create it" % name)
    body, diff = plan(node, p, p["update_password"])
    if node is None:
        if not module.check_mode:
            node = client.create_node(name, body)
        return True, node, None, diff
    if not body:
        return False, node, None, diff
    if not module.check_mode:
        node = client.patch_node(name, body, node["generation"])
    return True, node, _hidden(body), diff


def main():
    argument_spec = dict(
        name=dict(type="str", required=True),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        update_password=dict(type="str", choices=["always", "on_create"], default="on_create", no_log=False),
    )
    argument_spec.update(NODE_ARGS)
    argument_spec.update(CONNECTION_ARGS)
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    client = FleetClient.from_module(module)
    try:
        changed, node, patch, diff = run(module, client)
    except ApiError as e:
        module.fail_json(msg=str(e), status=e.status, problem=e.problem)
    result = dict(changed=changed, node=node or {}, diff=diff)
    if patch is not None:
        result["patch"] = patch
    module.exit_json(**result)


if __name__ == "__main__":
    main()
