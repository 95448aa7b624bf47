# -*- coding: utf-8 -*-
# Copyright: bootserver developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The connection options of every bootserver.fleet module (module_utils/api.py, CONNECTION_ARGS)."""

    DOCUMENTATION = r'''
options:
  url:
    description:
      - The bootserver admin listener's base URL, for example V(http://127.0.0.1:8081) (C(server.admin.listen)).
      - The modules add C(/api/v1) themselves.
      - If not set, the environment variable E(BOOTSERVER_URL) is used.
    type: str
    required: true
  token:
    description:
      - "An API token (C(bootserver tokens create NAME --scope write)), sent as C(Authorization: Bearer)."
      - If not set, the environment variable E(BOOTSERVER_TOKEN) is used.
    type: str
  ca_path:
    description:
      - A PEM file of the CA that signed the admin listener's certificate, when it serves HTTPS.
    type: path
  validate_certs:
    description:
      - Whether the admin listener's TLS certificate is verified. Set V(false) only on a trusted network.
    type: bool
    default: true
  http_timeout:
    description:
      - Seconds one request to the API may take.
    type: float
    default: 30
notes:
  - The fleet API answers errors as RFC 9457 problem details; a failed task's C(msg) is that answer in
    one line (status, kind, detail and the keys at fault).
'''
