"""Settings of the node state: the ``timeline:`` mapping (history kept per node) and ``state_store``
(where the timeline and the signing keys live: sqlite in ``state_dir``, or a shared PostgreSQL).

The model follows :mod:`bootserver.values` (:class:`SettingsModel`: strict, frozen, no unknown
keys); :mod:`bootserver.config.schema` adds it as one field of the document.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import BeforeValidator, Field, field_validator

from ..timeline import DEFAULT_STALL_AFTER, STAGES
from ..values import Duration, SettingsModel


class TimelineSettings(SettingsModel):
    """The top-level ``timeline:`` mapping. ``keep_events``: history rows kept per node (the oldest go
    first; repeats that change nothing share one row, see :mod:`bootserver.timeline`); default
    :data:`bootserver.timeline.KEEP_EVENTS`. ``stall_after``: ``{STAGE: DURATION}``, how long a node may
    stay in a stage before it counts as stalled (``90s``, ``10m``, ``1h``, ``2d`` or seconds; ``null``
    turns a default off), over :data:`bootserver.timeline.DEFAULT_STALL_AFTER`; any stage of the
    timeline can be named."""

    keep_events: int = Field(default=1000, ge=10, le=10_000_000)
    stall_after: dict[str, Duration | None] = Field(default_factory=dict)

    @field_validator("stall_after")
    @classmethod
    def _stall_after(cls, value: dict[str, int | None]) -> dict[str, int | None]:
        unknown = sorted(set(value) - set(STAGES))
        if unknown:
            raise ValueError(f"unknown stage {unknown[0]!r} (stages: {', '.join(STAGES)})")
        return value

    @property
    def stall_limits(self) -> dict[str, int]:
        """Seconds per stage after which a node in it is stalled: the defaults with ``stall_after`` over
        them (a stage set to ``null`` has none)."""
        merged: dict[str, int | None] = {**DEFAULT_STALL_AFTER, **self.stall_after}
        return {stage: limit for stage, limit in merged.items() if limit is not None}


def _url_as_mapping(value: Any) -> Any:
    """``state_store: postgresql://...`` is short for ``state_store: {url: postgresql://...}``."""
    return {"url": value} if isinstance(value, str) else value


class StateStoreSettings(SettingsModel):
    """The top-level ``state_store:`` (absent: sqlite and files in ``state_dir``). ``url``: a libpq
    connection URI ``postgresql://user@host:5432/db`` (``?sslmode=...`` and other libpq parameters
    allowed); ``password_file``: a file whose first line is the password (relative to the config file;
    without it libpq reads ``PGPASSWORD`` or ``~/.pgpass``). See :mod:`bootserver.state.postgresql`."""

    url: str
    password_file: str | None = None

    local_files = ("password_file",)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        from psycopg import conninfo  # on purpose here: psycopg loads only for a config that names a database

        if urlsplit(value).scheme not in ("postgresql", "postgres"):
            raise ValueError(f"not a postgresql:// URL: {value.split('@')[-1]!r}")
        try:
            conninfo.conninfo_to_dict(value)
        except Exception as e:  # psycopg.ProgrammingError: libpq's own message
            raise ValueError(f"not a PostgreSQL connection URL: {' '.join(str(e).split())}") from None
        return value


StateStoreField = Annotated[StateStoreSettings | None, BeforeValidator(_url_as_mapping)]
