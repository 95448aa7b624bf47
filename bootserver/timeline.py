"""The node timeline's rules: every node's boot events with timestamps, kept by the state store
(:mod:`bootserver.state`: sqlite in ``state_dir``, or PostgreSQL).

Equinix marks a custom-iPXE device ``active`` as soon as iPXE is served, so its API never says whether
an install worked; the boot server is the only place that sees a node's whole boot. Events (stable
names, see docs/troubleshooting.md):

``dhcp``                    the DHCP engine answered the node's firmware (``bootserver dhcp``; detail:
                            ``address``, ``file``, the boot file it was handed, ``mode``)
``tftp``                    the DHCP engine's TFTP server sent the node a loader (detail: ``file``)
``script``                  the node's iPXE boot script was served (detail: ``mode``, ``release``)
``localboot``               the boot-disk script was served instead (boot-once, see below)
``<kind>-requested``        ``kind`` in kernel, initramfs, rootfs: an artifact request began
``<kind>-completed``        ... was sent in full (detail: ``bytes``, ``status`` 200)
``<kind>-partial``          ... a range of it was sent in full (``206``; detail: ``bytes``, ``status``):
                            the client holds part of the artifact, not necessarily all of it
``<kind>-unchanged``        ... the client's copy is current (``304`` to a conditional request; detail:
                            ``status``)
``<kind>-failed``           ... ended with an error status or a broken connection (detail: ``bytes``,
                            ``status``)
``stub``                    the merge-style Ignition stub was served (detail ``{"config": false}`` when
                            the profile has no real config)
``config``                  the real Ignition config was served
``reinstall``               ``bootserver nodes reinstall NODE`` marked the node for reinstall
``checkin``                 the node's own system, up and on the network, called its check-in URL (the
                            ``bootserver-checkin.service`` unit of its stub, see :mod:`bootserver.ignition`)

:func:`artifact_event` picks the artifact event of a finished answer from its status.

**Repeats are coalesced.** An event that changes nothing (same node, same event, same client address,
same detail, and the node's stage unchanged) does not add a row: the node's last row counts it
(``count``) and keeps the time of the last one (``last_at``). A load balancer probing a signed URL, or
iPXE retrying a script, costs one row, not one per request. **History is bounded**: a node keeps its
newest ``keep_events`` rows (:data:`KEEP_EVENTS` by default; config ``timeline.keep_events``); the oldest
go first and the node's ``dropped`` counts them, so ``bootserver nodes show`` can say what is missing.

Artifact URLs are shared by every node of a release, so an artifact request is attributed to the node
whose boot script was last served to the same client IP within :data:`ATTRIBUTION_WINDOW` seconds (the
iPXE firmware, the live kernel and the installer of one device all use the device's address). Requests
from an IP no script was served to are not recorded. The client IP is the one the server resolves
through ``server.trusted_proxies`` (:meth:`bootserver.http.gate.Gate.client`: behind a trusted reverse
proxy, the address it forwarded). Behind NAT, or a proxy that hides client addresses and is not
trusted, the attribution is wrong or missing; the per-node events (script, stub, config) are always right.

Stages (what :meth:`StateStore.nodes <bootserver.state.StateStore.nodes>` reports), a pure function of
the event sequence (:func:`next_stage`)::

    new -> dhcp -> tftp -> ipxe -> kernel -> initramfs -> rootfs -> installing -> installed -> up  (install)
    new -> dhcp -> tftp -> ipxe -> kernel -> initramfs -> rootfs -> ignition   -> running   -> up  (live)

``dhcp`` and ``tftp`` come from the DHCP engine (:mod:`bootserver.dhcp.engine`), where it runs: the first
mile, before iPXE asks for a script. Like artifacts, they only move a node forward: an installed system
renewing its address, or a firmware's PXE before boot-once's ``localboot``, leaves the stage as it is.

``installing``: coreos-installer in the live system fetched the stub (it embeds it in the installed
disk; it never fetches the real config); in agent mode (an OpenShift agent's PXE files, no stub of
ours): the live system fetched its whole rootfs (``rootfs-completed``), so the agent in it installs the
disk, and boot-once sends the next network boot to that disk. ``installed``: the real config was
fetched, which in install mode only the installed system's first boot does. In live mode the live
system's Ignition fetches the stub (``ignition``) and then the real config (``running``).
``reinstall``: marked for reinstall, the next script request installs again. ``localboot`` events
leave the stage as it is.

**Stages never go back by accident** (docs/design.md, "Stage order"): only a ``script`` (a boot script
was served: a new network boot, which boot-once never lets an installed node have) and ``reinstall``
start a new round; any other event takes a node only further along :data:`STAGE_RANK`, so a stub or real
config fetched again after ``installed``, ``running`` or ``up``, or an artifact retried, goes into the
history and leaves the stage where it is.

``unconfirmed``: the stub was served to a node whose profile has no real Ignition config (no
``ignition`` key), so no later request can tell the server whether the install or the live boot
finished: the stub was the last thing the server will see. For boot-once it counts as installed, as
``installing`` does.

``up``: the booted system (the installed one in install mode, the live one in live mode) checked in
(``checkin``) once it was on the network: the last stage of a profile with ``checkin`` on (the
default), reached from ``installed``, ``running``, ``unconfirmed`` (the check-in confirms it) or any
other stage, except while the node is marked for reinstall or is network-booting (``reinstall``,
``ipxe`` to ``rootfs``): a check-in then comes from a system booted before and only goes into the
history. For boot-once ``up`` counts as installed.

This module is plain domain code shared by both state store backends (no sqlite3, no aiohttp): the
stage rules, the value types, the SQL both backends run and the one batch plan (:func:`plan_batch`).
The sqlite engine is :mod:`bootserver.state.sqlite_timeline`, the PostgreSQL one
:mod:`bootserver.state.postgresql`; both write through :class:`bootserver.state.batches.Batches`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .streams import ARTIFACT_KINDS

#: Seconds after a node's script was served during which artifact requests from the same client IP are
#: attributed to that node (an install's rootfs download may start minutes after the script).
ATTRIBUTION_WINDOW = 3600.0

#: Every stage, in the order of a boot.
STAGES = ("new", "reinstall", "dhcp", "tftp", "ipxe", "kernel", "initramfs", "rootfs", "installing", "installed",
          "ignition", "running", "unconfirmed", "up")

#: What can happen to one artifact request (event ``<kind>-<outcome>``).
ARTIFACT_OUTCOMES = ("requested", "completed", "partial", "unchanged", "failed")

#: Every event name.
EVENTS = ("dhcp", "tftp", "script", "localboot", "stub", "config", "reinstall", "checkin",
          # what the fleet API's actions did (history only: no stage of their own)
          "provision", "provision-failed", "deprovision", "deprovision-failed",
          # the DHCP engine wrote, changed or removed the node's reservation (history only)
          "reservation",
          *(f"{k}-{s}" for k in ARTIFACT_KINDS for s in ARTIFACT_OUTCOMES))

_EVENT_NAMES = frozenset(EVENTS)

#: The events of the fleet API's actions: they go into the history and leave the stage as it is.
_ACTION_EVENTS = frozenset({"provision", "provision-failed", "deprovision", "deprovision-failed"})

#: Stages after which an install-mode node with boot-once boots its local disk.
INSTALLED_STAGES = frozenset({"installing", "installed", "unconfirmed", "up"})

#: How far into its round each stage is (docs/design.md, "Stage order"): an event other than ``script``
#: (a new network boot), ``reinstall`` and ``checkin`` never takes a node to a stage of a lower rank, so a
#: stub or real config fetched again, or a stray artifact request, goes into the history only.
STAGE_RANK: Mapping[str, int] = {
    "new": 0, "reinstall": 0, "dhcp": 1, "tftp": 2, "ipxe": 3, "kernel": 4, "initramfs": 5, "rootfs": 6,
    "installing": 7, "ignition": 7, "installed": 8, "running": 8, "unconfirmed": 8, "up": 9,
}

#: Stages a ``checkin`` does not leave: the node is marked for reinstall, or it is network-booting, so
#: the check-in comes from a system booted before (it is kept in the history only).
_CHECKIN_KEEPS = frozenset({"reinstall", "dhcp", "tftp", "ipxe", "kernel", "initramfs", "rootfs"})

#: The stage a ``checkin`` leads to: the booted system is on the network.
UP = "up"

#: Default of ``timeline.stall_after``: seconds a node may stay in a stage before it counts as
#: **stalled** (:func:`stall_deadline`). The network boot (``ipxe`` to ``initramfs``) takes seconds
#: to minutes, a 1 GB rootfs and the live system's start minutes, coreos-installer's copy and the first
#: boot of the installed disk up to an hour; ``installed``/``running``/``unconfirmed`` wait for the
#: check-in. Stages not named here (``new``, ``reinstall``, ``up``) never stall unless configured.
DEFAULT_STALL_AFTER: Mapping[str, int] = {
    "dhcp": 300, "tftp": 300, "ipxe": 600, "kernel": 600, "initramfs": 600, "rootfs": 1800, "installing": 3600,
    "ignition": 1800, "installed": 1800, "running": 1800, "unconfirmed": 3600,
}

#: The stages that end a boot, whose time since the first script :class:`bootserver.metrics.Metrics`
#: reports (``bootserver_boot_seconds``).
BOOT_DONE_STAGES = ("installed", "running", UP)

#: Default of ``timeline.keep_events``: rows of history kept per node (a full install is about 12).
KEEP_EVENTS = 1000


def next_stage(stage: str, event: str, mode: str, *, real_config: bool = True) -> str:
    """The stage a node is in after ``event``, given its current ``stage``, its profile's ``mode``,
    and whether the profile has a real Ignition config (``real_config``; without one a ``stub`` is
    the last event the server sees, stage ``unconfirmed``).

    Raises ``ValueError`` for an unknown event name.
    """
    if event == "reinstall":
        return "reinstall"
    if event == "script":  # recorded only when a boot script went out: a new network boot
        return "ipxe"
    if event == "checkin":
        return stage if stage in _CHECKIN_KEEPS else UP
    if event in ("localboot", "reservation") or event in _ACTION_EVENTS:
        return stage
    if event == "stub":
        reached = "unconfirmed" if not real_config else "installing" if mode == "install" else "ignition"
    elif event == "config":
        reached = "installed" if mode == "install" else "running"
    elif event in ("dhcp", "tftp"):
        reached = event
    else:
        kind, _, what = event.partition("-")
        if kind not in ARTIFACT_KINDS or what not in ARTIFACT_OUTCOMES:
            raise ValueError(f"unknown timeline event {event!r}")
        # agent mode: the live system has its whole rootfs, the agent in it installs the disk
        reached = "installing" if mode == "agent" and event == "rootfs-completed" else kind
    # a repeat (a stub or config fetched again, an artifact retried) never takes the node back
    return reached if STAGE_RANK[reached] > STAGE_RANK.get(stage, 0) else stage


def final_stages(mode: str, *, checkin: bool) -> tuple[str, ...]:
    """The stages where a node of a profile with ``mode`` (``install``/``live``/``agent``) and ``checkin``
    (its stub carries the check-in unit) has nothing more to do:
    ``up`` when it checks in; else ``installed`` (install) or ``running`` (live), and ``unconfirmed``
    (what a profile without a real config reaches); ``installing`` in agent mode (no stub of ours, so no
    check-in: the agent installs from its rootfs, ``openshift-install agent wait-for`` follows it).
    ``provision`` waits for them; they never stall."""
    if mode == "agent":  # nothing of ours runs after the agent's rootfs: the agent and the cluster take over
        return ("installing",)
    if checkin:
        return (UP,)
    return ("installed" if mode == "install" else "running", "unconfirmed")


def stall_deadline(state: NodeState, limits: Mapping[str, int], final: Sequence[str]) -> float | None:
    """The unix time (seconds) from which ``state``'s node counts as stalled in its stage: its
    ``stage_at`` plus the stage's limit in ``limits`` (``timeline.stall_after``, seconds); ``None`` when
    it cannot stall (a stage without a limit, one of the node's ``final`` stages, no events yet)."""
    limit = limits.get(state.stage)
    if limit is None or state.stage in final or state.stage_at is None:
        return None
    return state.stage_at + limit


def boot_started(events: Sequence[Event]) -> float | None:
    """The unix time of the first ``script`` of the node's latest boot, from its history (oldest first):
    walking back from the newest row, the earliest ``script`` row before an earlier boot's end
    (``stub``, ``config``, ``checkin``, ``localboot`` or ``reinstall`` older than a script seen);
    ``None`` when the history holds no script (trimmed by ``keep_events``)."""
    return boot_started_back((e.event, e.at) for e in reversed(events))


def boot_started_back(rows: Iterable[tuple[str, float]]) -> float | None:
    """:func:`boot_started` from ``(event, at)`` of the node's history rows, newest first; reads no
    further than the row that ends the boot before (a cursor stops there)."""
    first = None
    for event, at in rows:
        if event == "script":
            first = at
        elif first is not None and event in ("stub", "config", "checkin", "localboot", "reinstall"):
            break
    return first


def artifact_event(kind: str, status: int, complete: bool) -> str:
    """The timeline event of a finished artifact answer: ``<kind>-completed`` for a ``200`` sent in
    full, ``-partial`` for a ``206`` range sent in full, ``-unchanged`` for a ``304`` (the client's
    copy is current: not a failure), else ``-failed`` (an error status or a broken connection).
    Statuses as in RFC 9110."""
    if complete and status == 200:
        return f"{kind}-completed"
    if complete and status == 206:
        return f"{kind}-partial"
    if status == 304:
        return f"{kind}-unchanged"
    return f"{kind}-failed"


@dataclass(frozen=True, slots=True)
class Event:
    """One row of a node's history: ``event`` happened ``count`` times (coalesced repeats), the first
    at ``at`` and the last at ``last_at`` (unix seconds); ``detail`` a JSON-able mapping."""

    node: str
    at: float
    event: str
    ip: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)
    count: int = 1
    last_at: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able dict (``at`` and ``last_at`` as unix seconds)."""
        return {"node": self.node, "at": self.at, "event": self.event, "ip": self.ip, "detail": dict(self.detail),
                "count": self.count, "last_at": self.at if self.last_at is None else self.last_at}


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node's current ``stage`` (entered at ``stage_at``) and its last event (at ``last_at``), unix s;
    ``dropped``: its oldest history rows removed by ``timeline.keep_events``; ``last_ip``: the client
    address of its newest history row (:data:`NODES_SQL`)."""

    node: str
    stage: str
    stage_at: float | None
    last_event: str | None
    last_at: float | None
    dropped: int = 0
    last_ip: str | None = None

    def as_dict(self, now: float) -> dict[str, Any]:
        """A JSON-able dict, with ``stage_age`` and ``last_age`` in seconds before ``now`` (or null)."""
        return {"node": self.node, "stage": self.stage, "stage_at": self.stage_at,
                "stage_age": None if self.stage_at is None else round(now - self.stage_at, 3),
                "last_event": self.last_event, "last_at": self.last_at,
                "last_age": None if self.last_at is None else round(now - self.last_at, 3),
                "dropped_events": self.dropped, "last_ip": self.last_ip}


#: The event (and stage) of a :class:`Recorded` that tells a discovered machine's report was recorded
#: (its ``node`` is the machine's MAC; no node's timeline holds it).
DISCOVERED = "discovered"


class Recorded(NamedTuple):
    """A timeline event recorded in this process, as its observers see it (the stall watch, the live
    page, the boot-duration metric: :meth:`bootserver.runtime.Runtime.observe`), or a discovered
    machine's report (event and stage :data:`DISCOVERED`, ``node`` its MAC): the ``node``,
    the ``event``, the node's ``stage`` after it, its stage ``before`` it (read for ``config`` and
    ``checkin`` only, the events that may end a boot; ``None`` otherwise) and when (``at``, unix
    seconds). A named tuple: one is made per recorded event, on the script path."""

    node: str
    event: str
    stage: str
    before: str | None
    at: float


@dataclass(slots=True)  # not frozen: made once per request, and a frozen init costs 1.4 us more (issue 43)
class Record:
    """One event to append: ``node``'s ``event`` at unix time ``at`` (seconds) from ``ip``, with its
    profile's ``mode`` (``install`` or ``live``) and whether the profile has a real Ignition config
    (``real_config``): both decide what ``stub`` and ``config`` mean (:func:`next_stage`). Never changed
    once made (``dataclasses.replace`` makes a changed copy).

    Raises ``ValueError`` for an unknown event name.
    """

    node: str
    event: str
    mode: str
    at: float
    ip: str | None = None
    detail: Mapping[str, Any] | None = None
    real_config: bool = True
    #: Events this record stands for (repeats merged in memory before their batch), the last at ``last_at``.
    count: int = 1
    last_at: float | None = None
    #: A write-behind repeat: the id of the history row it repeats (it counts into that row).
    into: int | None = None

    def __post_init__(self) -> None:
        if self.event not in _EVENT_NAMES:
            raise ValueError(f"unknown timeline event {self.event!r}")

    @property
    def detail_json(self) -> str | None:
        """``detail`` as stored (JSON with sorted keys), ``None`` when empty."""
        return json.dumps(dict(self.detail), sort_keys=True) if self.detail else None

    @property
    def last(self) -> float:
        """Unix time of the last event this record stands for."""
        return self.at if self.last_at is None else self.last_at

    def repeats(self, other: Record, since: float) -> bool:
        """Whether ``other`` is the same event as this one (node, event, client address, detail, mode),
        at or after ``since``: merged in memory, the two count as one record of ``count`` events."""
        return (other.event == self.event and other.ip == self.ip and other.node == self.node
                and other.mode == self.mode and other.real_config == self.real_config
                and (other.detail or None) == (self.detail or None) and other.at >= since)


@dataclass(frozen=True, slots=True)
class Current:
    """What a node's next event is checked against, and what its boot script needs of the state, as
    one statement reads it (:data:`CURRENT_SQL`): its ``stage`` (entered at ``stage_at``), the unix
    time of its last event (``last_at``), its newest history row (``last_id``) and that row's key
    (``(event, ip, detail, stage)``, the detail a mapping or ``None``; ``None`` without a row), and the
    node's device record (``device``: what its provider recorded, a JSON object; ``None`` without one).
    """

    stage: str
    stage_at: float | None = None
    last_at: float | None = None
    last_id: int | None = None
    last_row: tuple[str, str | None, Mapping[str, Any] | None, str] | None = None
    device: Mapping[str, Any] | None = None

    def coalesces(self, r: Record) -> bool:
        """Whether ``r`` repeats the node's newest row with nothing changed (same event, client address,
        detail and stage; not older than the node's last event): then it only counts into that row."""
        if self.last_row is None or self.stage_at is None or self.last_at is None:
            return False
        new = next_stage(self.stage, r.event, r.mode, real_config=r.real_config) if r.at >= self.stage_at \
            else self.stage
        return (new == self.stage and r.at >= self.last_at
                and self.last_row == (r.event, r.ip, r.detail or None, new))


#: The columns of :class:`Current` (``current_of``), in order: the node's row, its newest history row
#: and its device record.
CURRENT_COLUMNS = "n.stage, n.stage_at, n.last_at, n.last_id, e.event, e.ip, e.detail, e.stage, d.device"
#: The joins that read them for the names in ``q.node`` (a node may have a device and no events yet).
CURRENT_JOINS = ("LEFT JOIN nodes n ON n.node = q.node LEFT JOIN events e ON e.id = n.last_id "
                 "LEFT JOIN devices d ON d.node = q.node")
#: One node's :class:`Current` in one statement (``?`` placeholder): one indexed row of each table.
CURRENT_SQL = f"SELECT {CURRENT_COLUMNS} FROM (SELECT ? AS node) q {CURRENT_JOINS}"


def current_of(row: Sequence[Any] | None) -> Current:
    """:class:`Current` from a :data:`CURRENT_COLUMNS` row (``None``, or no node row: a node without
    events). Raises ``ValueError`` for a device column that is not a JSON object."""
    if row is None:
        return Current("new")
    stage, stage_at, last_at, last_id, event, ip, detail, row_stage, device = row
    record = device_of(device) if device is not None else None
    if stage is None:
        return Current("new", device=record)
    return Current(stage, stage_at, last_at, last_id,
                   None if event is None else (event, ip, json.loads(detail) if detail else None, row_stage),
                   record)


def device_json(device: Mapping[str, Any]) -> str:
    """A device record as stored (JSON, sorted keys, no spaces). Raises ``TypeError`` for a value JSON
    cannot hold."""
    return json.dumps(dict(device), sort_keys=True, separators=(",", ":"))


def device_of(text: str) -> dict[str, Any]:
    """A stored device record (:func:`device_json`) read back. Raises ``ValueError`` when it is not a
    JSON object."""
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("a device record is not a JSON object")
    return value


#: Every node's :class:`NodeState` (columns in its order), its newest history row's client address
#: included (``?``/``%s``-free: a backend appends its own ``WHERE``).
NODES_SQL = ("SELECT n.node, n.stage, n.stage_at, n.last_event, n.last_at, n.dropped, e.ip "
             "FROM nodes n LEFT JOIN events e ON e.id = n.last_id")

#: The rows a batch of records starts from, one per node (``{nodes}``: the backend's list of the
#: batch's node names): the node's row and its newest history row. ``events`` -1 (a database migrated
#: from timeline schema 1) is counted here.
BATCH_ROWS_SQL = ("SELECT n.node, n.stage, n.stage_at, n.last_event, n.last_at, n.last_id, "
                  "CASE WHEN n.events < 0 THEN (SELECT count(*) FROM events c WHERE c.node = n.node) "
                  "ELSE n.events END, n.dropped, e.event, e.ip, e.detail, e.stage "
                  "FROM nodes n LEFT JOIN events e ON e.id = n.last_id WHERE n.node {nodes}")

#: The statements of :class:`Writes`, in the order they run (``?`` placeholders, common to both stores).
BUMP_SQL = "UPDATE events SET count = count + ?, last_at = CASE WHEN last_at > ? THEN last_at ELSE ? END WHERE id = ?"
INSERT_SQL = ("INSERT INTO events (id, node, at, event, ip, detail, count, last_at, stage) "
              "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
TRIM_SQL = "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE node = ? ORDER BY at, id LIMIT ?)"
NODE_SQL = ("INSERT INTO nodes (node, stage, stage_at, last_event, last_at, last_id, events, dropped) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (node) DO UPDATE SET stage = excluded.stage, "
            "stage_at = excluded.stage_at, last_event = excluded.last_event, "
            "last_at = excluded.last_at, last_id = excluded.last_id, events = excluded.events, "
            "dropped = excluded.dropped")


@dataclass(slots=True)
class Writes:
    """What one batch does to the tables: parameter lists for ``executemany`` of :data:`BUMP_SQL`
    (coalesced repeats into rows that existed before the batch), :data:`INSERT_SQL` (new rows, ids
    chosen beforehand), :data:`TRIM_SQL` (``keep_events``) and :data:`NODE_SQL` (each node's row once),
    run in that order; and each record's stage after it (``stages``)."""

    bump: list[tuple[int, float, float, int]] = field(default_factory=list)
    insert: list[list[Any]] = field(default_factory=list)
    trim: list[tuple[str, int]] = field(default_factory=list)
    node: list[tuple[Any, ...]] = field(default_factory=list)
    stages: list[str] = field(default_factory=list)

    def statements(self) -> list[tuple[str, Sequence[Sequence[Any]]]]:
        """``(sql, parameter rows)`` for each non-empty list, in execution order."""
        return [(sql, rows) for sql, rows in ((BUMP_SQL, self.bump), (INSERT_SQL, self.insert),
                                              (TRIM_SQL, self.trim), (NODE_SQL, self.node)) if rows]


def plan_batch(records: Sequence[Record], rows: Mapping[str, Sequence[Any]], ids: Iterator[int],
               keep_events: int) -> Writes:
    """The one definition of how events change the tables (stage, coalescing, ``keep_events``), for a
    whole batch at once, run by the sqlite :class:`~bootserver.state.sqlite_timeline.Timeline` and the
    PostgreSQL store alike.

    ``rows``: :data:`BATCH_ROWS_SQL` rows by node (without the name; a node without a row has no
    events yet); ``ids``: unused ``events.id`` values, increasing (one per record at most). Records
    apply in order, each seeing the ones before it: an event older than the node's stage (``at`` before
    ``stage_at``: recorded late, e.g. by another process) is kept in the history but does not change
    the stage; a repeat that changes nothing counts into the node's newest row (a write-behind repeat,
    :attr:`Record.into`, into the row it repeated when it was served, even if newer rows came since);
    beyond ``keep_events`` rows a node loses its oldest.
    """
    w = Writes()
    nodes: dict[str, list[Any]] = {}
    bumps: dict[int | None, list[Any]] = {}
    for r in records:
        st = nodes.get(r.node)
        if st is None:
            row = rows.get(r.node)
            # stage, stage_at, last_event, last_at, last_id, held, dropped, newest row key, its insert (or None)
            st = nodes[r.node] = ([*row[:7], None if row[7] is None else tuple(row[7:]), None] if row else
                                  ["new", r.at, r.event, r.at, None, 0, 0, None, None])
        stage, stage_at, _, last_at, last_id = st[:5]
        new = next_stage(stage, r.event, r.mode, real_config=r.real_config) if r.at >= stage_at else stage
        detail = r.detail_json
        last = r.last
        if new != stage:
            st[1] = r.at
        newest = st[7] == (r.event, r.ip, detail, new) and r.at >= last_at
        if new == stage and (newest or r.into is not None):
            if newest and st[8] is not None:  # the row was inserted by this batch
                st[8][6] += r.count
                st[8][7] = last
            else:
                target = last_id if newest else r.into
                bump = bumps.setdefault(target, [0, last, last, target])
                bump[0] += r.count
                bump[1] = bump[2] = max(bump[1], last)
        else:
            st[4] = next(ids)
            st[8] = [st[4], r.node, r.at, r.event, r.ip, detail, r.count, last, new]
            w.insert.append(st[8])
            st[5] += 1
            st[7] = (r.event, r.ip, detail, new)
        if r.at >= last_at:  # a completion recorded late must not hide a newer event
            st[2], st[3] = r.event, last
        st[0] = new
        w.stages.append(new)
    w.bump = [tuple(b) for b in bumps.values()]
    for node, st in nodes.items():
        if st[5] > keep_events:
            w.trim.append((node, st[5] - keep_events))
            st[6] += st[5] - keep_events
            st[5] = keep_events
        w.node.append((node, *st[:7]))
    return w

