# -*- coding: utf-8 -*-
# Copyright: bootserver developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""An API error answer becomes one line of the failed task."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.bootserver.fleet.plugins.module_utils.api import problem_line


def test_problem_details_in_one_line():
    body = json.dumps({"type": "https://bootserver.dev/problems/invalid-node", "title": "Invalid node",
                       "status": 422, "detail": "nodes.w0: 2 errors\nsee below",
                       "errors": [{"pointer": "/mac/0", "detail": "not a MAC address: 'x'"},
                                  {"pointer": "/redfish/address", "detail": "must be an http(s) URL"}]})
    line, kind, problem = problem_line(422, body.encode(), "http://127.0.0.1:8081/api/v1/nodes/w0")
    assert line == ("422 invalid-node: nodes.w0: 2 errors see below (/mac/0: not a MAC address: 'x'; "
                    "/redfish/address: must be an http(s) URL)")
    assert kind == "invalid-node" and problem["status"] == 422


def test_a_body_that_is_no_problem_is_quoted_short():
    line, kind, problem = problem_line(502, b"<html>\n<b>Bad gateway</b></html>", "http://x/api/v1/nodes")
    assert line == "502 error: <html> <b>Bad gateway</b></html>"
    assert kind is None and problem == {}
    assert problem_line(500, b"", "http://x/api/v1/nodes")[0] == "500 error: no body (http://x/api/v1/nodes)"
