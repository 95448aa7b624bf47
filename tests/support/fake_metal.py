"""A local fake of the Equinix Metal API v1, built from the saved OpenAPI spec.

A real aiohttp server on 127.0.0.1 (a free port), run in its own thread with its own event loop so the
synchronous ``requests`` client under test can talk to it. It implements the four calls bootserver
uses: ``POST /projects/{id}/devices`` (createDevice), ``GET /projects/{id}/devices``
(findProjectDevices, paginated), ``GET /devices/{id}`` (findDeviceById), ``PUT /devices/{id}``
(updateDevice), ``DELETE /devices/{id}`` (deleteDevice, 204).

* Every createDevice body is validated with jsonschema against the spec's request schema (the oneOf of
  DeviceCreateInMetroInput / DeviceCreateInFacilityInput, ``$ref``s resolved in the spec document),
  plus a strict check that every key is a property the spec defines (the spec itself allows extra
  keys, which would hide a typo). Every updateDevice body likewise against ``DeviceUpdateInput``. A bad
  body is a 422 ``{"errors": [...]}`` and is recorded in ``invalid_bodies``.
* Every answer is checked against the spec's response schema (Device, DeviceList, Error); a mismatch is
  recorded in ``problems`` (the fixture fails the test when it is not empty).
* A wrong or missing ``X-Auth-Token`` is a 401 ``{"error": ...}``; an unknown project or device a 404.
* ``inject(method, path_prefix, status, body, headers, times)`` makes the next matching calls fail
  (429 with ``Retry-After``, 5xx, ...); ``delay`` holds every answer back (timeouts).
* A device advances one state per ``GET /devices/{id}``: ``queued`` -> ``provisioning`` -> ``active``
  (or ``failed`` when its hostname is in ``fail_hostnames``; it stays ``provisioning`` when in
  ``stuck_hostnames``); with ``instant`` set, the first GET already answers the final state (for
  command-line tests, which cannot inject a clock). Addresses (public IPv4 /31, public IPv6 /127, private
  IPv4 /31, each with its gateway) and ports (``bond0`` of ``network_type``, default ``layer3``, over
  ``eth0`` and ``eth1``) are assigned at creation, as Equinix does.

The spec quirks noted in ``tests/data/SOURCES.md`` (an ``operation:`` key in one path, an
invalid CapacityLevelPerBaremetal schema) are outside the schemas used here; the spec is never
checked as a whole.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import json
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import referencing
import yaml
from aiohttp import web
from referencing.jsonschema import DRAFT4

REFERENCE_DIR = Path(__file__).resolve().parents[1] / "data"
SPEC_PATH = REFERENCE_DIR / "equinix-metal-oas3.yaml"
SPEC_URI = "urn:equinix-metal-oas3"
CREATE_BODY_POINTER = "#/paths/~1projects~1{id}~1devices/post/requestBody/content/application~1json/schema"
UPDATE_BODY_POINTER = "#/paths/~1devices~1{id}/put/requestBody/content/application~1json/schema"

_JSON_KEY: Any = web.RequestKey("json", object) if hasattr(web, "RequestKey") else "json"

TOKEN = "fake-token-4f0c1b7e-do-not-print"
PROJECT = "0f9ad0b6-1c1b-4e3f-9a3e-6f0b8d9e2a10"


@functools.cache
def load_spec() -> dict[str, Any]:
    """The saved Equinix Metal OpenAPI document (parsed once per test session)."""
    with SPEC_PATH.open("rb") as fh:
        return yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@functools.cache
def _registry() -> referencing.Registry:
    resource = referencing.Resource.from_contents(load_spec(), default_specification=DRAFT4)
    return referencing.Registry().with_resource(SPEC_URI, resource)


def validator(pointer: str) -> jsonschema.Draft4Validator:
    """A Draft 4 validator (OpenAPI 3.0 schemas are a Draft 4 dialect) for the schema at ``pointer``
    in the spec, with formats (uuid, date-time) checked."""
    return jsonschema.Draft4Validator(
        {"$ref": SPEC_URI + pointer},
        registry=_registry(),
        format_checker=jsonschema.FormatChecker(),  # every known format, uuid included
    )


@functools.cache
def create_body_validator() -> jsonschema.Draft4Validator:
    """Validator of the createDevice request body."""
    return validator(CREATE_BODY_POINTER)


@functools.cache
def create_body_keys() -> frozenset[str]:
    """Every property name the two createDevice input schemas define."""
    schemas = load_spec()["components"]["schemas"]
    keys: set[str] = set()
    for name in ("DeviceCreateInput", "MetroInput", "FacilityInput"):
        keys.update(schemas[name]["properties"])
    return frozenset(keys)


def create_body_errors(body: Any) -> list[str]:
    """Why ``body`` is not a valid createDevice request (empty when it is)."""
    errors = []
    for err in create_body_validator().iter_errors(body):
        where = "/".join(str(p) for p in err.absolute_path) or "(body)"
        errors.append(f"{where}: {err.message}")
        for sub in sorted(err.context or (), key=lambda e: list(e.relative_schema_path)):
            subwhere = "/".join(str(p) for p in sub.absolute_path) or "(body)"
            errors.append(f"  {subwhere}: {sub.message}")
    if isinstance(body, dict):
        for key in sorted(set(body) - create_body_keys()):
            errors.append(f"{key}: not a createDevice property")
    return errors


def update_body_errors(body: Any) -> list[str]:
    """Why ``body`` is not a valid updateDevice request (empty when it is), unknown keys included."""
    errors = [f"{'/'.join(str(p) for p in e.absolute_path) or '(body)'}: {e.message}"
              for e in validator(UPDATE_BODY_POINTER).iter_errors(body)]
    if isinstance(body, dict):
        known = load_spec()["components"]["schemas"]["DeviceUpdateInput"]["properties"]
        errors += [f"{key}: not an updateDevice property" for key in sorted(set(body) - set(known))]
    return errors


@dataclass
class Recorded:
    """One request the fake received."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class Fault:
    """An injected answer for the next ``times`` matching calls."""

    method: str
    path_prefix: str
    status: int
    body: Any
    headers: dict[str, str]
    times: int


@dataclass
class FakeMetal:
    """State and behaviour of the fake API (see the module docstring)."""

    token: str = TOKEN
    projects: set[str] = field(default_factory=lambda: {PROJECT})
    devices: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    invalid_bodies: list[tuple[Any, list[str]]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    fail_hostnames: set[str] = field(default_factory=set)
    stuck_hostnames: set[str] = field(default_factory=set)
    delay: float = 0.0
    instant: bool = False
    network_type: str = "layer3"
    url: str = ""
    _next_ip: int = 10

    # -- test controls

    def inject(
        self,
        method: str,
        path_prefix: str,
        status: int,
        body: Any = None,
        headers: dict[str, str] | None = None,
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` calls of ``method`` to a path starting with ``path_prefix`` with
        ``status``, the JSON ``body`` (default an Error object) and ``headers``."""
        if body is None:
            body = {"error": f"injected {status}"}
        self.faults.append(Fault(method, path_prefix, status, body, headers or {}, times))

    def add_device(self, hostname: str, tags: list[str], state: str = "active", project: str = PROJECT) -> str:
        """Put a device into the project as if created earlier (e.g. by hand); returns its id."""
        device = self._new_device({"hostname": hostname, "tags": tags, "plan": "c3.small.x86"}, project)
        device["state"] = state
        return device["id"]

    def calls(self, method: str, path_prefix: str = "/") -> list[Recorded]:
        """The recorded requests of ``method`` whose path starts with ``path_prefix``."""
        return [r for r in self.requests if r.method == method and r.path.startswith(path_prefix)]

    # -- helpers

    def _new_device(self, body: dict[str, Any], project: str) -> dict[str, Any]:
        device_id = str(uuid.uuid4())
        n = self._next_ip
        self._next_ip += 1
        def assignment(base: str, family: int, public: bool, cidr: int) -> dict[str, Any]:
            # Equinix hands out /31 (IPv4) and /127 (IPv6) subnets: the gateway is the other address.
            address = ipaddress.ip_address(base) + n
            gateway = ipaddress.ip_address(int(address) ^ 1) if family == 4 else ipaddress.IPv6Address(int(address) ^ 1)
            network = ipaddress.ip_network(f"{address}/{cidr}", strict=False)
            return {"address": str(address), "address_family": family, "public": public, "cidr": cidr,
                    "gateway": str(gateway), "network": str(network.network_address),
                    "netmask": str(network.netmask), "management": True,
                    "href": f"/metal/v1/ips/{uuid.uuid4()}"}

        addresses = [
            assignment("147.75.0.0", 4, True, 31),
            assignment("2604:1380::", 6, True, 127),
            assignment("10.70.0.0", 4, False, 31),
        ]
        # bond0 over eth0 and eth1, as every 2-NIC Equinix server comes (spec: Device.network_ports).
        bond_id = str(uuid.uuid4())
        ports: list[dict[str, Any]] = [
            {"id": bond_id, "type": "NetworkBondPort", "name": "bond0", "network_type": self.network_type,
             "data": {"bonded": True}, "href": f"/metal/v1/ports/{bond_id}"},
        ]
        for i in range(2):
            port_id = str(uuid.uuid4())
            ports.append({"id": port_id, "type": "NetworkPort", "name": f"eth{i}",
                          "data": {"mac": f"b8:ce:f6:{n >> 8 & 0xff:02x}:{n & 0xff:02x}:{i:02x}", "bonded": True},
                          "bond": {"id": bond_id, "name": "bond0"}, "href": f"/metal/v1/ports/{port_id}"})
        device = {
            "id": device_id,
            "href": f"/metal/v1/devices/{device_id}",
            "hostname": body.get("hostname", ""),
            "state": "queued",
            "tags": list(body.get("tags", [])),
            "ip_addresses": addresses,
            "network_ports": ports,
            "billing_cycle": body.get("billing_cycle", "hourly"),
            "always_pxe": bool(body.get("always_pxe", False)),
            "customdata": body.get("customdata", {}),
            "spot_instance": bool(body.get("spot_instance", False)),
            "project_lite": {"href": f"/metal/v1/projects/{project}"},
            "created_at": "2026-01-01T00:00:00Z",
        }
        for key in ("ipxe_script_url", "userdata"):
            if key in body:
                device[key] = body[key]
        device["_project"] = project
        self.devices[device_id] = device
        return device

    def _public(self, device: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in device.items() if not k.startswith("_")}

    def _answer(
        self, status: int, body: Any, schema: str | None, headers: dict[str, str] | None = None
    ) -> web.Response:
        if schema is not None:
            for err in validator(f"#/components/schemas/{schema}").iter_errors(body):
                self.problems.append(f"{schema} answer: {err.message}")
        return web.json_response(body, status=status, headers=headers)

    def _error(self, status: int, message: str) -> web.Response:
        return self._answer(status, {"error": message}, "Error")

    # -- the aiohttp application

    def app(self) -> web.Application:
        """The aiohttp application serving the fake under ``/metal/v1``."""
        app = web.Application(middlewares=[self._middleware])
        app.router.add_post("/metal/v1/projects/{project}/devices", self._create)
        app.router.add_get("/metal/v1/projects/{project}/devices", self._list)
        app.router.add_get("/metal/v1/devices/{id}", self._get)
        app.router.add_put("/metal/v1/devices/{id}", self._update)
        app.router.add_delete("/metal/v1/devices/{id}", self._delete)
        return app

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        path = request.path.removeprefix("/metal/v1")
        self.requests.append(Recorded(request.method, path, dict(request.query), dict(request.headers), body))
        request[_JSON_KEY] = body
        if self.delay:
            await asyncio.sleep(self.delay)
        if request.headers.get("X-Auth-Token") != self.token:
            return self._error(401, "Invalid authentication token")
        for fault in self.faults:
            if fault.times > 0 and fault.method == request.method and path.startswith(fault.path_prefix):
                fault.times -= 1
                return self._answer(fault.status, fault.body, "Error" if fault.status >= 400 else None, fault.headers)
        return await handler(request)

    async def _create(self, request: web.Request) -> web.Response:
        project = request.match_info["project"]
        if project not in self.projects:
            return self._error(404, "Not found")
        body = request[_JSON_KEY]
        errors = create_body_errors(body)
        if errors:
            self.invalid_bodies.append((body, errors))
            return self._answer(422, {"errors": errors}, "Error")
        device = self._new_device(body, project)
        return self._answer(201, self._public(device), "Device")

    async def _list(self, request: web.Request) -> web.Response:
        project = request.match_info["project"]
        if project not in self.projects:
            return self._error(404, "Not found")
        try:
            page = int(request.query.get("page", "1"))
            per_page = int(request.query.get("per_page", "10"))
        except ValueError:
            return self._error(422, "page and per_page must be integers")
        if not (1 <= page <= 100000 and 1 <= per_page <= 1000):
            return self._error(422, "page or per_page out of range")
        tag = request.query.get("tag")
        devices = [
            self._public(d)
            for d in self.devices.values()
            if d["_project"] == project and (tag is None or tag in d["tags"])
        ]
        last_page = max(1, -(-len(devices) // per_page))
        chunk = devices[(page - 1) * per_page : page * per_page]
        base = f"/metal/v1/projects/{project}/devices?per_page={per_page}"
        meta: dict[str, Any] = {
            "self": {"href": f"{base}&page={page}"},
            "first": {"href": f"{base}&page=1"},
            "last": {"href": f"{base}&page={last_page}"},
            "total": len(devices),
            "current_page": page,
            "last_page": last_page,
        }
        if page < last_page:
            meta["next"] = {"href": f"{base}&page={page + 1}"}
        if page > 1:
            meta["previous"] = {"href": f"{base}&page={page - 1}"}
        return self._answer(200, {"devices": chunk, "meta": meta}, "DeviceList")

    async def _get(self, request: web.Request) -> web.Response:
        device = self.devices.get(request.match_info["id"])
        if device is None:
            return self._error(404, "Not found")
        if self.instant and device["hostname"] not in self.stuck_hostnames:
            device["state"] = "failed" if device["hostname"] in self.fail_hostnames else "active"
        answer = self._public(device)
        if device["hostname"] not in self.stuck_hostnames or device["state"] == "queued":
            if device["state"] == "queued":
                device["state"] = "provisioning"
            elif device["state"] == "provisioning":
                device["state"] = "failed" if device["hostname"] in self.fail_hostnames else "active"
        return self._answer(200, answer, "Device")

    async def _update(self, request: web.Request) -> web.Response:
        device = self.devices.get(request.match_info["id"])
        if device is None:
            return self._error(404, "Not found")
        body = request[_JSON_KEY]
        errors = update_body_errors(body)
        if errors:
            self.invalid_bodies.append((body, errors))
            return self._answer(422, {"errors": errors}, "Error")
        for key, value in body.items():
            if key in ("ipxe_script_url", "userdata") and value == "":
                device.pop(key, None)  # "" clears it, as the API does
            else:
                device[key] = value
        return self._answer(200, self._public(device), "Device")

    async def _delete(self, request: web.Request) -> web.Response:
        device = self.devices.pop(request.match_info["id"], None)
        if device is None:
            return self._error(404, "Not found")
        return web.Response(status=204)


class ServerThread:
    """Run an aiohttp application on 127.0.0.1 (port chosen by the OS) in a thread with its own loop."""

    def __init__(self, app: web.Application) -> None:
        self._app = app
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-metal", daemon=True)
        self._runner: web.AppRunner | None = None
        self.port = 0

    def start(self) -> None:
        """Start the loop thread and the server; sets ``port``."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)

    async def _start(self) -> None:
        self._runner = web.AppRunner(self._app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def stop(self) -> None:
        """Stop the server, the loop and the thread."""
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()


@pytest.fixture(name="fake_metal")
def fake_metal_fixture():
    """A running ``FakeMetal``; ``fake_metal.url`` is its API base URL. Stops after the test and
    fails it when an answer strayed from the spec's response schemas."""
    fake = FakeMetal()
    server = ServerThread(fake.app())
    server.start()
    fake.url = f"http://127.0.0.1:{server.port}/metal/v1"
    try:
        yield fake
    finally:
        server.stop()
    assert fake.problems == [], fake.problems


@pytest.fixture(name="metal_env")
def metal_env_fixture(fake_metal, monkeypatch):
    """The running fake as the command line finds it: ``METAL_AUTH_TOKEN`` and ``METAL_API_URL`` set, and
    devices in their final state at the first GET (a command cannot be handed a fake clock)."""
    fake_metal.instant = True
    monkeypatch.setenv("METAL_AUTH_TOKEN", TOKEN)
    monkeypatch.setenv("METAL_API_URL", fake_metal.url)
    return fake_metal
