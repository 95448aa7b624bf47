"""The Equinix Metal API v1 client and its data types (no config, no command line).

``EquinixMetal`` follows the Equinix Metal API v1 OpenAPI spec (saved in
``tests/data/equinix-metal-oas3.yaml``): ``POST /projects/{id}/devices`` (createDevice),
``GET /devices/{id}`` (findDeviceById), ``PUT /devices/{id}`` (updateDevice), ``DELETE /devices/{id}``
(deleteDevice, 204) and ``GET /projects/{id}/devices`` (findProjectDevices, paginated with
``page``/``per_page``). :class:`Device`, :class:`DeviceSpec`, :class:`IPAddress` and
:class:`NetworkPort` are the parts of the API's ``Device``, ``DeviceCreateInput``, ``IPAssignment`` and
``Port`` that bootserver reads or sends. The provider (:mod:`bootserver.providers.equinix`) drives this
client; it imports neither the config nor the URL builder (docs/design.md, Layers).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

from bootserver import __version__
from bootserver.providers.base import (
    MissingCredentials,
    ProviderError,
    ProviderNotFound,
    RetryPolicy,
    retry_after_seconds,
)

log = logging.getLogger(__name__)

DEFAULT_API_URL = "https://api.equinix.com/metal/v1"
"""Base URL of the Equinix Metal API v1."""

TOKEN_ENV = "METAL_AUTH_TOKEN"
"""Environment variable holding the Equinix Metal API token (sent as ``X-Auth-Token``)."""

API_URL_ENV = "METAL_API_URL"
"""Environment variable overriding the API base URL (wins over the config key ``metal.api_url``)."""

if TYPE_CHECKING:
    import requests


def user_agent() -> str:
    """The ``User-Agent`` of our API requests (requests is imported on first use: every command builds
    its parser from the providers' options, and requests is a tenth of a second of its start-up)."""
    import requests
    return (f"bootserver/{__version__} (+https://github.com/bootserver/bootserver) "
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


def device_from_json(data: Mapping[str, Any]) -> Device:
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
            port_data, bond = (value if isinstance(value, Mapping) else {}
                               for value in (item.get("data"), item.get("bond")))
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
        import requests  # on first use (see user_agent)

        self._session = requests.Session()
        self._session.headers.update(
            {
                "X-Auth-Token": token,
                "User-Agent": user_agent(),
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
        import requests  # loaded by then (see user_agent)

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
        return device_from_json(self._json(response))

    def get(self, device_id: str) -> Device:
        """``GET /devices/{device_id}`` (findDeviceById, 200)."""
        return device_from_json(self._json(self._request("GET", f"/devices/{device_id}")))

    def delete(self, device_id: str) -> None:
        """``DELETE /devices/{device_id}`` (deleteDevice, 204)."""
        self._request("DELETE", f"/devices/{device_id}", expect=(204, 200))

    def update(self, device_id: str, *, ipxe_script_url: str | None = None, userdata: str | None = None) -> Device:
        """``PUT /devices/{device_id}`` (updateDevice, body ``DeviceUpdateInput``) setting what its iPXE
        chains to: exactly one of ``ipxe_script_url`` and ``userdata``; the other is cleared (``""``)."""
        if (ipxe_script_url is None) == (userdata is None):
            raise ValueError("update needs exactly one of ipxe_script_url and userdata")
        body = {"ipxe_script_url": ipxe_script_url or "", "userdata": userdata or ""}
        return device_from_json(self._json(self._request("PUT", f"/devices/{device_id}", json=body)))

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
            devices.extend(device_from_json(d) for d in body["devices"])
            raw_meta = body.get("meta")
            meta = raw_meta if isinstance(raw_meta, Mapping) else {}
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
    import requests  # loaded by then (see user_agent)

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


__all__ = [
    "API_URL_ENV",
    "DEFAULT_API_URL",
    "FAILED_STATES",
    "GONE_STATES",
    "RETRY_STATUSES",
    "TOKEN_ENV",
    "Device",
    "DeviceSpec",
    "EquinixMetal",
    "IPAddress",
    "MissingTokenError",
    "NetworkPort",
    "device_create_body",
    "device_from_json",
    "user_agent",
]
