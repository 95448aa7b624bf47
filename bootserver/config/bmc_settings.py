"""What the settings of every BMC provider share: :class:`BmcSettings`, the base of the ``redfish:`` and
``ipmi:`` mappings of profiles and nodes (:mod:`bootserver.config.redfish_settings`,
:mod:`bootserver.config.ipmi_settings`).

A BMC is reached at an address with a user name and a password that bootserver reads from a file or an
environment variable (never from the config itself), boots its machine in a boot mode from a boot source,
and answers within a timeout. This module sits below the config's schema (docs/design.md, Layers): it imports only
the settings' value types (:mod:`bootserver.values`).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator

from bootserver.values import SettingsModel


def check_word(value: str | None) -> str | None:
    """``value`` when it is ``None`` or a non-empty string without whitespace; else ``ValueError``."""
    if value is not None and (not value.strip() or any(c.isspace() for c in value)):
        raise ValueError(f"must be a non-empty string without whitespace: {value!r}")
    return value


class BmcSettings(SettingsModel):
    """The keys every BMC provider's mapping has (node keys win over the profile's):

    * ``address``: how to reach the BMC (each provider checks its form: a URL for Redfish, a host name
      or IP address for IPMI).
    * ``username``; ``password_file`` (a file holding the password, relative to the config file),
      ``password_env`` (an environment variable holding it) or ``password_sealed`` (a password given to
      the fleet API, sealed: :mod:`bootserver.sealing`): one of them; setting one here drops the others
      from the profile. The password is read when a command needs it
      (:func:`bootserver.providers.bmc.BmcProvider.password`).
    * ``boot_mode``: ``uefi`` or ``legacy``.
    * ``boot_source``: ``pxe`` (boot from the network once; the default), ``virtual-media`` (the
      node's boot image as the BMC's virtual CD: Redfish only) or ``http`` (the firmware's UEFI HTTP boot
      of the node's boot image URL: Redfish only).
    * ``timeout``: seconds one BMC request may take (default 30).
    """

    address: str | None = None
    username: str | None = None
    password_file: str | None = None
    password_env: str | None = None
    #: The password sealed by the fleet API (``bootserver.sealing``; the API's write-only ``password``):
    #: never written by hand, never shown by the API.
    password_sealed: str | None = None
    boot_mode: Literal["uefi", "legacy"] | None = None
    boot_source: Literal["pxe", "virtual-media", "http"] | None = None
    timeout: Annotated[float, Field(gt=0, le=3600)] | None = None

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, value: Any) -> Any:
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("username", "password_file", "password_env")
    @classmethod
    def _word(cls, value: str | None) -> str | None:
        return check_word(value)

    @field_validator("password_env")
    @classmethod
    def _one_password(cls, value: str | None, info: Any) -> str | None:
        if value is not None and info.data.get("password_file") is not None:
            raise ValueError("set password_file or password_env, not both")
        return value

    @field_validator("password_sealed")
    @classmethod
    def _sealed_alone(cls, value: str | None, info: Any) -> str | None:
        if value is not None and (info.data.get("password_file") is not None
                                  or info.data.get("password_env") is not None):
            raise ValueError("a password (password_sealed) and password_file or password_env: set one")
        return value

    #: The password source is one unit: setting one here drops the others from the base.
    one_of = (("password_file", "password_env", "password_sealed"),)
    #: Checked by ``check-config`` (:func:`bootserver.config.check_local_inputs`): the password file.
    local_files: ClassVar[tuple[str, ...]] = ("password_file",)


__all__ = ["BmcSettings", "check_word"]
