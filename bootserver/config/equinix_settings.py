"""The Equinix Metal provider's settings: the ``metal:`` config mappings (top level, profiles, nodes).

The pydantic models :class:`MetalGlobal` and :class:`MetalSettings` that :mod:`bootserver.config`
names and checks at load, and their value types. The keys follow the Equinix Metal API v1 OpenAPI spec
(``tests/data/equinix-metal-oas3.yaml``). This module sits below the config's schema (docs/design.md,
Layers): it imports only the settings' value types (:mod:`bootserver.values`), never the provider
(:mod:`bootserver.providers.equinix`), which sits above the config and uses these models.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, Discriminator, Field, Tag, ValidationInfo, field_validator

from bootserver.values import SettingsModel, YamlList, check_http_url

#: Tag that marks the devices bootserver manages (default of ``metal.tag``).
DEFAULT_TAG = "bootserver"

#: A ``billing_cycle`` (enum of the Equinix Metal API's ``DeviceCreateInput.billing_cycle``).
BillingCycle = Literal["hourly", "daily", "monthly", "yearly"]

#: Allowed ``billing_cycle`` values.
BILLING_CYCLES: tuple[str, ...] = get_args(BillingCycle)


def is_uuid(value: str) -> bool:
    """Whether ``value`` parses as a UUID (as ``uuid.UUID`` reads it: with or without dashes, any case)."""
    try:
        uuid.UUID(value)
    except (ValueError, AttributeError, TypeError):
        return False
    return True


def _metal_word(value: str) -> str:
    """A non-empty string without whitespace (plan, metro and facility codes, tags, ids)."""
    if not value.strip():
        raise ValueError("must be a non-empty string")
    if any(c.isspace() for c in value):
        raise ValueError(f"must not contain whitespace: {value!r}")
    return value


def _metal_uuid(value: str) -> str:
    if not is_uuid(value):
        raise ValueError(f"must be a UUID: {value!r}")
    return value


MetalWord = Annotated[str, AfterValidator(_metal_word)]
MetalUUID = Annotated[str, AfterValidator(_metal_word), AfterValidator(_metal_uuid)]

#: Union tags of ``facility`` (one code or a list); error messages leave them out of key paths.
FACILITY_TAGS = ("<one facility>", "<facility list>")

Facility = Annotated[
    Annotated[MetalWord, Tag(FACILITY_TAGS[0])] | Annotated[YamlList[MetalWord], Tag(FACILITY_TAGS[1])],
    Discriminator(lambda v: FACILITY_TAGS[1] if isinstance(v, (list, tuple)) else FACILITY_TAGS[0]),
]


class MetalGlobal(SettingsModel):
    """The top-level ``metal:`` mapping: how ``bootserver provision``, ``deprovision`` and ``devices``
    reach the Equinix Metal API v1.

    ``api_url``: the API base URL (http or https, kept without a trailing ``/``; ``METAL_API_URL`` wins;
    ``None`` means ``https://api.equinix.com/metal/v1``). ``project``: the default project UUID (the
    ``{id}`` of ``POST /projects/{id}/devices``; ``--project`` wins). ``tag``: the device tag marking the
    devices bootserver manages (default ``bootserver``).
    """

    api_url: str | None = None
    project: str | None = None
    tag: MetalWord = DEFAULT_TAG

    @field_validator("api_url")
    @classmethod
    def _api_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return check_http_url(value)
        except ValueError:
            raise ValueError(f"must be an http(s) URL: {value!r}") from None

    @field_validator("project")
    @classmethod
    def _project(cls, value: str | None) -> str | None:
        if value is not None and not is_uuid(value):
            raise ValueError(f"must be a project UUID: {value!r}")
        return value


class MetalSettings(SettingsModel):
    """Device settings from a profile's or a node's ``metal:`` mapping (or from ``provision`` options).

    Each key has the name and meaning of the same member of the createDevice body of the Equinix Metal
    API v1, ``POST /projects/{id}/devices`` (``DeviceCreateInMetroInput`` /
    ``DeviceCreateInFacilityInput``, i.e. ``DeviceCreateInput`` plus a location; spec in
    ``tests/data/equinix-metal-oas3.yaml``). ``None`` means "not set here"; unset keys are left
    out of the request (the API's defaults apply), except ``billing_cycle``.

    * ``plan``: device plan slug, e.g. ``c3.small.x86``.
    * ``metro``: metro code, e.g. ``da``; or ``facility`` (deprecated by Equinix): one facility code,
      e.g. ``da11``, or a list of codes in order of preference (``[da11, any]``). Not both.
    * ``billing_cycle``: ``hourly``, ``daily``, ``monthly`` or ``yearly`` (``provision`` sends
      ``hourly`` when unset).
    * ``tags``: extra device tags, sent after ``metal.tag``.
    * ``spot_instance``: create a spot instance; ``spot_price_max``: the maximum bid in US dollars per
      hour (a finite number, at least 0; only with ``spot_instance`` not false).
    * ``hardware_reservation_id``: a hardware reservation UUID or ``next-available``.
    * ``project_ssh_keys``: UUIDs of project SSH keys to install.
    * ``customdata``: any mapping, shown in the device metadata.
    * ``always_pxe``: boot iPXE on every boot, not only the first (Equinix's default is false;
      :func:`node_settings` makes it true for profiles that boot once).

    Strings (codes, tags, ids) must be non-empty and free of whitespace.
    """

    plan: MetalWord | None = None
    metro: MetalWord | None = None
    facility: Facility | None = None
    billing_cycle: BillingCycle | None = None
    tags: YamlList[MetalWord] | None = None
    spot_instance: bool | None = None
    spot_price_max: Annotated[float, Field(allow_inf_nan=False)] | None = None
    hardware_reservation_id: MetalWord | None = None
    project_ssh_keys: YamlList[MetalUUID] | None = None
    customdata: dict[Any, Any] | None = None
    always_pxe: bool | None = None

    @field_validator("facility")
    @classmethod
    def _facility(cls, value: str | tuple[str, ...] | None, info: ValidationInfo) -> Any:
        if value == ():
            raise ValueError("must name at least one facility")
        if value is not None and info.data.get("metro") is not None:
            raise ValueError("set metro or facility (deprecated), not both")
        return value

    @field_validator("spot_price_max")
    @classmethod
    def _spot_price_max(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value is None:
            return None
        if value < 0:
            raise ValueError("must not be negative")
        if info.data.get("spot_instance") is False:
            raise ValueError("needs spot_instance: true")
        return float(value)

    #: Location is one unit: setting ``metro`` here drops the base's ``facility`` and the other way round.
    one_of = (("metro", "facility"),)


__all__ = [
    "BILLING_CYCLES",
    "DEFAULT_TAG",
    "FACILITY_TAGS",
    "BillingCycle",
    "Facility",
    "MetalGlobal",
    "MetalSettings",
    "MetalUUID",
    "MetalWord",
    "is_uuid",
]
