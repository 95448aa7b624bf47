"""The node timeline: every node's boot events with timestamps, kept in ``state_dir`` (sqlite, WAL).

Equinix marks a custom-iPXE device ``active`` as soon as iPXE is served, so its API never says whether
an install worked; the boot server is the only place that sees a node's whole boot. Events (stable
names, see docs/troubleshooting.md):

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
through ``server.trusted_proxies`` (:meth:`bootserver.security.Gate.client`: behind a trusted reverse
proxy, the address it forwarded). Behind NAT, or a proxy that hides client addresses and is not
trusted, the attribution is wrong or missing; the per-node events (script, stub, config) are always right.

Stages (what :meth:`Timeline.nodes` reports), a pure function of the event sequence
(:func:`next_stage`)::

    new -> ipxe -> kernel -> initramfs -> rootfs -> installing -> installed -> up    (mode install)
    new -> ipxe -> kernel -> initramfs -> rootfs -> ignition   -> running   -> up    (mode live)

``installing``: coreos-installer in the live system fetched the stub (it embeds it in the installed
disk; it never fetches the real config). ``installed``: the real config was fetched, which in install
mode only the installed system's first boot does. In live mode the live system's Ignition fetches the
stub (``ignition``) and then the real config (``running``). ``reinstall``: marked for reinstall, the
next script request installs again. ``localboot`` events leave the stage as it is.

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

This module is plain domain code (stdlib sqlite3, no aiohttp). :class:`Timeline`'s methods are
blocking and thread-safe. The server writes through :class:`GroupCommit`: one writer thread commits
every event waiting in one transaction (group commit, planned by :func:`plan_batch`), so a boot storm
costs one commit per batch, not one per request; a mere repeat is written behind (:class:`Batches`).
Its reads (:meth:`Timeline.current`, :meth:`Timeline.attribute`: one indexed row) run on the event loop
over a separate read connection; in WAL mode readers never wait for the writer. Every commit that adds
a row changes :meth:`Timeline.generation`, so processes sharing the file know when what they hold of a
node is stale.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import mmap
import os
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .errors import BootserverError, InputError
from .streams import ARTIFACT_KINDS

log = logging.getLogger("bootserver.timeline")

#: Seconds after a node's script was served during which artifact requests from the same client IP are
#: attributed to that node (an install's rootfs download may start minutes after the script).
ATTRIBUTION_WINDOW = 3600.0

#: Every stage, in the order of a boot.
STAGES = ("new", "reinstall", "ipxe", "kernel", "initramfs", "rootfs", "installing", "installed",
          "ignition", "running", "unconfirmed", "up")

#: What can happen to one artifact request (event ``<kind>-<outcome>``).
ARTIFACT_OUTCOMES = ("requested", "completed", "partial", "unchanged", "failed")

#: Every event name.
EVENTS = ("script", "localboot", "stub", "config", "reinstall", "checkin",
          *(f"{k}-{s}" for k in ARTIFACT_KINDS for s in ARTIFACT_OUTCOMES))

_EVENT_NAMES = frozenset(EVENTS)

#: Stages after which an install-mode node with boot-once boots its local disk.
INSTALLED_STAGES = frozenset({"installing", "installed", "unconfirmed", "up"})

#: Stages a stray artifact request (a retry, a curl from the same host) must not undo.
_FINAL_STAGES = frozenset({"installing", "installed", "ignition", "running", "unconfirmed", "up"})

#: Stages a ``checkin`` does not leave: the node is marked for reinstall, or it is network-booting, so
#: the check-in comes from a system booted before (it is kept in the history only).
_CHECKIN_KEEPS = frozenset({"reinstall", "ipxe", "kernel", "initramfs", "rootfs"})

#: The stage a ``checkin`` leads to: the booted system is on the network.
UP = "up"

#: Default of ``timeline.stall_after``: seconds a node may stay in a stage before it counts as
#: **stalled** (:func:`stall_deadline`). The network boot (``ipxe`` to ``initramfs``) takes seconds
#: to minutes, a 1 GB rootfs and the live system's start minutes, coreos-installer's copy and the first
#: boot of the installed disk up to an hour; ``installed``/``running``/``unconfirmed`` wait for the
#: check-in. Stages not named here (``new``, ``reinstall``, ``up``) never stall unless configured.
DEFAULT_STALL_AFTER: Mapping[str, int] = {
    "ipxe": 600, "kernel": 600, "initramfs": 600, "rootfs": 1800, "installing": 3600, "ignition": 1800,
    "installed": 1800, "running": 1800, "unconfirmed": 3600,
}

#: The stages that end a boot, whose time since the first script :class:`bootserver.metrics.Metrics`
#: reports (``bootserver_boot_seconds``).
BOOT_DONE_STAGES = ("installed", "running", UP)

#: Default of ``timeline.keep_events``: rows of history kept per node (a full install is about 12).
KEEP_EVENTS = 1000

#: The file beside the timeline database whose bytes change whenever a commit changed a node's stage or
#: newest row (:meth:`Timeline.generation`): a shared-memory signal between the processes of one machine
#: that their in-memory view of the nodes is stale, cheaper than a query per request.
GENERATION_FILE = "timeline.generation"
GENERATION_BYTES = 8

#: Version of the timeline schema (``PRAGMA user_version`` in sqlite; see :func:`_migrate`).
SCHEMA_VERSION = 3

# Version 1 (before coalescing) had events without count/last_at/stage and nodes without
# last_id/events/dropped; _migrate adds them.
_SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS events (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    node   TEXT NOT NULL,
    at     REAL NOT NULL,          -- unix time, seconds (the first of a coalesced row)
    event  TEXT NOT NULL,
    ip     TEXT,
    detail TEXT                    -- JSON object or NULL
);
CREATE INDEX IF NOT EXISTS events_node ON events (node, at, id);
CREATE TABLE IF NOT EXISTS nodes (
    node       TEXT PRIMARY KEY,
    stage      TEXT NOT NULL,
    stage_at   REAL NOT NULL,      -- when the node entered its stage, unix seconds
    last_event TEXT NOT NULL,
    last_at    REAL NOT NULL
);
"""

_COLUMNS_V2 = (
    ("events", "count", "INTEGER NOT NULL DEFAULT 1"),   # events this row stands for (coalesced repeats)
    ("events", "last_at", "REAL"),                       # unix seconds of the last of them (NULL: = at)
    ("events", "stage", "TEXT"),                         # the node's stage after the event (NULL: unknown)
    ("nodes", "last_id", "INTEGER"),                     # the node's newest events row
    ("nodes", "events", "INTEGER NOT NULL DEFAULT 0"),   # rows the node holds (-1: count them)
    ("nodes", "dropped", "INTEGER NOT NULL DEFAULT 0"),  # rows removed by keep_events
)

# Version 3: each node's device record (what its provider recorded at ``provision``; before, a file
# ``state_dir/nodes/<node>.json`` that ``bootserver db migrate`` moves in).
_SCHEMA_V3 = """
CREATE TABLE IF NOT EXISTS devices (
    node    TEXT PRIMARY KEY,
    device  TEXT NOT NULL,         -- JSON object: the provider's record (provider, id, state, ...)
    updated REAL NOT NULL          -- unix seconds of the last write
)
"""


def _migrate(db: sqlite3.Connection) -> None:
    """Bring the database to :data:`SCHEMA_VERSION` inside one write transaction (so two processes
    starting at once migrate once). Raises ``sqlite3.Error`` (``DatabaseError`` for a corrupt file)."""
    if db.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version < 2:
            for statement in filter(str.strip, _SCHEMA_V1.split(";")):
                db.execute(statement)
            for table, column, decl in _COLUMNS_V2:
                have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
                if column not in have:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
            db.execute("UPDATE events SET last_at = at WHERE last_at IS NULL")
            db.execute("UPDATE nodes SET events = -1, last_id = (SELECT max(id) FROM events e "
                       "WHERE e.node = nodes.node) WHERE last_id IS NULL")
            db.execute("UPDATE events SET stage = (SELECT stage FROM nodes WHERE last_id = events.id) "
                       "WHERE stage IS NULL AND id IN (SELECT last_id FROM nodes)")
            db.execute("DROP INDEX IF EXISTS events_script_ip")
            db.execute("CREATE INDEX IF NOT EXISTS events_script_ip2 ON events (ip, last_at) "
                       "WHERE event = 'script'")
        if version < 3:
            db.execute(_SCHEMA_V3)
        if version < SCHEMA_VERSION:
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


class TimelineDamagedError(InputError):
    """The timeline database is not a usable sqlite database (exit 2). The message names the file and
    what to do."""


def next_stage(stage: str, event: str, mode: str, *, real_config: bool = True) -> str:
    """The stage a node is in after ``event``, given its current ``stage``, its profile's ``mode``,
    and whether the profile has a real Ignition config (``real_config``; without one a ``stub`` is
    the last event the server sees, stage ``unconfirmed``).

    Raises ``ValueError`` for an unknown event name.
    """
    if event == "reinstall":
        return "reinstall"
    if event == "script":
        return "ipxe"
    if event == "localboot":
        return stage
    if event == "stub":
        if not real_config:
            return "unconfirmed"
        return "installing" if mode == "install" else "ignition"
    if event == "config":
        return "installed" if mode == "install" else "running"
    if event == "checkin":
        return stage if stage in _CHECKIN_KEEPS else UP
    kind, _, what = event.partition("-")
    if kind in ARTIFACT_KINDS and what in ARTIFACT_OUTCOMES:
        # a stray artifact request (a retry, a curl from the same host) must not undo an install
        return stage if stage in _FINAL_STAGES else kind
    raise ValueError(f"unknown timeline event {event!r}")


def final_stages(mode: str, *, checkin: bool) -> tuple[str, ...]:
    """The stages where a node of a profile with ``mode`` (``install``/``live``) and ``checkin`` (its stub
    carries the check-in unit) has nothing more to do:
    ``up`` when it checks in; else ``installed`` (install) or ``running`` (live), and ``unconfirmed``
    (what a profile without a real config reaches). ``provision`` waits for them; they never stall."""
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
    first = None
    for e in reversed(events):
        if e.event == "script":
            first = e.at
        elif first is not None and e.event in ("stub", "config", "checkin", "localboot", "reinstall"):
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


@dataclass(frozen=True, slots=True)
class Record:
    """One event to append: ``node``'s ``event`` at unix time ``at`` (seconds) from ``ip``, with its
    profile's ``mode`` (``install`` or ``live``) and whether the profile has a real Ignition config
    (``real_config``): both decide what ``stub`` and ``config`` mean (:func:`next_stage`).

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
    whole batch at once, run by the sqlite :class:`Timeline` and the PostgreSQL store alike.

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


def run_batch(db: sqlite3.Connection, records: Sequence[Record], keep_events: int) -> Writes:
    """:func:`plan_batch` on a sqlite connection inside an open write transaction: one read of the
    batch's node rows, then one ``executemany`` per kind of write. Returns what was written."""
    names = sorted({r.node for r in records})
    sql = BATCH_ROWS_SQL.format(nodes=f"IN ({','.join('?' * len(names))})")
    rows = {r[0]: r[1:] for r in db.execute(sql, names)}
    (last,) = db.execute("SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0), "
                         "coalesce((SELECT max(id) FROM events), 0))").fetchone()
    w = plan_batch(records, rows, itertools.count(last + 1), keep_events)
    for sql, params in w.statements():
        db.executemany(sql, params)
    return w


class Timeline:
    """The timeline database ``<state_dir>/timeline.sqlite3``.

    Opened lazily on first use (creating ``state_dir`` and the file, migrating an older schema), in WAL
    mode so ``bootserver nodes`` can read and ``bootserver nodes reinstall`` can write while the server
    runs. Each node keeps its newest ``keep_events`` history rows. Blocking, thread-safe. Errors:
    ``sqlite3.Error`` or ``OSError`` when the database cannot be opened or written.
    """

    FILENAME = "timeline.sqlite3"

    def __init__(self, state_dir: Path, keep_events: int = KEEP_EVENTS) -> None:
        self.path = Path(state_dir) / self.FILENAME
        self.keep_events = keep_events
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._rlock = threading.Lock()
        self._reader: sqlite3.Connection | None = None
        self._gen: mmap.mmap | None = None
        self._glock = threading.Lock()
        #: False: commits never checkpoint the WAL (its fsync can take a slow disk's hundreds of ms);
        #: the owner calls :meth:`checkpoint` from elsewhere instead (see :class:`GroupCommit`).
        self.auto_checkpoint = True

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=5.0, check_same_thread=False, isolation_level=None)
            try:
                # two processes creating the file at once: the switch to WAL can answer "locked" at
                # once (no busy handler), so it waits here as a write does
                self._wait_unlocked(lambda: conn.execute("PRAGMA journal_mode=WAL"))
                conn.execute("PRAGMA synchronous=NORMAL")
                if not self.auto_checkpoint:
                    conn.execute("PRAGMA wal_autocheckpoint=0")
                _migrate(conn)
                conn.execute("PRAGMA busy_timeout=0")  # from now on, BEGIN IMMEDIATE waits in _begin_immediate
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def check(self) -> None:
        """Open the database (creating or migrating it) and check its integrity (``PRAGMA quick_check``:
        reads every page once), so a damaged file stops a server at start instead of answering 503 to
        every script. Raises :class:`TimelineDamagedError` (exit 2) naming the file and what to do,
        :class:`~bootserver.errors.BootserverError` (exit 1) when it cannot be opened at all (``state_dir``
        not creatable, permissions, locked): one line naming the file."""
        try:
            with self._lock:
                problems = [r[0] for r in self._db().execute("PRAGMA quick_check").fetchall()]
        except (sqlite3.OperationalError, OSError) as e:  # cannot open, locked, read-only: not damage
            self.close()
            raise BootserverError(f"{self.path}: cannot open the node timeline: "
                                  f"{getattr(e, 'strerror', None) or e}") from None
        except sqlite3.DatabaseError as e:  # not a database, malformed
            problems = [str(e)]
        if problems != ["ok"]:
            self.close()
            raise TimelineDamagedError(
                f"{self.path}: the node timeline is damaged ({'; '.join(problems[:3])}): stop every "
                f"bootserver using it, then restore it from a backup or move it aside (its stages and "
                f"boot-once marks are lost: installed nodes install again unless marked by hand)")

    def checkpoint(self) -> None:
        """Copy the WAL's committed pages into the database file (``PRAGMA wal_checkpoint(PASSIVE)``:
        it never blocks writers or readers). Blocking; opens and closes its own connection.
        Raises ``sqlite3.Error``."""
        conn = sqlite3.connect(self.path, timeout=5.0, isolation_level=None)
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            conn.close()

    def _read_db(self) -> sqlite3.Connection:
        """The read connection (separate from the writer's, so a read never queues behind a commit)."""
        if self._reader is None:
            with self._lock:
                self._db()  # creates the file, WAL mode and the schema
            self._reader = sqlite3.connect(self.path, timeout=1.0, check_same_thread=False,
                                           isolation_level=None)
        return self._reader

    def close(self) -> None:
        """Close the database connections (they reopen on next use)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        with self._rlock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
        with self._glock:
            if self._gen is not None:
                self._gen.close()
                self._gen = None

    def record(self, node: str, event: str, *, mode: str, ip: str | None = None,
               detail: Mapping[str, Any] | None = None, at: float | None = None,
               real_config: bool = True) -> str:
        """Append ``event`` for ``node`` (at unix time ``at``, default now) and return the node's new stage.

        ``mode`` is the node's profile mode (``install`` or ``live``) and ``real_config`` whether its
        profile has a real Ignition config; they decide what ``stub`` and ``config`` mean. Raises
        ``ValueError`` for an unknown event, ``sqlite3.Error`` on disk trouble.
        """
        at = time.time() if at is None else at
        return self.record_many([Record(node, event, mode, at, ip, detail, real_config)])[0]

    def record_many(self, records: Sequence[Record]) -> list[str]:
        """Append ``records`` in order in one transaction; return each node's stage after its record.

        An event older than the node's current stage (``at`` before ``stage_at``: recorded late, e.g.
        by another worker process) is kept in the history but does not change the stage, so a late
        ``script`` cannot undo a newer ``installing``. A repeat that changes nothing is coalesced into
        the node's last row, and a node's history beyond ``keep_events`` rows loses its oldest (see the
        module docstring). All or nothing: raises ``sqlite3.Error`` on disk trouble, and then none of
        the records was written.
        """
        with self._lock:
            db = self._db()
            generation = self._generation()  # opened first: once committed, nothing may fail
            self._begin_immediate(db)
            try:
                w = run_batch(db, records, self.keep_events)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            if w.insert:  # a stage or a newest row changed: what other processes hold in memory is stale
                generation[:] = os.urandom(GENERATION_BYTES)
        return w.stages

    def generation(self) -> bytes:
        """The timeline's generation (:data:`GENERATION_FILE`): it changes after every commit, by any
        process on this machine, that changed a node's stage or its newest history row (every commit
        but those of mere repeats). A process may keep what it read of a node (:meth:`current`) while
        the generation it saw before reading stays the same. Raises ``OSError``."""
        return self._generation()[:]

    def _generation(self) -> mmap.mmap:
        if self._gen is not None:
            return self._gen
        with self._glock:
            if self._gen is not None:
                return self._gen
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path.with_name(GENERATION_FILE), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if os.fstat(fd).st_size < GENERATION_BYTES:
                    os.pwrite(fd, os.urandom(GENERATION_BYTES), 0)
                self._gen = mmap.mmap(fd, GENERATION_BYTES)
            finally:
                os.close(fd)
        return self._gen


    #: Seconds a writer waits for another process's write transaction before giving up.
    WRITE_WAIT = 5.0

    def _begin_immediate(self, db: sqlite3.Connection) -> None:
        """``BEGIN IMMEDIATE``, waiting up to :attr:`WRITE_WAIT` seconds for another process's write
        (``serve --workers`` processes, ``nodes reinstall``) in steps of 1 ms.

        sqlite's own busy handler (the connection ``timeout``) sleeps 1, 2, 5, ... up to 100 ms between
        attempts: with two workers committing hundreds of times a second, the loser of a race slept
        ~100 ms and p99 latency of the script endpoint rose to 400-600 ms.
        """
        self._wait_unlocked(lambda: db.execute("BEGIN IMMEDIATE"))

    def _wait_unlocked(self, statement: Callable[[], object]) -> None:
        """Run ``statement``, again every 1 ms while the database is locked, for up to :attr:`WRITE_WAIT`
        seconds. Raises ``sqlite3.OperationalError``."""
        deadline = time.monotonic() + self.WRITE_WAIT
        while True:
            try:
                statement()
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() >= deadline:
                    raise
            time.sleep(0.001)

    def stage(self, node: str) -> str:
        """The node's current stage (``new`` when it has no events), as last committed by any process.

        One indexed row on the read connection: cheap enough for the event loop.
        """
        with self._rlock:
            row = self._read_db().execute("SELECT stage FROM nodes WHERE node = ?", (node,)).fetchone()
        return row[0] if row else "new"

    def current(self, node: str) -> Current:
        """The node's stage and newest history row (:data:`CURRENT_SQL`), as last committed by any
        process. One indexed row on the read connection."""
        with self._rlock:
            return current_of(self._read_db().execute(CURRENT_SQL, (node,)).fetchone())

    def attribute(self, ip: str, *, now: float | None = None, window: float = ATTRIBUTION_WINDOW) -> str | None:
        """The node whose boot script was last served to ``ip`` within ``window`` seconds, or ``None``."""
        now = time.time() if now is None else now
        with self._rlock:
            row = self._read_db().execute(
                "SELECT node FROM events WHERE event = 'script' AND ip = ? AND last_at >= ? "
                "ORDER BY last_at DESC, id DESC LIMIT 1", (ip, now - window)).fetchone()
        return row[0] if row else None

    def events(self, node: str, *, limit: int | None = None) -> list[Event]:
        """The node's history rows, oldest first (the last ``limit`` if given); a row of coalesced
        repeats has ``count`` > 1."""
        with self._lock:
            rows = self._db().execute(
                "SELECT node, at, event, ip, detail, count, last_at FROM events WHERE node = ? "
                "ORDER BY at DESC, id DESC LIMIT ?", (node, -1 if limit is None else limit)).fetchall()
        return [Event(n, at, ev, ip, json.loads(d) if d else {}, count, last)
                for n, at, ev, ip, d, count, last in reversed(rows)]

    def node(self, node: str) -> NodeState:
        """One node's state (``new`` with no times when it has no events)."""
        with self._lock:
            row = self._db().execute(NODES_SQL + " WHERE n.node = ?", (node,)).fetchone()
        return NodeState(*row) if row else NodeState(node, "new", None, None, None)

    def nodes(self, names: Iterator[str] | list[str] | tuple[str, ...] = ()) -> list[NodeState]:
        """Every node with events plus every name in ``names`` (as ``new`` when it has none), by name."""
        with self._lock:
            rows = self._db().execute(NODES_SQL).fetchall()
        states = {r[0]: NodeState(*r) for r in rows}
        for name in names:
            states.setdefault(name, NodeState(name, "new", None, None, None))
        return [states[n] for n in sorted(states)]

    # -- device records (what each node's provider recorded at ``provision``) ----------------------

    def devices(self, names: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
        """``{node: its device record}`` of the nodes in ``names`` that have one (every node's when
        ``names`` is ``None``). Raises ``sqlite3.Error``, ``ValueError`` for a record that is not a
        JSON object."""
        with self._lock:
            rows = self._db().execute("SELECT node, device FROM devices ORDER BY node").fetchall()
        wanted = None if names is None else set(names)
        return {n: device_of(d) for n, d in rows if wanted is None or n in wanted}

    def write_devices(self, records: Mapping[str, Mapping[str, Any] | None], *, replace: bool = True,
                      at: float | None = None) -> list[str]:
        """Write each node's device record in one transaction (``None``: remove the node's record), and
        change :meth:`generation` (a server holding the node's :class:`Current` reads it again). With
        ``replace=False`` a node that has a record keeps it. Returns the nodes whose record was written
        or removed, in the given order. All or nothing: raises ``sqlite3.Error`` (then nothing was
        written), ``TypeError`` for a record JSON cannot hold."""
        at = time.time() if at is None else at
        rows = [(n, None if d is None else device_json(d)) for n, d in records.items()]
        upsert = ("INSERT INTO devices (node, device, updated) VALUES (?, ?, ?) ON CONFLICT (node) DO "
                  + ("UPDATE SET device = excluded.device, updated = excluded.updated" if replace else "NOTHING"))
        done = []
        with self._lock:
            db = self._db()
            generation = self._generation()
            self._begin_immediate(db)
            try:
                for node, text in rows:
                    if text is None:
                        changed = db.execute("DELETE FROM devices WHERE node = ?", (node,)).rowcount
                    else:
                        changed = db.execute(upsert, (node, text, at)).rowcount
                    if changed:
                        done.append(node)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            if done:
                generation[:] = os.urandom(GENERATION_BYTES)
        return done


class Batches:
    """Group commit on one event loop, with write-behind for repeats.

    :meth:`record` queues a record and waits for its commit (write-through); :meth:`record_behind`
    queues one without waiting (write-behind: a repeat that only counts into the node's newest row,
    see :meth:`Current.coalesces`), merged in memory with an equal record of the same node still
    queued. One drain task hands everything queued to ``commit`` (one transaction: all or nothing),
    in order; what arrives meanwhile forms the next batch. A write-through record starts a batch at
    once; write-behind records alone wait up to :attr:`WINDOW` seconds for one. So ``kill -9`` loses
    at most the repeats of the last window (plus the batch being committed); :meth:`drained` (the
    ``close`` of a store, on SIGTERM) commits everything queued. Used by :class:`GroupCommit`
    (sqlite, on a writer thread) and the PostgreSQL store."""

    #: Seconds a write-behind record waits for its batch when no write-through record starts one.
    WINDOW = 0.25

    def __init__(self, commit: Callable[[list[Record]], Awaitable[list[str]]]) -> None:
        self._commit = commit
        self._queue: list[tuple[Record, asyncio.Future[str] | None]] = []
        #: node -> ``[index in _queue, count, last_at, into]`` of its newest entry when that entry is a
        #: write-behind record (merged repeats are counted here, not copied per request)
        self._behind: dict[str, list[Any]] = {}
        self._urgent = False
        self._draining: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closing = False
        self._failing = False  # the last batch failed (its write-behind records wait for the next)

    async def record(self, record: Record) -> str:
        """Commit ``record``; return the node's stage after it. Raises what ``commit`` raised for its
        batch (then nothing of that batch was written)."""
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        held = self._behind.pop(record.node, None)
        if held is not None:  # later repeats must not merge across this record
            self._seal(held)
        self._queue.append((record, fut))
        self._kick(urgent=True)
        return await fut

    def record_behind(self, record: Record, into: int | None = None) -> None:
        """Queue ``record`` without waiting for its commit (call on the loop); ``into``: the history
        row it repeats (:attr:`Record.into`). When its batch fails (nothing of it was written) it
        waits for the next one; see :meth:`drained` for shutdown."""
        held = self._behind.get(record.node)
        if held is not None and held[3] == into and self._queue[held[0]][0].repeats(record, held[2]):
            held[1] += record.count
            held[2] = record.last
            return
        self._behind[record.node] = [len(self._queue), record.count, record.last, into]
        self._queue.append((record, None))
        self._kick(urgent=False)

    def _take(self) -> list[tuple[Record, asyncio.Future[str] | None]]:
        """Everything queued, as one batch (merged repeats made into one record each)."""
        for held in self._behind.values():
            self._seal(held)
        batch, self._queue, self._behind, self._urgent = self._queue, [], {}, False
        return batch

    def _seal(self, held: list[Any]) -> None:
        """Write a write-behind entry's merged count into its queued record."""
        i, count, last, into = held
        r = self._queue[i][0]
        if count != r.count or into is not None:
            self._queue[i] = (replace(r, count=count, last_at=last, into=into), None)

    def _requeue(self, behind: list[Record]) -> None:
        """Put the write-behind records of a failed batch back before what was queued since."""
        since = self._take()
        self._queue = [(r, None) for r in behind] + since
        self._urgent = any(fut is not None for _, fut in since)

    def _kick(self, urgent: bool) -> None:
        self._urgent = self._urgent or urgent
        if self._draining is not None:
            return  # the running drain takes it
        if self._urgent:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._draining = asyncio.create_task(self._drain())
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.WINDOW, self._window_over)

    def _window_over(self) -> None:
        self._timer = None
        self._kick(urgent=True)

    def committed(self, count: int) -> None:
        """Called on the loop after each committed batch of ``count`` records (a hook)."""

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch = self._take()
                try:
                    stages = await self._commit([r for r, _ in batch])
                except asyncio.CancelledError:
                    for _, fut in batch + self._queue:
                        if fut is not None:
                            fut.cancel()
                    raise
                except Exception as e:  # every waiter of the batch gets the error
                    for _, fut in batch:
                        if fut is not None and not fut.done():
                            fut.set_exception(e)
                    # nothing of the batch was written: its write-behind records wait for the next one
                    behind = [r for r, fut in batch if fut is None]
                    if behind:
                        if not self._failing:  # once per outage, not once per window
                            log.warning("node timeline: %d repeated events wait for the next batch: %s",
                                        sum(r.count for r in behind), e)
                        self._failing = True
                        self._requeue(behind)
                    if self._closing:
                        break
                else:
                    for (_, fut), stage in zip(batch, stages, strict=True):
                        if fut is not None and not fut.done():
                            fut.set_result(stage)
                    if self._failing:
                        log.warning("node timeline: batches commit again")
                        self._failing = False
                    self.committed(len(batch))
                if not self._urgent:
                    break  # only write-behind records came meanwhile: they wait for their window
        finally:
            self._draining = None
            if self._queue:
                self._kick(urgent=False)

    async def drained(self, closing: bool = False) -> None:
        """Commit everything queued so far, write-behind records included, and return (a failed batch
        is tried once more; its write-behind records then wait for the next one). With ``closing``
        (the store closes) what still cannot be committed is dropped, with a log line."""
        self._closing = closing
        try:
            for _ in range(2):  # the batch in progress, then one of everything queued before the call
                if self._draining is None:
                    if not self._queue:
                        break
                    self._kick(urgent=True)
                # (_draining is an optional task, set by _kick above, which mypy cannot follow)
                await asyncio.gather(self._draining, return_exceptions=True)  # type: ignore[arg-type]
            if closing and self._queue:
                log.error("node timeline: %d repeated events not recorded at shutdown",
                          sum(r.count for r, _ in self._take()))
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
        finally:
            self._closing = False


class GroupCommit(Batches):
    """Asynchronous writes to a sqlite :class:`Timeline` with group commit (:class:`Batches`) on one
    writer thread of its own, so timeline writes never wait behind other blocking work.

    Commits do not checkpoint the WAL: after every :attr:`CHECKPOINT_EVERY` records a second thread
    does, so its fsync never holds up a batch (it did: p99 latency of the script endpoint went from
    about 25 ms to 80-450 ms on a VM disk). :meth:`record` raises ``sqlite3.Error`` or ``OSError``.
    """

    #: Records committed between two WAL checkpoints (a record is about 4 KiB of WAL at most).
    CHECKPOINT_EVERY = 1000

    def __init__(self, timeline: Timeline) -> None:
        super().__init__(self._in_thread)
        self.timeline = timeline
        timeline.auto_checkpoint = False
        self._executor: ThreadPoolExecutor | None = None
        self._checkpointer: ThreadPoolExecutor | None = None
        self._checkpointing: asyncio.Future[None] | None = None
        self._since_checkpoint = 0

    async def _in_thread(self, records: list[Record]) -> list[str]:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="timeline-writer")
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.timeline.record_many,
                                                                records)

    def committed(self, count: int) -> None:
        self._since_checkpoint += count
        if self._since_checkpoint >= self.CHECKPOINT_EVERY and self._checkpointing is None:
            self._since_checkpoint = 0
            self._start_checkpoint(asyncio.get_running_loop())

    def _start_checkpoint(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._checkpointer is None:
            self._checkpointer = ThreadPoolExecutor(1, thread_name_prefix="timeline-checkpoint")
        fut = loop.run_in_executor(self._checkpointer, self.timeline.checkpoint)
        self._checkpointing = fut

        def done(f: asyncio.Future[None]) -> None:
            self._checkpointing = None
            if not f.cancelled() and f.exception() is not None:
                log.warning("%s: WAL checkpoint failed: %s", self.timeline.path, f.exception())

        fut.add_done_callback(done)

    def close(self) -> None:
        """Stop the writer and checkpoint threads once their current work is done (call after the
        last write)."""
        for executor in (self._executor, self._checkpointer):
            if executor is not None:
                executor.shutdown(wait=True)
        self._executor = self._checkpointer = None


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
    many older rows ``keep_events`` dropped, if any."""
    def stamp(t: float) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))

    lines = []
    if state.dropped:
        lines.append(f"({state.dropped} older events dropped: timeline.keep_events keeps {keep_events} per node)")
    for e in events:
        detail = " ".join(f"{k}={v}" for k, v in e.detail.items())
        repeats = f" ({e.count} times, last at {stamp(e.last_at or e.at)})" if e.count > 1 else ""
        lines.append(f"{stamp(e.at)}  {e.event:<20} {e.ip or '-':<15} {detail}".rstrip() + repeats)
    return "".join(line + "\n" for line in lines)


def format_stalled(deadline: float | None, now: float) -> str:
    """The STALLED cell of a node whose stall deadline (:func:`stall_deadline`) is ``deadline``:
    ``-`` (not stalled), else how long past it, ``stalled 12m``."""
    if deadline is None or now < deadline:
        return "-"
    return "stalled " + format_age(now - deadline).removesuffix(" ago")


def format_table(states: list[NodeState], now: float, profiles: Mapping[str, str] | None = None,
                 deadlines: Mapping[str, float | None] | None = None) -> str:
    """The ``bootserver nodes`` table: node, profile, stage, since, stalled (``deadlines``: each node's
    :func:`stall_deadline`, see :func:`format_stalled`), last event, when (plain text)."""
    profiles = profiles or {}
    deadlines = deadlines or {}
    rows = [("NODE", "PROFILE", "STAGE", "SINCE", "STALLED", "LAST EVENT", "WHEN")]
    for st in states:
        rows.append((st.node, profiles.get(st.node, "-"), st.stage,
                     format_age(None if st.stage_at is None else now - st.stage_at),
                     format_stalled(deadlines.get(st.node), now),
                     st.last_event or "-", format_age(None if st.last_at is None else now - st.last_at)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n" for r in rows)
