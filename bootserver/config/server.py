"""The ``server:`` mapping of the config file (README.md, "Configuration reference"; docs/config.md): the
listeners and their base URLs, TLS, URL signing, the admin listener, discovery, request limits and the
artifact rate. :class:`ServerConfig` is the field ``server`` of :class:`bootserver.config.schema.Document`.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import BeforeValidator, Field, field_validator

from ..values import (
    ByteRate,
    Duration,
    HttpUrl,
    ListenAddress,
    ListenAddressOrSocket,
    Networks,
    OneOrList,
    SettingsModel,
    YamlList,
    null_as_empty,
    one_per_family,
    split_listen,
    url_for_family,
)


class TLSConfig(SettingsModel):
    """``server.tls``: the HTTPS listener.

    ``listen`` (``host:port``) serves HTTPS with ``cert``/``key`` (PEM files; default
    ``<state_dir>/tls/server.crt`` and ``server.key`` as written by ``bootserver tls init``); ``ca`` (PEM,
    default ``<state_dir>/tls/ca.crt``) is embedded into stubs. ``base_url`` is the https URL Ignition
    uses for real configs (default ``https://<base_url host>:<listen port>``). Real configs are refused
    (403) on the plain HTTP listener unless ``allow_plain_configs`` is true.
    """

    listen: ListenAddress
    base_url: HttpUrl | None = None
    cert: str | None = None
    key: str | None = None
    ca: str | None = None
    allow_plain_configs: bool = False

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("https://"):
            raise ValueError(f"must be an https:// URL, got {value!r}")
        return value


class SigningConfig(SettingsModel):
    """``server.signing``: lifetimes of signed URLs and of rotated keys, in seconds or ``30m``/``24h``/``7d``.

    ``chain_ttl``: validity of the chain URLs a device keeps (``provision``, ``bootserver url``): 3650d,
    so that it never dies on a clock the operator does not see; ``keys rotate`` revokes them. ``install_ttl``: validity
    of the URLs inside a served script or stub, long enough to finish an install (24h). ``key_grace``:
    how long ``bootserver keys rotate`` keeps accepting the previous key (24h). Expiries are rounded up
    to the hour.
    """

    chain_ttl: Duration = 3650 * 86400
    install_ttl: Duration = 86400
    key_grace: Duration = 86400


#: An entry of ``server.admin.hosts``: a DNS name or an IP address (IPv6 in brackets), with an optional port.
ADMIN_HOST_RE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}[A-Za-z0-9])?)(:\d{1,5})?$")


class AdminConfig(SettingsModel):
    """``server.admin``: the admin listener (the live page ``/``, ``/nodes``, ``/nodes/{node}``,
    ``/metrics``, also ``/healthz`` and ``/readyz``), kept off the device network. ``listen`` is
    ``host:port`` or the absolute path of a Unix socket; default ``127.0.0.1:<server.listen port + 1>``.
    ``token_file``: a file (relative to the config file) whose first line is the bearer token every admin
    request but ``/healthz`` and ``/readyz`` must carry; required when ``listen`` is not a loopback
    address or a Unix socket (:meth:`Config.admin_token`). ``hosts``: more names the admin listener
    answers to (the ``Host`` a reverse proxy or a DNS name puts in requests), ``name`` (any port) or
    ``name:port``; besides them a TCP admin listener answers only requests whose ``Host`` is its own
    address, ``localhost``, ``127.0.0.1`` or ``[::1]`` with its port (else ``421``: a page of another
    site cannot read it by DNS rebinding; :class:`bootserver.http.gate.AdminNames`)."""

    listen: ListenAddressOrSocket | None = None
    token_file: str | None = None
    hosts: YamlList[str] = ()

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for i, host in enumerate(value):
            if not ADMIN_HOST_RE.match(host):
                raise ValueError(f"item {i}: not a host name or address with an optional :port: {host!r}")
        return tuple(h.lower() for h in value)


class DiscoveryConfig(SettingsModel):
    """``server.discovery``: machines that match no node wait to be adopted (``bootserver.discovery``).

    ``enabled`` (``server.discovery: false`` for short): ``/boot.ipxe`` answers an unknown machine a
    script that reports its facts and asks again every ``every`` seconds; off, it gets ``404`` as
    before. ``keep``: records kept at most (the oldest by last report are dropped); ``per_address``:
    seconds between two recorded reports from one client address (more are answered, not recorded)."""

    enabled: bool = True
    keep: int = Field(default=1000, ge=1, le=1_000_000)
    every: Duration = Field(default=30, ge=5, le=3600)
    per_address: int = Field(default=5, ge=0, le=3600)


def _discovery_shorthand(value: Any) -> Any:
    return {"enabled": value} if isinstance(value, bool) else null_as_empty(value)


class ServerConfig(SettingsModel):
    """``server``: where to listen (``host:port``), the URL devices use to reach us, and security limits.

    ``listen`` and ``base_url`` each take one value or a list: one listener per address, and one base URL
    per address family (``["http://192.0.2.1:8080", "http://[2001:db8::1]:8080"]``); a machine is handed
    URLs on the base URL of the family it asked from (:meth:`base_url_for`)."""

    listen: OneOrList[ListenAddress] = ("127.0.0.1:8080",)
    base_url: OneOrList[HttpUrl] | None = None
    tls: TLSConfig | None = None
    signing: SigningConfig = Field(default_factory=SigningConfig)
    trusted_proxies: Networks = ()
    max_concurrent: int = Field(default=256, ge=1, le=100000)
    max_queued: int = Field(default=4096, ge=0, le=1000000)
    request_timeout: Duration = 60
    keepalive_timeout: Duration = 15
    #: Bytes per second each artifact answer is held to (off: as fast as the network takes them); for
    #: NICs on which iPXE stalls on large downloads. A node's profile may set its own.
    artifact_rate: ByteRate | None = None
    #: Worker processes of ``serve`` (``--workers`` overrides); more than 1 shares the ports.
    workers: int = Field(default=1, ge=1, le=256)
    #: The facility this server sits in: its ``mirrors`` come first in the upstream chain.
    facility: str | None = None
    admin: AdminConfig = Field(default_factory=AdminConfig)
    discovery: Annotated[DiscoveryConfig, BeforeValidator(_discovery_shorthand)] = Field(
        default_factory=DiscoveryConfig)

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        seen: set[tuple[str, int]] = set()
        for where in value:
            host, port = split_listen(where)
            if (host, port) in seen:
                raise ValueError(f"{where} is listed twice")
            seen.add((host, port))
        return value

    @field_validator("base_url")
    @classmethod
    def _base_urls(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return one_per_family(value)

    @property
    def listens(self) -> tuple[tuple[str, int], ...]:
        """Every device listener as ``(host, port)`` (IPv6 without brackets), in ``listen`` order."""
        return tuple(split_listen(where) for where in self.listen)

    @property
    def admin_listen(self) -> str:
        """Where the admin listener listens: ``server.admin.listen`` (a Unix socket when it is an
        absolute path), else ``127.0.0.1:<port + 1>`` (the port of the first ``listen``), or the next port
        after it that no device listener (``listen``, ``tls.listen``) takes (counting down from
        ``port - 1`` at the top of the range)."""
        if self.admin.listen:
            return self.admin.listen
        taken = {port for _, port in self.listens}
        if self.tls is not None:
            taken.add(split_listen(self.tls.listen)[1])
        step = 1 if self.port < 65534 else -1
        port = self.port + step
        while port in taken:
            port += step
        return f"127.0.0.1:{port}"

    @property
    def admin_is_local(self) -> bool:
        """Whether :attr:`admin_listen` is a Unix socket or a loopback address (``127.0.0.0/8``, ``::1``,
        ``localhost``): only this machine reaches it."""
        where = self.admin_listen
        if where.startswith("/"):
            return True
        host = split_listen(where)[0]
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    @property
    def host(self) -> str:
        """Host part of the first ``listen`` (IPv6 without brackets)."""
        return self.listens[0][0]

    @property
    def port(self) -> int:
        """TCP port of the first ``listen``."""
        return self.listens[0][1]

    @property
    def effective_base_urls(self) -> tuple[str, ...]:
        """``base_url`` if set, else one ``http://<listen>`` per listener (``localhost`` for a wildcard
        address, once), in order: the URLs machines are handed, the first one where a family is unknown."""
        if self.base_url:
            return self.base_url
        out: list[str] = []
        for host, port in self.listens:
            if host in ("0.0.0.0", "::", ""):
                host = "localhost"
            elif ":" in host:
                host = f"[{host}]"
            url = f"http://{host}:{port}"
            if url not in out:
                out.append(url)
        return tuple(out)

    @property
    def effective_base_url(self) -> str:
        """The first of :attr:`effective_base_urls`: what is handed out where no client's address family
        is known (``render``, ``provision``, boot images, the loaders' built-in URL)."""
        return self.effective_base_urls[0]

    def base_url_for(self, family: int | None) -> str:
        """The base URL a machine asking over address family ``family`` (``4``, ``6``; ``None``: not
        known) is handed: the base URL whose host is an address of that family, else the first one whose
        host is a name (reachable over either), else the first (:func:`~bootserver.values.url_for_family`)."""
        return url_for_family(self.effective_base_urls, family)

    @property
    def https_base_url(self) -> str | None:
        """The https base URL of real configs when ``tls`` is set (``tls.base_url``, else the host of
        :attr:`effective_base_url` with the port of ``tls.listen``), else ``None``."""
        if self.tls is None:
            return None
        if self.tls.base_url:
            return self.tls.base_url
        return self.https_base_url_for(None)

    def https_base_url_for(self, family: int | None) -> str | None:
        """:attr:`https_base_url` for a machine asking over ``family``: ``tls.base_url`` when set, else
        the host of :meth:`base_url_for` with the port of ``tls.listen``; ``None`` without ``tls``."""
        if self.tls is None:
            return None
        if self.tls.base_url:
            return self.tls.base_url
        host = urlsplit(self.base_url_for(family)).hostname or "localhost"
        if ":" in host:
            host = f"[{host}]"
        return f"https://{host}:{split_listen(self.tls.listen)[1]}"
