"""The IPMI provider's settings: the ``ipmi:`` mapping of profiles and nodes (a node's BMC over IPMI 2.0).

:class:`IpmiSettings`, which :mod:`bootserver.config` names and checks at load: the keys of every BMC
(:class:`~bootserver.config.bmc_settings.BmcSettings`) and IPMI's own. This module sits below the
config's schema (docs/design.md, Layers): it imports only the settings' value types (:mod:`bootserver.values`) and
the BMC base, never the provider (:mod:`bootserver.providers.ipmi`), which sits above the config and uses
this model.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated

from pydantic import BeforeValidator, Field, field_validator

from bootserver.config.bmc_settings import BmcSettings
from bootserver.values import HOSTNAME_RE, null_as_empty

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


class IpmiSettings(BmcSettings):
    """``nodes.<n>.ipmi`` / ``profiles.<p>.ipmi``: how to reach a node's BMC over IPMI (node keys win).

    * ``address``: the BMC's host name or IP address; ``port``: its RMCP+ UDP port (default 623).
    * ``username``, ``password_file`` / ``password_env``, ``timeout``: as every BMC's
      (:class:`~bootserver.config.bmc_settings.BmcSettings`); ``timeout`` bounds one BMC command,
      session and retries included (default 30).
    * ``boot_mode``: ``uefi`` (the default) or ``legacy``: the boot-flags byte of the one-time network
      boot (IPMI v2.0, "Set System Boot Options", parameter 5).
    * ``persistent``: ``true`` sets the network boot for every boot, not only the next one (default
      ``false``: once).
    * ``boot_source``: only ``pxe``; ``virtual-media`` is refused by the config check naming the node
      (IPMI has no virtual media: that is Redfish's, ``provider: redfish``).
    * ``cipher_suite``: the RMCP+ cipher suite ID, 1-17 (default 3); 0 (no authentication) is refused.
    """

    port: Annotated[int, Field(ge=1, le=65535)] | None = None
    persistent: bool | None = None
    cipher_suite: Annotated[int, Field(ge=0, le=17)] | None = None

    _address = field_validator("address")(classmethod(lambda cls, v: _check_address(v)))

    @field_validator("cipher_suite")
    @classmethod
    def _cipher_suite(cls, value: int | None) -> int | None:
        if value == 0:
            raise ValueError("cipher suite 0 authenticates nothing (anyone on the BMC's network could power "
                             "the machine); use 3 or 17")
        return value


IpmiField = Annotated[IpmiSettings, BeforeValidator(null_as_empty)]


__all__ = ["DEFAULT_CIPHER_SUITE", "DEFAULT_PORT", "IpmiField", "IpmiSettings"]
