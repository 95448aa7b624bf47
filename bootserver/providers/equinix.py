"""The Equinix Metal provider: its ``metal:`` settings, its API client, its device requests.

Equinix Metal shut down on 2026-06-30 (it stopped selling in 2025); the provider stays for the record
and for anyone running a compatible API. A node's device is created with ``operating_system:
custom_ipxe`` and the node's signed chain URL as ``ipxe_script_url`` (or ``#!ipxe`` userdata).

``EquinixMetal`` follows the Equinix Metal API v1 OpenAPI spec (saved in
``tests/data/equinix-metal-oas3.yaml``): ``POST /projects/{id}/devices`` (createDevice),
``GET /devices/{id}`` (findDeviceById), ``PUT /devices/{id}`` (updateDevice), ``DELETE /devices/{id}``
(deleteDevice, 204) and ``GET /projects/{id}/devices`` (findProjectDevices, paginated with
``page``/``per_page``).

The provider owns its settings: the ``metal:`` config mappings (top level, profiles, nodes) are the
pydantic models ``MetalGlobal`` and ``MetalSettings`` of :mod:`bootserver.providers.equinix_settings`,
below the config, which names and checks them at load; ``node_settings`` here merges a node's settings
over its profile's.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Self
from urllib.parse import urlsplit

import requests
from pydantic import ValidationError

from bootserver import __version__
from bootserver.config.messages import describe_error
from bootserver.errors import InputError
from bootserver.providers.base import (
    MissingCredentials,
    Outcome,
    Poll,
    Provider,
    ProviderError,
    ProviderNotFound,
    RetryPolicy,
    retry_after_seconds,
)
from bootserver.providers.equinix_settings import (
    BILLING_CYCLES,
    DEFAULT_TAG,
    MetalGlobal,
    MetalSettings,
    is_uuid,
)
from bootserver.urls import Urls

log = logging.getLogger(__name__)

DEFAULT_API_URL = "https://api.equinix.com/metal/v1"
"""Base URL of the Equinix Metal API v1."""

TOKEN_ENV = "METAL_AUTH_TOKEN"
"""Environment variable holding the Equinix Metal API token (sent as ``X-Auth-Token``)."""

API_URL_ENV = "METAL_API_URL"
"""Environment variable overriding the API base URL (wins over the config key ``metal.api_url``)."""

USER_AGENT = (f"bootserver/{__version__} (+https://github.com/bootserver/bootserver) "
              f"python-requests/{requests.__version__}")

FAILED_STATES = frozenset({"failed"})
"""Device states that end ``provision --wait`` with an error."""

GONE_STATES = frozenset({"deprovisioning", "deleted"})
"""Device states that no longer count as "the node's device" when looking one up."""

# --------------------------------------------------------------------------------------------- errors


class MissingTokenError(MissingCredentials):
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
    """An Equinix Metal device as the API reports it (spec ``#/components/schemas/Device``).

    ``id`` is the device UUID, ``state`` the API's state word (``queued``, ``provisioning``,
    ``active``, ``failed``, ``deprovisioning``, ...), ``ip_addresses`` every assigned address, ``tags``
    the device's tags, ``network_ports`` its NICs and bonds, ``ipxe_script_url`` / ``userdata`` what
    its iPXE chains to (``None`` if unset).
    """

    id: str
    hostname: str
    state: str
    ip_addresses: tuple[IPAddress, ...] = ()
    tags: tuple[str, ...] = ()
    network_ports: tuple[NetworkPort, ...] = ()
    ipxe_script_url: str | None = None
    userdata: str | None = None


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
        raise ProviderError("Equinix Metal API: answer is not a device object")
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
        ipxe_script_url=data.get("ipxe_script_url") or None,
        userdata=data.get("userdata") or None,
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
    """A client of the Equinix Metal API v1, over one ``requests.Session``.

    ``token`` goes into the ``X-Auth-Token`` header and nowhere else (not in ``repr``, messages or
    logs). ``api_url`` is the API base URL (default ``DEFAULT_API_URL``). ``timeout`` is
    ``(connect, read)`` in seconds and applies to every call. Retries follow
    :class:`~bootserver.providers.base.RetryPolicy` (up to ``retries`` times, backoff
    ``backoff_factor * 2**(n-1)`` seconds, at most ``backoff_max``): on 429 for every call, on
    500/502/503/504 for GET, PUT and DELETE (a POST that failed with a 5xx may have created the device,
    and ``bootserver provision`` looks it up again on the next run instead of duplicating it), and on a
    failure to connect; never on a read timeout (the request may have been served). The server's
    ``Retry-After`` (seconds or HTTP date) or else ``X-RateLimit-Reset`` (seconds to wait; a value
    above 10^9 is read as a Unix time) is honoured up to ``max_retry_after`` seconds. ``retry_sleep``
    (seconds -> None) does the waiting. ``per_page`` is the page size used when listing.
    """

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
        self.retry = RetryPolicy(retries=retries, backoff=backoff_factor, backoff_max=backoff_max,
                                 max_retry_after=max_retry_after, sleep=retry_sleep or time.sleep)
        self._session = requests.Session()
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
        """Send one API call (with the retries above); return the response when its status is in
        ``expect``.

        Raises ``ProviderNotFound`` on 404, ``ProviderError`` on any other status (message
        ``Equinix Metal API: METHOD PATH: STATUS REASON: <API error text>``) or network failure.
        """
        url = self.api_url + path
        where = f"Equinix Metal API: {method} {path}"
        statuses = RETRY_STATUSES if method != "POST" else frozenset({429})
        try:
            response = self.retry.run(
                lambda: self._session.request(method, url, params=params, json=json, timeout=self.timeout),
                what=where,
                retry_on_result=lambda r: r.status_code in statuses,
                retry_on_exception=_connect_failed,
                asked_wait=_asked_wait,
            )
        except requests.RequestException as exc:
            # The exception text names the URL and the cause, never the headers.
            raise ProviderError(f"{where}: {type(exc).__name__}: {_strip_reason(exc)}") from None
        log.debug("%s %s -> %s", method, url, response.status_code)
        if response.status_code in expect:
            return response
        message = f"{where}: {response.status_code} {response.reason or ''}".rstrip()
        message += f": {_error_detail(response)}"
        if response.status_code == 401:
            message += f" (check {TOKEN_ENV})"
        cls = ProviderNotFound if response.status_code == 404 else ProviderError
        raise cls(message, status=response.status_code)

    def _json(self, response: requests.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            raise ProviderError(
                f"Equinix Metal API: {response.request.method} {response.url}: answer is not JSON"
            ) from None

    # -- calls

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

    def update(self, device_id: str, *, ipxe_script_url: str | None = None, userdata: str | None = None) -> Device:
        """``PUT /devices/{device_id}`` (updateDevice, body ``DeviceUpdateInput``) setting what its iPXE
        chains to: exactly one of ``ipxe_script_url`` and ``userdata``; the other is cleared (``""``)."""
        if (ipxe_script_url is None) == (userdata is None):
            raise ValueError("update needs exactly one of ipxe_script_url and userdata")
        body = {"ipxe_script_url": ipxe_script_url or "", "userdata": userdata or ""}
        return _device_from_json(self._json(self._request("PUT", f"/devices/{device_id}", json=body)))

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
                raise ProviderError(f"Equinix Metal API: GET /projects/{project}/devices: answer has no devices list")
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


#: Statuses retried for GET, PUT and DELETE (POST: 429 only).
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


def _connect_failed(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure to connect (retried), not a failure after sending (never retried)."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    if not isinstance(exc, requests.ConnectionError) or isinstance(exc, requests.ReadTimeout):
        return False
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    return type(reason).__name__ == "NewConnectionError" or "NewConnectionError" in str(exc)


def _asked_wait(response: requests.Response) -> float | None:
    """Seconds the API asked to wait before a retry of a 429/503: ``Retry-After``, else
    ``X-RateLimit-Reset`` (seconds to wait, or a Unix time when above 10^9); ``None`` when neither."""
    if response.status_code not in (429, 503):
        return None
    seconds = retry_after_seconds(response.headers.get("Retry-After"))
    if seconds is None:
        reset = retry_after_seconds(response.headers.get("X-RateLimit-Reset"))
        if reset is not None:
            seconds = max(0.0, reset - time.time()) if reset > 1e9 else reset
    return seconds


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


# ------------------------------------------------------------------------------------------ provider


def find_managed_device(devices: Iterable[Device], hostname: str, tag: str) -> Device | None:
    """Return the device among ``devices`` named ``hostname`` and tagged ``tag`` (ignoring devices
    being deleted), or ``None``. Raises ``ProviderError`` when more than one matches, naming their ids."""
    matches = [d for d in devices if d.hostname == hostname and tag in d.tags and d.state not in GONE_STATES]
    if len(matches) > 1:
        ids = ", ".join(d.id for d in matches)
        raise ProviderError(f"{len(matches)} devices named {hostname!r} with tag {tag!r}: {ids}; delete the extras")
    return matches[0] if matches else None


def device_state(project: str, device: Device) -> dict[str, Any]:
    """The node state's ``device`` member for ``device``: ``{"provider": "equinix", "project", "id",
    "hostname", "state", "ip_addresses": [{"address", "address_family", "cidr", "gateway", "public"}],
    "network_ports": [{"type", "name", "data": {"mac"}, "bond": {"name"}, "network_type"}],
    "updated_at"}`` (addresses and ports in the Equinix Metal OpenAPI spec's names, ``IPAssignment``
    and ``Port``). The server can bind a node to its device's addresses from ``ip_addresses``."""
    return {
        "provider": "equinix",
        "project": project,
        "id": device.id,
        "hostname": device.hostname,
        "state": device.state,
        "ip_addresses": [a.to_json() for a in device.ip_addresses],
        "network_ports": [p.to_json() for p in device.network_ports],
        "updated_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def format_device(device: Device, node: str | None = None) -> str:
    """One line per device: ``[node ]id state addr,addr,...`` (``-`` when it has no address yet)."""
    addresses = ",".join(a.address for a in device.ip_addresses) or "-"
    head = f"{node} " if node else ""
    return f"{head}{device.id} {device.state} {addresses}"


def chained_url(device: Device) -> tuple[str, str | None]:
    """``(via, url)``: how the device's iPXE finds its script (``ipxe_script_url`` or ``userdata``)
    and the URL it chains to (``None`` when it has neither, or userdata that is not ours)."""
    if device.ipxe_script_url:
        return "ipxe_script_url", device.ipxe_script_url
    lines = (device.userdata or "").splitlines()
    if len(lines) == 2 and lines[0] == "#!ipxe" and lines[1].startswith("chain --autofree "):
        return "userdata", lines[1].split(" ", 2)[2]
    return "userdata", None


class Equinix(Provider):
    """The ``equinix`` provider: one ``custom_ipxe`` device per node, named by the node's hostname and
    tagged ``metal.tag``, chaining to the node's signed chain URL.

    ``provision`` reuses the project's device with the node's hostname and tag, or creates one; a
    reused device whose chain URL is no longer current (another server URL, a key rotated by ``keys
    rotate``, less than half of ``server.signing.chain_ttl`` left) is re-pointed with ``PUT
    /devices/{id}``. ``deprovision`` deletes the device. ``devices`` lists the project's tagged devices.
    """

    name = "equinix"
    settings_key = "metal"
    settings_model = MetalSettings
    global_key = "metal"
    global_model = MetalGlobal
    platform_id = "packet"

    def __init__(self, config: Any, args: argparse.Namespace, client: EquinixMetal, urls: Any = None) -> None:
        self.config = config
        self.args = args
        self.client = client
        self.tag = config.metal.tag
        self.urls = urls or Urls(config)

    @classmethod
    def add_arguments(cls, command: str, parser: argparse.ArgumentParser) -> None:
        """``--project`` for every command; for ``provision`` the createDevice options."""
        group = parser.add_argument_group("Equinix Metal (provider equinix)")
        group.add_argument("--project", metavar="ID", help="Equinix Metal project UUID (default: metal.project)")
        if command != "provision":
            return
        group.add_argument("--via", choices=["ipxe_script_url", "userdata"], default="ipxe_script_url",
                           help="hand the device its chain URL as ipxe_script_url (default) or as #!ipxe userdata")
        group.add_argument("--plan", help="device plan, e.g. c3.small.x86 (overrides metal.plan)")
        where = group.add_mutually_exclusive_group()
        where.add_argument("--metro", help="metro code, e.g. da (overrides metal.metro)")
        where.add_argument("--facility", help="Equinix facility code (deprecated by Equinix; prefer --metro)")
        group.add_argument("--billing-cycle", choices=list(BILLING_CYCLES))
        group.add_argument("--tag", action="append", default=[], metavar="TAG",
                           help="extra device tag (repeatable)")
        group.add_argument("--spot-price-max", type=float, metavar="USD",
                           help="make a spot instance bidding at most USD per hour")
        group.add_argument("--hardware-reservation-id", metavar="ID", help="a reservation UUID or next-available")
        pxe = group.add_mutually_exclusive_group()
        pxe.add_argument("--always-pxe", dest="always_pxe", action="store_true", default=None,
                         help="boot iPXE on every boot, not only the first")
        pxe.add_argument("--no-always-pxe", dest="always_pxe", action="store_false")

    @classmethod
    def used_by(cls, config: Any, args: argparse.Namespace) -> bool:
        """Asked by ``devices`` when a project is known or a node is an Equinix node."""
        return bool(getattr(args, "project", None) or config.metal.project) or super().used_by(config, args)

    @classmethod
    def open(cls, config: Any, args: argparse.Namespace, urls: Any = None) -> Equinix:
        """A client from ``METAL_AUTH_TOKEN`` / ``METAL_API_URL`` / ``metal.api_url``. Checks the
        command's options first (exit 2 before any call). Raises ``MissingTokenError``."""
        if getattr(args, "spot_price_max", None) is not None and not args.spot_price_max >= 0:
            raise InputError(f"--spot-price-max: must not be negative, got {args.spot_price_max:g}")
        if getattr(args, "project", None):
            check_project_id(args.project)
        return cls(config, args, EquinixMetal.from_env(config.metal.api_url), urls)

    def close(self) -> None:
        """Close the API session."""
        self.client.close()

    def _project(self, recorded: Mapping[str, Any] | None = None) -> str:
        project = self.args.project or self.config.metal.project or (recorded or {}).get("project")
        if project is None:
            raise InputError("no Equinix Metal project: pass --project ID or set metal.project in the config")
        return check_project_id(project)

    def _specs(self, nodes: Sequence[str]) -> list[tuple[str, DeviceSpec]]:
        args = self.args
        overrides = settings_from_options(
            plan=args.plan, metro=args.metro, facility=args.facility, billing_cycle=args.billing_cycle,
            spot_instance=True if args.spot_price_max is not None else None,
            spot_price_max=args.spot_price_max, hardware_reservation_id=args.hardware_reservation_id,
            always_pxe=args.always_pxe,
        )
        out = []
        for node in nodes:
            settings = overrides.merged_over(node_settings(self.config, node))
            if args.tag:
                settings = settings.model_copy(update={"tags": (*(settings.tags or ()), *args.tag)})
            out.append((node, build_device_spec(self.config.node_hostname(node), settings, self.urls.chain(node),
                                                via=args.via, managed_tag=self.tag, node=node)))
        return out

    def provision(self, nodes: Sequence[str], recorded: Mapping[str, Mapping[str, Any]],
                  record: Callable[[str, dict[str, Any]], None],
                  say: Callable[[str, str], None]) -> list[Outcome]:
        """Create or reuse (and re-point) one device per node; every option is checked first."""
        project = self._project()
        specs = self._specs(nodes)
        existing = self.client.list(project, tag=self.tag)
        out = []
        for node, spec in specs:
            device = find_managed_device(existing, spec.hostname, self.tag)
            if device is None:
                device = self.client.create(project, spec)
                existing.append(device)
                say(node, f"created device {device.id} ({device.state})")
            else:
                say(node, f"reusing device {device.id} ({device.state})")
                device = self._repoint(node, device, spec)
            state = device_state(project, device)
            record(node, state)
            out.append(Outcome(node, state, self.line(node, state)))
        return out

    def _repoint(self, node: str, device: Device, spec: DeviceSpec) -> Device:
        """``PUT /devices/{id}`` with the node's chain URL when the device's is not current (or is
        handed over the other way, ``--via``)."""
        via, url = chained_url(device)
        wanted = "userdata" if spec.userdata is not None else "ipxe_script_url"
        if via == wanted and url is not None and self.urls.chain_is_current(node, url):
            return device
        log.info("node %s: device %s chains to an old URL; re-pointing it", node, device.id)
        updated = self.client.update(device.id, ipxe_script_url=spec.ipxe_script_url, userdata=spec.userdata)
        return updated

    def poll(self, node: str, device: Mapping[str, Any]) -> Poll:
        """``GET /devices/{id}``; ``failed`` ends the wait. A device gone (404) is an error."""
        try:
            current = self.client.get(device["id"])
        except ProviderNotFound:
            raise ProviderError(f"device {device['id']} disappeared while waiting for it") from None
        return Poll(current.state, device_state(device.get("project", ""), current),
                    failed=current.state in FAILED_STATES)

    def line(self, node: str, device: Mapping[str, Any]) -> str:
        """``node id state addr,addr,...``."""
        addresses = ",".join(a["address"] for a in device.get("ip_addresses") or ()) or "-"
        return f"{node} {device['id']} {device['state']} {addresses}"

    def deprovision(self, nodes: Sequence[str], recorded: Mapping[str, Mapping[str, Any]],
                    say: Callable[[str, str], None]) -> list[Outcome]:
        """Delete each node's device: the project's device with its hostname and tag, else the one
        recorded. A device the API no longer knows (404) counts as gone."""
        listed: dict[str, list[Device]] = {}
        out = []
        for node in nodes:
            rec = recorded.get(node) or {}
            project = self._project(rec)
            if project not in listed:
                listed[project] = self.client.list(project, tag=self.tag)
            device = find_managed_device(listed[project], self.config.node_hostname(node), self.tag)
            device_id = device.id if device else rec.get("id")
            deleted = False
            if device_id:
                try:
                    self.client.delete(device_id)
                    deleted = True
                    say(node, f"deleted device {device_id}")
                except ProviderNotFound:
                    say(node, f"device {device_id} was already gone")
            else:
                say(node, "no device")
            out.append(Outcome(node, None, f"{node} {device_id or '-'} {'deleted' if deleted else 'absent'}"))
        return out

    def devices(self, stages: Mapping[str, str], recorded: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """``hostname id state addresses node`` for each device of the project with ``metal.tag``: the
        project of ``--project``, else ``metal.project``, else the one of this config's Equinix devices
        recorded in the state store (``provision --project`` through another replica's config)."""
        projects = [d.get("project") for n, d in recorded.items()
                    if n in self.config.nodes and d.get("provider", "equinix") == self.name and d.get("project")]
        project = self._project({"project": projects[0]} if projects else None)
        by_hostname = {self.config.node_hostname(n): n for n in self.config.nodes}
        devices = self.client.list(project, tag=self.tag)
        return [f"{format_device(d, d.hostname)} {by_hostname.get(d.hostname, '-')}"
                for d in sorted(devices, key=lambda d: (d.hostname, d.id))]


PROVIDER = Equinix

__all__ = [
    "API_URL_ENV",
    "DEFAULT_API_URL",
    "TOKEN_ENV",
    "Device",
    "DeviceSpec",
    "Equinix",
    "EquinixMetal",
    "IPAddress",
    "MissingTokenError",
    "NetworkPort",
    "build_device_spec",
    "check_project_id",
    "device_create_body",
    "ipxe_userdata",
    "node_settings",
    "settings_from_options",
]
