"""The node timeline as text for people: ages (``5m ago``), the ``bootserver nodes`` table, a node's
history (``bootserver nodes show``), the STALLED cell. Shared by the CLI, the live page and the stall
watch's warnings (:mod:`bootserver.stalls`), so it sits below all three.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from .discovery import Discovered
from .fleet import FleetNode
from .timeline import Event, NodeState


def format_age(seconds: float | None) -> str:
    """A short human age: ``-`` for none, else ``42s``, ``5m``, ``3h``, ``2d`` ago."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s ago"
    if s < 7200:
        return f"{s // 60}m ago"
    if s < 172800:
        return f"{s // 3600}h ago"
    return f"{s // 86400}d ago"


def format_events(events: Sequence[Event], state: NodeState, keep_events: int) -> str:
    """The ``bootserver nodes show NODE`` text: one line per history row (local time, event, client
    address, detail), coalesced repeats as ``(N times, last at <time>)``, and first a line saying how
    many older rows ``keep_events`` dropped, if any; a node without any says so in one line."""
    def stamp(t: float) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))

    lines = []
    if state.dropped:
        lines.append(f"({state.dropped} older events dropped: timeline.keep_events keeps {keep_events} per node)")
    for e in events:
        detail = " ".join(f"{k}={v}" for k, v in e.detail.items())
        repeats = f" ({e.count} times, last at {stamp(e.last_at or e.at)})" if e.count > 1 else ""
        lines.append(f"{stamp(e.at)}  {e.event:<20} {e.ip or '-':<15} {detail}".rstrip() + repeats)
    if not lines:
        lines.append(f"{state.node}: no events yet (stage {state.stage}): no request of this node has reached "
                     "the server")
    return "".join(line + "\n" for line in lines)


def format_stalled(deadline: float | None, now: float) -> str:
    """The STALLED cell of a node whose stall deadline (:func:`~bootserver.timeline.stall_deadline`) is
    ``deadline``: ``-`` (not stalled), else how long past it, ``stalled 12m``."""
    if deadline is None or now < deadline:
        return "-"
    return "stalled " + format_age(now - deadline).removesuffix(" ago")


def format_table(fleet: Sequence[FleetNode], now: float) -> str:
    """The ``bootserver nodes`` table of the fleet view (:func:`bootserver.fleet.read_fleet`): node,
    profile, stage, since, stalled (see :func:`format_stalled`), last event, when, and where the node
    comes from (``SOURCE``: ``file:PATH`` or ``store``; plain text)."""
    rows = [("NODE", "PROFILE", "STAGE", "SINCE", "STALLED", "LAST EVENT", "WHEN", "SOURCE")]
    for seen in fleet:
        st = seen.state
        rows.append((st.node, seen.profile or "-", st.stage,
                     format_age(None if st.stage_at is None else now - st.stage_at),
                     format_stalled(seen.stall_at, now),
                     st.last_event or "-", format_age(None if st.last_at is None else now - st.last_at),
                     seen.source or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n" for r in rows)


def printable(value: str | None, width: int = 40) -> str:
    """A value a machine reported, safe on one terminal line: ``-`` for none or empty, control and other
    unprintable characters as Python escapes (``\\n``, ``\\x1b``), cut to ``width`` characters (``…``)."""
    if not value:
        return "-"
    text = value if value.isprintable() else repr(value)[1:-1]
    return text if len(text) <= width else text[:width - 1] + "…"


def format_discovered(records: Sequence[Discovered], now: float,
                      evidence: Callable[[str], str] | None = None) -> str:
    """The ``bootserver nodes discovered`` table: one machine per line, last reported first: MAC, UUID,
    manufacturer, product, serial, architecture (:meth:`Discovered.arch_text`), every address that
    reported it (``CONFLICT`` after them when there are several), first and last seen, reports; every
    reported value through :func:`printable`. Then one line per conflict saying what to do, ending with
    ``evidence(mac)`` when given (the DHCP engine's lease: :func:`bootserver.adoption.lease_evidence`)."""
    rows = [("MAC", "UUID", "MANUFACTURER", "PRODUCT", "SERIAL", "ARCH", "FROM", "FIRST SEEN", "LAST SEEN",
             "REPORTS")]
    notes = []
    for d in records:
        f = d.facts
        arch = d.arch_text()
        where = printable(",".join(d.addresses), 80) + (" CONFLICT" if d.conflict else "")
        rows.append((d.mac, d.uuid or "-", printable(f.get("manufacturer"), 24), printable(f.get("product"), 24),
                     printable(f.get("serial"), 24), printable(arch, 24), where,
                     format_age(now - d.first_seen), format_age(now - d.last_seen), str(d.reports)))
        if d.conflict:
            notes.append(f"conflict: {d.mac} was reported from {len(d.addresses)} addresses "
                         f"({printable(', '.join(d.addresses), 200)}): two machines claim it (or it moved); "
                         f"adopt it with --addresses naming the one to trust"
                         f"{evidence(d.mac) if evidence is not None else ''}\n")
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n"
                   for r in rows) + "".join(notes)
