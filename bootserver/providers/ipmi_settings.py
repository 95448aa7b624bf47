"""The IPMI provider's settings: the ``ipmi:`` mapping of profiles and nodes (a node's BMC over IPMI 2.0).

:class:`IpmiSettings`, which :mod:`bootserver.config` names and checks at load. This module sits below
the config (docs/design.md, Layers): it imports only the settings' value types (:mod:`bootserver.values`),
never the provider (:mod:`bootserver.providers.ipmi`), which sits above the config and uses this model.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator

from bootserver.values import HOSTNAME_RE, SettingsModel, null_as_empty

#: The UDP port of RMCP+ (IPMI v2.0, section 13.1), when ``ipmi.port`` is not set.
DEFAULT_PORT = 623

#: The cipher suite when ``ipmi.cipher_suite`` is not set: 3 (RAKP-HMAC-SHA1, HMAC-SHA1-96,
#: AES-CBC-128), the one IPMI v2.0 (table 22-20) asks every BMC to offer; ipmitool 1.8.19 defaults to
#: 17 (SHA-256), which many BMCs (and OpenIPMI's ``ipmi_sim``) do not have.
DEFAULT_CIPHER_SUITE = 3


def _check_address(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        pass
    if not HOSTNAME_RE.match(value) or "\n" in value:
        raise ValueError(f"must be the BMC's host name or IP address (no scheme, no port: use ipmi.port), "
                         f"got {value!r}")
    return value


class IpmiSettings(SettingsModel):
    """``nodes.<n>.ipmi`` / ``profiles.<p>.ipmi``: how to reach a node's BMC over IPMI (node keys win).

    * ``address``: the BMC's host name or IP address; ``port``: its RMCP+ UDP port (default 623).
    * ``username``; ``password_file`` (a file holding the password, relative to the config file) or
      ``password_env`` (an environment variable holding it): one of the two; setting one here drops
      the other from the profile.
    * ``boot_mode``: ``uefi`` (the default) or ``legacy``: the boot-flags byte of the one-time network
      boot (IPMI v2.0, "Set System Boot Options", parameter 5).
    * ``persistent``: ``true`` sets the network boot for every boot, not only the next one (default
      ``false``: once).
    * ``boot_source``: only ``pxe``; ``virtual-media`` is refused by the config check naming the node
      (IPMI has no virtual media: that is Redfish's, ``provider: redfish``).
    * ``cipher_suite``: the RMCP+ cipher suite ID, 1-17 (default 3); 0 (no authentication) is refused.
    * ``timeout``: seconds one BMC command (session and request) may take, retries included (default 30).
    """

    address: str | None = None
    port: Annotated[int, Field(ge=1, le=65535)] | None = None
    username: str | None = None
    password_file: str | None = None
    password_env: str | None = None
    boot_mode: Literal["uefi", "legacy"] | None = None
    persistent: bool | None = None
    boot_source: Literal["pxe", "virtual-media"] | None = None
    cipher_suite: Annotated[int, Field(ge=0, le=17)] | None = None
    timeout: Annotated[float, Field(gt=0, le=3600)] | None = None

    _address = field_validator("address")(classmethod(lambda cls, v: _check_address(v)))

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, value: Any) -> Any:
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("cipher_suite")
    @classmethod
    def _cipher_suite(cls, value: int | None) -> int | None:
        if value == 0:
            raise ValueError("cipher suite 0 authenticates nothing (anyone on the BMC's network could power "
                             "the machine); use 3 or 17")
        return value

    @field_validator("username", "password_file", "password_env")
    @classmethod
    def _word(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or any(c.isspace() for c in value)):
            raise ValueError(f"must be a non-empty string without whitespace: {value!r}")
        return value

    @field_validator("password_env")
    @classmethod
    def _one_password(cls, value: str | None, info: Any) -> str | None:
        if value is not None and info.data.get("password_file") is not None:
            raise ValueError("set password_file or password_env, not both")
        return value

    #: The password source is one unit: setting one here drops the other from the base.
    one_of = (("password_file", "password_env"),)
    #: Checked by ``check-config`` (:func:`bootserver.config.check_local_inputs`): the password file.
    local_files = ("password_file",)


IpmiField = Annotated[IpmiSettings, BeforeValidator(null_as_empty)]


__all__ = ["DEFAULT_CIPHER_SUITE", "DEFAULT_PORT", "IpmiField", "IpmiSettings"]
