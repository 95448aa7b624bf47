"""The Redfish provider's settings: the ``redfish:`` mapping of profiles and nodes (a node's BMC).

:class:`RedfishSettings`, which :mod:`bootserver.config` names and checks at load: the keys of every BMC
(:class:`~bootserver.config.bmc_settings.BmcSettings`) and Redfish's own. This module sits below the
config's schema (docs/design.md, Layers): it imports only the settings' value types (:mod:`bootserver.values`) and
the BMC base, never the provider (:mod:`bootserver.providers.redfish`), which sits above the config and
uses this model.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import BeforeValidator, field_validator

from bootserver.config.bmc_settings import BmcSettings, check_word
from bootserver.values import null_as_empty


def _check_address(value: str | None) -> str | None:
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"must be an http(s) URL of the BMC, e.g. https://bmc.example, got {value!r}")
    if parts.username or parts.password:
        raise ValueError("must not hold credentials: use username and password_file or password_env")
    return value.rstrip("/")


class RedfishSettings(BmcSettings):
    """``nodes.<n>.redfish`` / ``profiles.<p>.redfish``: how to reach a node's BMC (node keys win).

    * ``address``: the BMC's base URL (``https://bmc.example``; the service root is ``/redfish/v1/``).
    * ``system``: the ``ComputerSystem`` to drive: its member path (``/redfish/v1/Systems/1``) or id
      (``1``); optional when the BMC has exactly one.
    * ``username``, ``password_file`` / ``password_env``, ``timeout``: as every BMC's
      (:class:`~bootserver.config.bmc_settings.BmcSettings`); ``timeout`` bounds each BMC answer
      (default 30).
    * ``verify_tls``: ``true`` (default: the system's CAs), ``false``, or a CA file (PEM).
    * ``boot_mode``: ``uefi`` or ``legacy``; unset leaves the BMC's boot mode as it is.
    * ``boot_source``: ``pxe`` (the default: boot from the network once, a DHCP server points the
      machine at us), ``virtual-media`` (no DHCP: the BMC inserts the node's signed boot image,
      ``/iso/<node>.iso``, as its virtual CD and boots from it once; docs/on-premises.md, "No DHCP") or
      ``http`` (no DHCP boot options: the next boot is the firmware's UEFI HTTP boot of that image's URL,
      ``BootSourceOverrideTarget: UefiHttp`` with ``HttpBootUri``).
    """

    system: str | None = None
    verify_tls: bool | str | None = None

    _address = field_validator("address")(classmethod(lambda cls, v: _check_address(v)))
    _system = field_validator("system")(classmethod(lambda cls, v: check_word(v)))

    #: Checked by ``check-config``: the password file and a CA file given as ``verify_tls``.
    local_files = ("password_file", "verify_tls")


RedfishField = Annotated[RedfishSettings, BeforeValidator(null_as_empty)]


__all__ = ["RedfishField", "RedfishSettings"]
