# -*- coding: utf-8 -*-
# Copyright: bootserver developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The bootserver fleet API client the modules of bootserver.fleet share.

One :class:`FleetClient` per module run: the admin listener's base URL (the client adds ``/api/v1``),
a bearer token, TLS settings; each call returns the decoded JSON body and the response headers, or
raises :class:`ApiError` whose message is the API's RFC 9457 problem details in one line
(``409 conflict: ... (/mac/0: ...)``). Built on ``ansible.module_utils.urls`` (Request), as every
module that speaks HTTP must be.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible.module_utils.basic import env_fallback
from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
from ansible.module_utils.six.moves.urllib.parse import quote, urlencode
from ansible.module_utils.urls import Request

#: The connection options every module of the collection takes (doc fragment bootserver.fleet.connection).
CONNECTION_ARGS = dict(
    url=dict(type="str", required=True, fallback=(env_fallback, ["BOOTSERVER_URL"])),
    token=dict(type="str", no_log=True, fallback=(env_fallback, ["BOOTSERVER_TOKEN"])),
    ca_path=dict(type="path"),
    validate_certs=dict(type="bool", default=True),
    http_timeout=dict(type="float", default=30.0),
)

#: Read-only keys of a node's representation: never sent, never compared.
READ_ONLY = ("name", "source", "generation", "stage", "since")

#: The stages a node goes through (docs/design.md, "Stage order"), for ``wait_for``.
STAGES = ("new", "reinstall", "dhcp", "tftp", "ipxe", "kernel", "initramfs", "rootfs", "installing",
          "ignition", "installed", "running", "unconfirmed", "up")


class ApiError(Exception):
    """A request failed: ``status`` is the HTTP status (``None`` when the server was not reached),
    ``kind`` the problem type's last path segment (``not-found``, ``precondition-failed``, ...),
    ``problem`` the decoded problem details (``{}`` when the body was none), ``str()`` one line."""

    def __init__(self, message, status=None, kind=None, problem=None):
        super(ApiError, self).__init__(message)
        self.status = status
        self.kind = kind
        self.problem = problem or {}


def problem_line(status, body, url):
    """One line for an error answer: ``STATUS KIND: DETAIL (POINTER: DETAIL; ...)`` from RFC 9457
    problem details (``type``, ``title``, ``detail``, ``errors[].pointer/detail``), else the status
    and the start of the body. ``url`` is named only when the body says nothing."""
    problem = {}
    try:
        problem = json.loads(body) if body else {}
    except ValueError:
        problem = {}
    if not isinstance(problem, dict):
        problem = {}
    kind = str(problem.get("type") or "").rstrip("/").rsplit("/", 1)[-1] or None
    detail = problem.get("detail") or problem.get("title")
    if not detail:
        text = (body or b"").decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
        detail = " ".join(text.split())[:200] or "no body (%s)" % url
    line = "%s %s: %s" % (status, kind or "error", " ".join(str(detail).split()))
    errors = problem.get("errors")
    if isinstance(errors, list) and errors:
        parts = []
        for err in errors:
            if isinstance(err, dict):
                parts.append("%s: %s" % (err.get("pointer", ""), " ".join(str(err.get("detail", "")).split())))
        if parts:
            line += " (%s)" % "; ".join(parts)
    return line, kind, problem


class FleetClient(object):
    """The fleet API at ``url`` + ``/api/v1`` (``url`` is the admin listener's base URL).

    ``token``: sent as ``Authorization: Bearer``; ``ca_path``: a CA bundle (PEM) to trust;
    ``validate_certs``: false turns TLS verification off; ``timeout``: seconds per request.
    """

    def __init__(self, url, token=None, ca_path=None, validate_certs=True, timeout=30.0):
        self.base = url.rstrip("/") + "/api/v1"
        headers = {"Accept": "application/json, application/problem+json"}
        if token:
            headers["Authorization"] = "Bearer %s" % token
        self._request = Request(headers=headers, validate_certs=validate_certs, ca_path=ca_path,
                                timeout=timeout, follow_redirects="none")

    @classmethod
    def from_module(cls, module):
        """The client of an AnsibleModule whose argument spec holds :data:`CONNECTION_ARGS`."""
        p = module.params
        return cls(p["url"], token=p["token"], ca_path=p["ca_path"], validate_certs=p["validate_certs"],
                   timeout=p["http_timeout"])

    def call(self, method, path, body=None, headers=None, query=None, content_type="application/json"):
        """``(status, decoded JSON body or None, headers dict with lower-case names)``; raises
        :class:`ApiError` for a 4xx/5xx answer or an unreachable server."""
        url = self.base + path
        if query:
            url += "?" + urlencode(sorted((k, v) for k, v in query.items() if v is not None))
        hdrs = dict(headers or {})
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            hdrs["Content-Type"] = content_type
        try:
            resp = self._request.open(method, url, data=data, headers=hdrs)
        except HTTPError as e:
            try:
                raw = e.read()
            except Exception:  # pylint: disable=broad-except
                raw = b""
            line, kind, problem = problem_line(e.code, raw, url)
            raise ApiError("%s %s: %s" % (method, path, line), status=e.code, kind=kind, problem=problem)
        except URLError as e:
            raise ApiError("%s %s: cannot reach %s: %s" % (method, path, self.base, e.reason))
        except (OSError, ValueError) as e:
            raise ApiError("%s %s: cannot reach %s: %s" % (method, path, self.base, e))
        raw = resp.read()
        info = dict((k.lower(), v) for k, v in resp.headers.items())
        if not raw:
            return resp.status, None, info
        try:
            return resp.status, json.loads(raw), info
        except ValueError:
            raise ApiError("%s %s: the answer is not JSON (is %s the admin listener?)" % (method, path, self.base))

    # --- nodes -------------------------------------------------------------------------------------

    @staticmethod
    def node_path(name):
        """``/nodes/<name>`` with the name escaped for a path segment."""
        return "/nodes/" + quote(name, safe="")

    def get_node(self, name):
        """The node's representation (a dict with ``generation``), or ``None`` when there is none."""
        try:
            return self.call("GET", self.node_path(name))[1]
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def list_nodes(self, **filters):
        """Every node (following ``next_page_token``), filtered by the list's query parameters
        (``profile``, ``source``, ``stage``, ``mac``)."""
        items, token = [], None
        while True:
            query = dict(filters, page_token=token)
            body = self.call("GET", "/nodes", query=query)[1] or {}
            items.extend(body.get("items") or [])
            token = body.get("next_page_token")
            if not token:
                return items

    def create_node(self, name, keys):
        """PUT with ``If-None-Match: *``: create only (412 when it exists meanwhile); the new node."""
        return self.call("PUT", self.node_path(name), body=keys, headers={"If-None-Match": "*"})[1]

    def patch_node(self, name, patch, generation):
        """RFC 7396 merge patch with ``If-Match`` on the generation read; the node after it."""
        return self.call("PATCH", self.node_path(name), body=patch, headers={"If-Match": '"%s"' % generation},
                         content_type="application/merge-patch+json")[1]

    def delete_node(self, name, generation):
        """DELETE with ``If-Match`` on the generation read."""
        self.call("DELETE", self.node_path(name), headers={"If-Match": '"%s"' % generation})

    def action(self, name, action):
        """POST ``/nodes/<name>/actions/<action>`` (202): the body describing the action, or ``{}``."""
        return self.call("POST", self.node_path(name) + "/actions/" + quote(action, safe=""), body={})[1] or {}

    def adopt(self, mac, name, profile):
        """POST ``/discovered/<mac>/adopt``: the new node."""
        return self.call("POST", "/discovered/" + quote(mac, safe="") + "/adopt",
                         body={"name": name, "profile": profile})[1]
