"""The Redfish provider's settings: the ``redfish:`` mapping of profiles and nodes (a node's BMC).

:class:`RedfishSettings`, which :mod:`bootserver.config` names and checks at load. This module sits
below the config (docs/design.md, Layers): it imports only the settings' value types
(:mod:`bootserver.values`), never the provider (:mod:`bootserver.providers.redfish`), which sits above
the config and uses this model.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BeforeValidator, Field, field_validator

from bootserver.values import SettingsModel, null_as_empty


def _check_address(value: str | None) -> str | None:
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"must be an http(s) URL of the BMC, e.g. https://bmc.example, got {value!r}")
    if parts.username or parts.password:
        raise ValueError("must not hold credentials: use username and password_file or password_env")
    return value.rstrip("/")


class RedfishSettings(SettingsModel):
    """``nodes.<n>.redfish`` / ``profiles.<p>.redfish``: how to reach a node's BMC (node keys win).

    * ``address``: the BMC's base URL (``https://bmc.example``; the service root is ``/redfish/v1/``).
    * ``system``: the ``ComputerSystem`` to drive: its member path (``/redfish/v1/Systems/1``) or id
      (``1``); optional when the BMC has exactly one.
    * ``username``; ``password_file`` (a file holding the password, relative to the config file) or
      ``password_env`` (an environment variable holding it): one of the two; setting one here drops
      the other from the profile.
    * ``verify_tls``: ``true`` (default: the system's CAs), ``false``, or a CA file (PEM).
    * ``boot_mode``: ``uefi`` or ``legacy``; unset leaves the BMC's boot mode as it is.
    * ``boot_source``: ``pxe`` (the default: boot from the network once, a DHCP server points the
      machine at us) or ``virtual-media`` (no DHCP: the BMC inserts the node's signed boot image,
      ``/iso/<node>.iso``, as its virtual CD and boots from it once; docs/on-premises.md, "No DHCP").
    * ``timeout``: seconds to wait for each BMC answer (default 30).
    """

    address: str | None = None
    system: str | None = None
    username: str | None = None
    password_file: str | None = None
    password_env: str | None = None
    verify_tls: bool | str | None = None
    boot_mode: Literal["uefi", "legacy"] | None = None
    boot_source: Literal["pxe", "virtual-media"] | None = None
    timeout: Annotated[float, Field(gt=0, le=3600)] | None = None

    _address = field_validator("address")(classmethod(lambda cls, v: _check_address(v)))

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, value: Any) -> Any:
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("system", "username", "password_file", "password_env")
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
    #: Checked by ``check-config``: the password file and a CA file given as ``verify_tls``.
    local_files = ("password_file", "verify_tls")


RedfishField = Annotated[RedfishSettings, BeforeValidator(null_as_empty)]


__all__ = ["RedfishField", "RedfishSettings"]
