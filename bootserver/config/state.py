"""Settings of the node state: the ``timeline:`` mapping (history kept per node).

The model follows :mod:`bootserver.config.types` (:class:`SettingsModel`: strict, frozen, no unknown
keys); :mod:`bootserver.config.schema` adds it as one field of the document.
"""

from __future__ import annotations

from pydantic import Field

from .types import SettingsModel


class TimelineSettings(SettingsModel):
    """The top-level ``timeline:`` mapping. ``keep_events``: history rows kept per node (the oldest go
    first; repeats that change nothing share one row, see :mod:`bootserver.timeline`); default
    :data:`bootserver.timeline.KEEP_EVENTS`."""

    keep_events: int = Field(default=1000, ge=10, le=10_000_000)
