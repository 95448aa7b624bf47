"""Bare-metal provider layer: the ``Provider`` interface and its Equinix Metal implementation.

A provider creates, reads, lists and deletes *devices* (bare-metal servers) that boot through custom
iPXE from bootserver. The orchestration on top (idempotent lookup, wait loop, node state) lives in
``bootserver.provision`` and only talks to the ``Provider`` protocol, so another custom-iPXE cloud can
be added later by writing one more class with the four methods.

``EquinixMetal`` follows the Equinix Metal API v1 OpenAPI spec (saved in
``tests/data/equinix-metal-oas3.yaml``): ``POST /projects/{id}/devices`` (createDevice),
``GET /devices/{id}`` (findDeviceById), ``DELETE /devices/{id}`` (deleteDevice, 204) and
``GET /projects/{id}/devices`` (findProjectDevices, paginated with ``page``/``per_page``).

The ``metal:`` config mappings (top level, profiles, nodes) are validated at config load by the
pydantic models ``MetalGlobal`` and ``MetalSettings`` of ``bootserver.config`` (re-exported here);
``node_settings`` merges a node's settings over its profile's.

It never imports aiohttp's web layer or the server.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, Self, runtime_checkable
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from bootserver import __version__
from pydantic import ValidationError

from bootserver.config import BILLING_CYCLES, DEFAULT_TAG, MetalGlobal, MetalSettings, describe_error, is_uuid
from bootserver.errors import BootserverError, InputError

log = logging.getLogger(__name__)

DEFAULT_API_URL = "https://api.equinix.com/metal/v1"
"""Base URL of the Equinix Metal API v1."""

TOKEN_ENV = "METAL_AUTH_TOKEN"
"""Environment variable holding the Equinix Metal API token (sent as ``X-Auth-Token``)."""

API_URL_ENV = "METAL_API_URL"
"""Environment variable overriding the API base URL (wins over the config key ``metal.api_url``)."""

USER_AGENT = f"bootserver/{__version__} (+https://github.com/bootserver/bootserver) python-requests/{requests.__version__}"

TERMINAL_STATES = frozenset({"active", "failed"})
"""Device states the provisioning wait loop stops at."""

GONE_STATES = frozenset({"deprovisioning", "deleted"})
"""Device states that no longer count as "the node's device" when looking one up."""


# --------------------------------------------------------------------------------------------- errors


class MetalError(BootserverError):
    """A provider call failed at run time (exit 1): an API error status, a network error, a bad answer.

    ``status`` is the HTTP status when the API answered, else ``None``.
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


class MetalNotFound(MetalError):
    """The API answered 404 for a device or project."""


class MissingTokenError(InputError):
    """No API token in the environment (exit 2). The message names the variable to set."""


# ---------------------------------------------------------------------------------------- data types


@dataclass(frozen=True)
class IPAddress:
    """One address assigned to a device (an Equinix ``IPAssignment``): ``address`` (text), ``family``
    (4 or 6), ``public`` (bool), ``cidr`` (prefix length, ``None`` when not reported) and ``gateway``
    (text, ``None`` when not reported)."""

    address: str
    family: int
    public: bool
    cidr: int | None = None
    gateway: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the address in the spec's names: ``{"address": str, "address_family": int, "cidr": int |
        None, "gateway": str | None, "public": bool}``."""
        return {"address": self.address, "address_family": self.family, "cidr": self.cidr,
                "gateway": self.gateway, "public": self.public}


@dataclass(frozen=True)
class NetworkPort:
    """One network port of a device (an Equinix ``Port``): ``type`` (``NetworkPort`` for a NIC,
    ``NetworkBondPort`` for a bond), ``name`` (``eth0``, ``bond0``), ``mac`` (``data.mac``, NICs only),
    ``bond`` (``bond.name``: the bond a NIC belongs to) and ``network_type`` (``layer3``,
    ``hybrid-bonded``, ...; set on bond ports)."""

    type: str
    name: str
    mac: str | None = None
    bond: str | None = None
    network_type: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the port in the spec's shape: ``{"type", "name", "data": {"mac"}, "bond": {"name"},
        "network_type"}`` (members that are ``None`` left out)."""
        out: dict[str, Any] = {"type": self.type, "name": self.name}
        if self.mac is not None:
            out["data"] = {"mac": self.mac}
        if self.bond is not None:
            out["bond"] = {"name": self.bond}
        if self.network_type is not None:
            out["network_type"] = self.network_type
        return out


@dataclass(frozen=True)
class Device:
    """A bare-metal device as a provider reports it.

    ``id`` is the provider's device id (a UUID for Equinix), ``state`` the provider's state word
    (Equinix: ``queued``, ``provisioning``, ``active``, ``failed``, ``deprovisioning``, ...),
    ``ip_addresses`` every assigned address, ``tags`` the device's tags, ``network_ports`` its NICs
    and bonds.
    """

    id: str
    hostname: str
    state: str
    ip_addresses: tuple[IPAddress, ...] = ()
    tags: tuple[str, ...] = ()
    network_ports: tuple[NetworkPort, ...] = ()


@dataclass(frozen=True)
class DeviceSpec:
    """What to create: one device that boots custom iPXE from bootserver.

    Exactly one of ``ipxe_script_url`` / ``userdata`` is set. Location is ``metro`` or (deprecated)
    ``facility`` (a code, or a list of codes in order of preference), never both. ``spot_price_max``
    is in US dollars per hour. ``None`` / empty fields are left out of the request.
    """

    hostname: str
    plan: str
    metro: str | None = None
    facility: str | tuple[str, ...] | None = None
    operating_system: str = "custom_ipxe"
    ipxe_script_url: str | None = None
    userdata: str | None = None
    billing_cycle: str | None = None
    tags: tuple[str, ...] = ()
    always_pxe: bool | None = None
    spot_instance: bool | None = None
    spot_price_max: float | None = None
    hardware_reservation_id: str | None = None
    project_ssh_keys: tuple[str, ...] = ()
    customdata: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if (self.ipxe_script_url is None) == (self.userdata is None):
            raise ValueError("DeviceSpec needs exactly one of ipxe_script_url and userdata")
        if self.metro is not None and self.facility is not None:
            raise ValueError("DeviceSpec takes metro or facility, not both")


@runtime_checkable
class Provider(Protocol):
    """A bare-metal cloud whose devices can boot custom iPXE from bootserver.

    Every method raises ``MetalError`` (exit 1) on an API or network failure; ``get`` and ``delete``
    raise ``MetalNotFound`` when the device does not exist.
    """

    name: str

    def create(self, project: str, spec: DeviceSpec) -> Device:
        """Create one device in ``project`` and return it as first reported (usually ``queued``)."""
        ...

    def get(self, device_id: str) -> Device:
        """Return the device's current state."""
        ...

    def delete(self, device_id: str) -> None:
        """Delete the device (it goes ``deprovisioning``, then disappears)."""
        ...

    def list(self, project: str, tag: str | None = None) -> list[Device]:
        """Return every device of ``project`` (only those carrying ``tag`` when given), all pages."""
        ...


# ------------------------------------------------------------------------------------------- retries


class MetalRetry(Retry):
    """urllib3 ``Retry`` with the Equinix rate-limit headers and a cap on server-requested waits.

    * A 429 (or 503) is retried after ``Retry-After`` seconds (or HTTP date), or, when that header is
      missing, after ``X-RateLimit-Reset`` (seconds to wait; a value above 10^9 is read as a Unix
      time). Every such wait is capped at ``max_retry_after`` seconds.
    * ``POST`` (device creation) is retried on 429 only: a 5xx may mean the device was created anyway,
      and ``bootserver provision`` looks it up again on the next run instead of duplicating it.
    * ``sleep_func`` (seconds -> None) performs the server-requested waits; tests pass a recorder.
    """

    max_retry_after: float = 60.0
    sleep_func: Callable[[float], None] = staticmethod(time.sleep)

    def new(self, **kw: Any) -> MetalRetry:
        """urllib3 API: a copy with ``kw`` changed, keeping ``max_retry_after`` and ``sleep_func``."""
        new = super().new(**kw)
        new.max_retry_after = self.max_retry_after
        new.sleep_func = self.sleep_func
        return new

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
        """urllib3 API: whether a ``status_code`` answer to ``method`` is retried (POST: 429 only)."""
        if method.upper() == "POST" and status_code != 429:
            return False
        return super().is_retry(method, status_code, has_retry_after)

    def get_retry_after(self, response: Any) -> float | None:
        """Seconds to wait before the next try, from ``Retry-After`` or ``X-RateLimit-Reset``; capped."""
        seconds = super().get_retry_after(response)
        if seconds is None:
            reset = response.headers.get("X-RateLimit-Reset")
            if reset is not None:
                try:
                    value = float(reset)
                except ValueError:
                    value = None
                if value is not None and math.isfinite(value):
                    seconds = max(0.0, value - time.time()) if value > 1e9 else max(0.0, value)
        if seconds is None:
            return None
        return min(seconds, self.max_retry_after)

    def sleep_for_retry(self, response: Any) -> bool:
        """urllib3 API: wait what the server asked (via ``sleep_func``); ``False`` when it asked nothing."""
        seconds = self.get_retry_after(response)
        if seconds:
            self.sleep_func(seconds)
            return True
        return False


# -------------------------------------------------------------------------------------- equinix metal


def _error_detail(response: requests.Response) -> str:
    """The API's own words from an ``Error`` body (``{"error": str}`` or ``{"errors": [str]}``)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    parts: list[str] = []
    if isinstance(body, dict):
        if isinstance(body.get("error"), str) and body["error"]:
            parts.append(body["error"])
        if isinstance(body.get("errors"), list):
            parts.extend(str(e) for e in body["errors"] if e)
    if not parts:
        text = response.text.strip().replace("\n", " ")
        parts.append(text[:200] if text else "(no error message)")
    return "; ".join(parts)


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _device_from_json(data: Mapping[str, Any]) -> Device:
    """Map an Equinix ``Device`` object (spec ``#/components/schemas/Device``, with its ``IPAssignment``
    and ``Port`` items) to ``Device``."""
    if not isinstance(data, Mapping) or not isinstance(data.get("id"), str):
        raise MetalError("Equinix Metal API: answer is not a device object")
    addresses = []
    for item in data.get("ip_addresses") or ():
        if isinstance(item, Mapping) and isinstance(item.get("address"), str):
            cidr = item.get("cidr")
            addresses.append(
                IPAddress(
                    address=item["address"],
                    family=int(item.get("address_family") or (6 if ":" in item["address"] else 4)),
                    public=bool(item.get("public", False)),
                    cidr=cidr if isinstance(cidr, int) and not isinstance(cidr, bool) else None,
                    gateway=_str_or_none(item.get("gateway")),
                )
            )
    ports = []
    for item in data.get("network_ports") or ():
        if isinstance(item, Mapping) and isinstance(item.get("name"), str):
            port_data = item.get("data") if isinstance(item.get("data"), Mapping) else {}
            bond = item.get("bond") if isinstance(item.get("bond"), Mapping) else {}
            ports.append(
                NetworkPort(
                    type=str(item.get("type") or ""),
                    name=item["name"],
                    mac=_str_or_none(port_data.get("mac")),
                    bond=_str_or_none(bond.get("name")),
                    network_type=_str_or_none(item.get("network_type")),
                )
            )
    return Device(
        id=data["id"],
        hostname=str(data.get("hostname") or ""),
        state=str(data.get("state") or "unknown"),
        ip_addresses=tuple(addresses),
        tags=tuple(str(t) for t in data.get("tags") or ()),
        network_ports=tuple(ports),
    )


def device_create_body(spec: DeviceSpec) -> dict[str, Any]:
    """Build the JSON body of ``POST /projects/{id}/devices`` (DeviceCreateInMetroInput or
    DeviceCreateInFacilityInput) from ``spec``, leaving unset fields out."""
    body: dict[str, Any] = {
        "hostname": spec.hostname,
        "plan": spec.plan,
        "operating_system": spec.operating_system,
    }
    for key in _SCALAR_FIELDS:
        value = getattr(spec, key)
        if value is not None:
            body[key] = value
    if spec.facility is not None:
        body["facility"] = list(spec.facility) if isinstance(spec.facility, tuple) else spec.facility
    for key in ("tags", "project_ssh_keys"):
        if getattr(spec, key):
            body[key] = list(getattr(spec, key))
    if spec.customdata is not None:
        body["customdata"] = dict(spec.customdata)
    return body


#: DeviceSpec fields sent as they are when set (same names in the createDevice body).
_SCALAR_FIELDS = ("metro", "ipxe_script_url", "userdata", "billing_cycle", "always_pxe", "spot_instance",
                  "spot_price_max", "hardware_reservation_id")


class EquinixMetal:
    """``Provider`` for the Equinix Metal API v1, over one ``requests.Session``.

    ``token`` goes into the ``X-Auth-Token`` header and nowhere else (not in ``repr``, messages or
    logs). ``api_url`` is the API base URL (default ``DEFAULT_API_URL``). ``timeout`` is
    ``(connect, read)`` in seconds and applies to every call. Retries (urllib3 ``Retry`` on an
    ``HTTPAdapter``): up to ``retries`` times on 429 and on 500/502/503/504 (GET, DELETE; POST on 429
    only), with exponential backoff ``backoff_factor * 2**n`` seconds (at most ``backoff_max``) and
    the server's ``Retry-After`` / ``X-RateLimit-Reset`` honoured up to ``max_retry_after`` seconds.
    Connection failures are retried too; a read timeout is not (the request may have been served).
    ``per_page`` is the page size used when listing.
    """

    name = "equinix"

    def __init__(
        self,
        token: str,
        api_url: str = DEFAULT_API_URL,
        *,
        timeout: tuple[float, float] = (10.0, 60.0),
        retries: int = 5,
        backoff_factor: float = 1.0,
        backoff_max: float = 60.0,
        max_retry_after: float = 120.0,
        per_page: int = 100,
        retry_sleep: Callable[[float], None] | None = None,
    ) -> None:
        if not token:
            raise MissingTokenError(f"no Equinix Metal API token: set {TOKEN_ENV}")
        self.api_url = api_url.rstrip("/")
        self.timeout = timeout
        self.per_page = per_page
        retry = MetalRetry(
            total=retries,
            connect=retries,
            read=0,
            status=retries,
            backoff_factor=backoff_factor,
            backoff_max=backoff_max,
            status_forcelist=(429, 500, 502, 503, 504),
            allowed_methods=frozenset({"GET", "DELETE", "POST"}),
            raise_on_status=False,
            respect_retry_after_header=True,
        )
        retry.max_retry_after = max_retry_after
        if retry_sleep is not None:
            retry.sleep_func = retry_sleep
        self._session = requests.Session()
        adapter = HTTPAdapter(max_retries=retry)
        self._session.mount("https://", adapter)
        self._session.mount("http://", adapter)
        self._session.headers.update(
            {
                "X-Auth-Token": token,
                "User-Agent": USER_AGENT,
                "Accept": "application/json",
            }
        )

    @classmethod
    def from_env(
        cls, api_url: str | None = None, environ: Mapping[str, str] | None = None, **kwargs: Any
    ) -> EquinixMetal:
        """Build a client from the environment: token from ``METAL_AUTH_TOKEN``; base URL from
        ``METAL_API_URL``, else ``api_url`` (the config key ``metal.api_url``), else the default.

        Raises ``MissingTokenError`` (exit 2) when the token variable is unset or empty.
        """
        env = os.environ if environ is None else environ
        token = env.get(TOKEN_ENV, "")
        if not token:
            raise MissingTokenError(f"no Equinix Metal API token: set {TOKEN_ENV}")
        url = env.get(API_URL_ENV) or api_url or DEFAULT_API_URL
        return cls(token, url, **kwargs)

    def __repr__(self) -> str:
        return f"EquinixMetal(api_url={self.api_url!r})"

    def close(self) -> None:
        """Close the HTTP session."""
        self._session.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        expect: tuple[int, ...] = (200,),
    ) -> requests.Response:
        """Send one API call; return the response when its status is in ``expect``.

        Raises ``MetalNotFound`` on 404, ``MetalError`` on any other status (message
        ``Equinix Metal API: METHOD PATH: STATUS REASON: <API error text>``) or network failure.
        """
        url = self.api_url + path
        where = f"Equinix Metal API: {method} {path}"
        try:
            response = self._session.request(method, url, params=params, json=json, timeout=self.timeout)
        except requests.RequestException as exc:
            # The exception text names the URL and the cause, never the headers.
            raise MetalError(f"{where}: {type(exc).__name__}: {_strip_reason(exc)}") from None
        log.debug("%s %s -> %s", method, url, response.status_code)
        if response.status_code in expect:
            return response
        message = f"{where}: {response.status_code} {response.reason or ''}".rstrip()
        message += f": {_error_detail(response)}"
        if response.status_code == 401:
            message += f" (check {TOKEN_ENV})"
        cls = MetalNotFound if response.status_code == 404 else MetalError
        raise cls(message, status=response.status_code)

    def _json(self, response: requests.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            raise MetalError(
                f"Equinix Metal API: {response.request.method} {response.url}: answer is not JSON"
            ) from None

    # -- Provider

    def create(self, project: str, spec: DeviceSpec) -> Device:
        """``POST /projects/{project}/devices`` (createDevice, 201) with ``device_create_body(spec)``."""
        response = self._request(
            "POST", f"/projects/{project}/devices", json=device_create_body(spec), expect=(201, 200)
        )
        return _device_from_json(self._json(response))

    def get(self, device_id: str) -> Device:
        """``GET /devices/{device_id}`` (findDeviceById, 200)."""
        return _device_from_json(self._json(self._request("GET", f"/devices/{device_id}")))

    def delete(self, device_id: str) -> None:
        """``DELETE /devices/{device_id}`` (deleteDevice, 204)."""
        self._request("DELETE", f"/devices/{device_id}", expect=(204, 200))

    def list(self, project: str, tag: str | None = None) -> list[Device]:
        """``GET /projects/{project}/devices`` (findProjectDevices) with ``tag`` as filter, following
        ``page`` until ``meta.next`` is absent (or ``meta.last_page`` is reached); at most 1000 pages.

        Only devices actually carrying ``tag`` are returned, whatever the server's filter did.
        """
        devices: list[Device] = []
        page = 1
        while True:
            params: dict[str, Any] = {"page": page, "per_page": self.per_page}
            if tag:
                params["tag"] = tag
            body = self._json(self._request("GET", f"/projects/{project}/devices", params=params))
            if not isinstance(body, Mapping) or not isinstance(body.get("devices"), list):
                raise MetalError(f"Equinix Metal API: GET /projects/{project}/devices: answer has no devices list")
            devices.extend(_device_from_json(d) for d in body["devices"])
            meta = body.get("meta") if isinstance(body.get("meta"), Mapping) else {}
            last_page = meta.get("last_page")
            has_next = bool(meta.get("next"))
            if isinstance(last_page, int):
                has_next = page < last_page
            if not has_next or not body["devices"] or page >= 1000:
                break
            page += 1
        if tag:
            devices = [d for d in devices if tag in d.tags]
        return devices


def _strip_reason(exc: Exception) -> str:
    """A one-line description of a requests/urllib3 exception."""
    text = str(exc).replace("\n", " ")
    return text[:300]


# ------------------------------------------------------------------------------------------- config


def settings_from_options(**options: Any) -> MetalSettings:
    """``MetalSettings`` from ``bootserver provision``'s command-line options (``plan``, ``metro``, ...:
    the ``MetalSettings`` keys; ``None`` for an option not given), checked like the config keys.
    Raises ``InputError`` (exit 2) naming the option, e.g. ``--plan: must not contain whitespace: ...``."""
    try:
        return MetalSettings(**options)
    except ValidationError as e:
        key, message = describe_error(e.errors()[0])
        option = key.split(".")[0].split("[")[0].replace("_", "-")
        raise InputError(f"--{option}: {message}") from None


def node_settings(config: Any, node: str) -> MetalSettings:
    """The merged ``metal:`` settings of ``node`` in a loaded ``bootserver.config.Config``: the node's
    mapping over its profile's (both already checked at config load). ``always_pxe`` defaults to true
    when the profile boots once (an installed node then gets the boot-disk script on every PXE boot,
    and ``bootserver nodes reinstall`` reinstalls it without touching the device)."""
    spec = config.nodes[node]
    profile = config.node_profile(node)
    merged = spec.metal.merged_over(profile.metal)
    if merged.always_pxe is None and profile.boots_once:
        merged = merged.model_copy(update={"always_pxe": True})
    return merged


def check_project_id(project: str) -> str:
    """Return ``project`` if it is a UUID (the API's project id format), else raise ``InputError``."""
    if not is_uuid(project):
        raise InputError(f"--project: not a project UUID: {project!r}")
    return project


def ipxe_userdata(chain_url: str) -> str:
    """The device userdata that makes Equinix's iPXE chain to ``chain_url``:
    ``#!ipxe`` newline ``chain --autofree <url>`` newline.

    Raises ``InputError`` when the URL is not http(s) or holds whitespace, control characters or
    ``${`` (which iPXE would expand), since such a script cannot be made safe.
    """
    parts = urlsplit(chain_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InputError(f"chain URL is not an http(s) URL: {chain_url!r}")
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in chain_url) or "${" in chain_url:
        raise InputError(f"chain URL cannot be put in an iPXE script: {chain_url!r}")
    return f"#!ipxe\nchain --autofree {chain_url}\n"


def build_device_spec(
    hostname: str,
    settings: MetalSettings,
    chain_url: str,
    *,
    via: str = "ipxe_script_url",
    managed_tag: str = DEFAULT_TAG,
    node: str | None = None,
) -> DeviceSpec:
    """Build the ``DeviceSpec`` of a node from its merged settings and its signed chain URL.

    ``via`` is ``ipxe_script_url`` (the device's iPXE fetches ``chain_url`` as its script) or
    ``userdata`` (``ipxe_userdata(chain_url)``). Tags are ``managed_tag`` first, then the settings'
    tags (duplicates dropped). ``operating_system`` is always ``custom_ipxe``. ``node`` names the node
    in error messages. Raises ``InputError`` (exit 2) when no ``plan`` or no location is set, or for
    a bad ``via``.
    """
    who = f"node {node}" if node else hostname
    if not settings.plan:
        raise InputError(f"{who}: no Equinix Metal plan: set metal.plan on the node or profile, or pass --plan")
    if settings.metro is None and settings.facility is None:
        raise InputError(f"{who}: no Equinix Metal location: set metal.metro on the node or profile, or pass --metro")
    if settings.spot_price_max is not None and settings.spot_instance is not True:
        raise InputError(f"{who}: metal.spot_price_max needs metal.spot_instance: true")
    if via == "ipxe_script_url":
        script, userdata = chain_url, None
        parts = urlsplit(chain_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InputError(f"chain URL is not an http(s) URL: {chain_url!r}")
    elif via == "userdata":
        script, userdata = None, ipxe_userdata(chain_url)
    else:
        raise InputError(f"--via: must be ipxe_script_url or userdata, not {via!r}")
    tags = [managed_tag]
    for t in settings.tags or ():
        if t not in tags:
            tags.append(t)
    return DeviceSpec(
        hostname=hostname,
        plan=settings.plan,
        metro=settings.metro,
        facility=settings.facility,
        ipxe_script_url=script,
        userdata=userdata,
        billing_cycle=settings.billing_cycle or "hourly",
        tags=tuple(tags),
        always_pxe=settings.always_pxe,
        spot_instance=settings.spot_instance,
        spot_price_max=settings.spot_price_max,
        hardware_reservation_id=settings.hardware_reservation_id,
        project_ssh_keys=settings.project_ssh_keys or (),
        customdata=settings.customdata,
    )


__all__ = [
    "API_URL_ENV",
    "BILLING_CYCLES",
    "DEFAULT_API_URL",
    "DEFAULT_TAG",
    "TOKEN_ENV",
    "Device",
    "DeviceSpec",
    "EquinixMetal",
    "IPAddress",
    "MetalError",
    "MetalGlobal",
    "MetalNotFound",
    "MetalRetry",
    "MetalSettings",
    "MissingTokenError",
    "NetworkPort",
    "Provider",
    "build_device_spec",
    "check_project_id",
    "device_create_body",
    "ipxe_userdata",
    "node_settings",
    "settings_from_options",
]
