"""The fleet view: every node the state store knows (the configured ones, and any other with history),
each with its timeline state, its profile and its stall deadline, and on request its device record.
One view, read one way, for ``GET /nodes``, the live page, ``bootserver nodes`` and the stall watch.

A node *stalls* when it is still in a stage past its limit under ``timeline.stall_after``
(:func:`bootserver.timeline.stall_deadline`); a node's final stage never stalls.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .config import Config, ResolvedNode
from .inventory import inventory
from .state import DeviceStore, TimelineStore
from .timeline import NodeState, final_stages, stall_deadline


@dataclass(frozen=True, slots=True)
class FleetNode:
    """One node of the fleet view: its timeline ``state``, its ``profile`` (``None``: not in the config
    any more, history only), ``stall_at`` (unix seconds from which it is stalled; ``None``: it cannot
    stall now) and ``device`` (its provider's device record; ``None``: none, or not asked for)."""

    state: NodeState
    profile: str | None
    stall_at: float | None
    device: Mapping[str, Any] | None = None
    #: Where the node comes from (:attr:`bootserver.config.Config.node_sources`: ``file:PATH`` or
    #: ``store``); ``None`` when it is not in the config any more.
    source: str | None = None

    @property
    def node(self) -> str:
        """The node's name."""
        return self.state.node

    @property
    def configured(self) -> bool:
        """Whether the node is in the config."""
        return self.profile is not None

    def stalled(self, now: float) -> bool:
        """Whether the node is stalled at unix time ``now``."""
        return self.stall_at is not None and now >= self.stall_at


def node_final_stages(node: ResolvedNode) -> tuple[str, ...]:
    """The stages where a configured node (as resolved) has nothing more to do
    (:func:`bootserver.timeline.final_stages` of its mode: ``up`` when it checks in)."""
    return final_stages(node.mode, checkin=node.checkin)


def stall_deadlines(config: Config, states: Iterable[NodeState]) -> dict[str, float | None]:
    """Each configured node's stall deadline (:func:`bootserver.timeline.stall_deadline`, unix
    seconds; ``None``: it cannot stall now) under ``timeline.stall_after``; nodes not in the config
    (history of a removed node) are left out."""
    limits, nodes = config.timeline.stall_limits, inventory(config)
    return {st.node: stall_deadline(st, limits, node_final_stages(nodes[st.node]))
            for st in states if st.node in nodes}


def fleet_of(config: Config, states: Iterable[NodeState],
             devices: Mapping[str, Mapping[str, Any]] | None = None) -> list[FleetNode]:
    """The fleet view of timeline ``states`` as read (in their order), with ``devices`` (node -> device
    record) when given."""
    states = list(states)
    deadlines = stall_deadlines(config, states)
    nodes, devices = inventory(config), devices or {}
    return [FleetNode(st, nodes[st.node].profile if st.node in nodes else None, deadlines.get(st.node),
                      devices.get(st.node), nodes[st.node].source if st.node in nodes else None) for st in states]


class FleetStore(TimelineStore, DeviceStore, Protocol):
    """What the fleet view reads of the state store: the timeline's node states and the device records."""


async def read_fleet(config: Config, store: FleetStore, *, devices: bool = False) -> list[FleetNode]:
    """The fleet view of ``config``'s nodes as ``store`` holds them now (one listing; with ``devices``,
    one more read for the device records). Raises :class:`~bootserver.errors.UnavailableError`."""
    names = list(config.nodes)
    states = await store.nodes(names)
    return fleet_of(config, states, await store.devices(names) if devices else None)
