"""The node timeline: every node's boot events with timestamps, kept in ``state_dir`` (sqlite, WAL).

Equinix marks a custom-iPXE device ``active`` as soon as iPXE is served, so its API never says whether
an install worked; the boot server is the only place that sees a node's whole boot. Events (stable
names, see docs/troubleshooting.md):

``script``                  the node's iPXE boot script was served (detail: ``mode``, ``release``)
``localboot``               the boot-disk script was served instead (boot-once, see below)
``<kind>-requested``        ``kind`` in kernel, initramfs, rootfs: an artifact request began
``<kind>-completed``        ... was sent in full (detail: ``bytes``)
``<kind>-failed``           ... ended with an error status or a broken connection (detail: ``bytes``,
                            ``status``)
``stub``                    the merge-style Ignition stub was served
``config``                  the real Ignition config was served
``reinstall``               ``bootserver nodes reinstall NODE`` marked the node for reinstall

Artifact URLs are shared by every node of a release, so an artifact request is attributed to the node
whose boot script was last served to the same client IP within :data:`ATTRIBUTION_WINDOW` seconds (the
iPXE firmware, the live kernel and the installer of one device all use the device's address). Requests
from an IP no script was served to are not recorded. Behind NAT or a proxy that hides client addresses
the attribution is wrong or missing; the per-node events (script, stub, config) are always right.

Stages (what :meth:`Timeline.nodes` reports), a pure function of the event sequence
(:func:`next_stage`)::

    new -> ipxe -> kernel -> initramfs -> rootfs -> installing -> installed     (mode install)
    new -> ipxe -> kernel -> initramfs -> rootfs -> ignition   -> running       (mode live)

``installing``: coreos-installer in the live system fetched the stub (it embeds it in the installed
disk; it never fetches the real config). ``installed``: the real config was fetched, which in install
mode only the installed system's first boot does. In live mode the live system's Ignition fetches the
stub (``ignition``) and then the real config (``running``). ``reinstall``: marked for reinstall, the
next script request installs again. ``localboot`` events leave the stage as it is.

This module is plain domain code (stdlib sqlite3, no aiohttp). :class:`Timeline`'s methods are
blocking and thread-safe. The server writes through :class:`GroupCommit`: one writer thread commits
every event waiting in one transaction (group commit), so a boot storm costs one commit per batch, not
one per request. Its reads (:meth:`Timeline.stage`, :meth:`Timeline.attribute`: one indexed row) run on
the event loop over a separate read connection; in WAL mode readers never wait for the writer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from .streams import ARTIFACT_KINDS

log = logging.getLogger("bootserver.timeline")

#: Seconds after a node's script was served during which artifact requests from the same client IP are
#: attributed to that node (an install's rootfs download may start minutes after the script).
ATTRIBUTION_WINDOW = 3600.0

#: Every stage, in the order of a boot.
STAGES = ("new", "reinstall", "ipxe", "kernel", "initramfs", "rootfs", "installing", "installed",
          "ignition", "running")

#: Every event name.
EVENTS = ("script", "localboot", "stub", "config", "reinstall",
          *(f"{k}-{s}" for k in ARTIFACT_KINDS for s in ("requested", "completed", "failed")))

#: Stages after which an install-mode node with boot-once boots its local disk.
INSTALLED_STAGES = frozenset({"installing", "installed"})

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    node   TEXT NOT NULL,
    at     REAL NOT NULL,          -- unix time, seconds
    event  TEXT NOT NULL,
    ip     TEXT,
    detail TEXT                    -- JSON object or NULL
);
CREATE INDEX IF NOT EXISTS events_node ON events (node, at, id);
CREATE INDEX IF NOT EXISTS events_script_ip ON events (ip, at) WHERE event = 'script';
CREATE TABLE IF NOT EXISTS nodes (
    node       TEXT PRIMARY KEY,
    stage      TEXT NOT NULL,
    stage_at   REAL NOT NULL,      -- when the node entered its stage, unix seconds
    last_event TEXT NOT NULL,
    last_at    REAL NOT NULL
);
"""


def next_stage(stage: str, event: str, mode: str) -> str:
    """The stage a node is in after ``event``, given its current ``stage`` and its profile's ``mode``.

    Raises ``ValueError`` for an unknown event name.
    """
    if event == "reinstall":
        return "reinstall"
    if event == "script":
        return "ipxe"
    if event == "localboot":
        return stage
    if event == "stub":
        return "installing" if mode == "install" else "ignition"
    if event == "config":
        return "installed" if mode == "install" else "running"
    kind, _, what = event.partition("-")
    if kind in ARTIFACT_KINDS and what in ("requested", "completed", "failed"):
        # a stray artifact request (a retry, a curl from the same host) must not undo an install
        return stage if stage in ("installing", "installed", "ignition", "running") else kind
    raise ValueError(f"unknown timeline event {event!r}")


@dataclass(frozen=True, slots=True)
class Event:
    """One recorded event: ``at`` is unix time in seconds; ``detail`` a JSON-able mapping."""

    node: str
    at: float
    event: str
    ip: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able dict (``at`` as unix seconds)."""
        return {"node": self.node, "at": self.at, "event": self.event, "ip": self.ip, "detail": dict(self.detail)}


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node's current ``stage`` (entered at ``stage_at``) and its last event (at ``last_at``), unix s."""

    node: str
    stage: str
    stage_at: float | None
    last_event: str | None
    last_at: float | None

    def as_dict(self, now: float) -> dict[str, Any]:
        """A JSON-able dict, with ``stage_age`` and ``last_age`` in seconds before ``now`` (or null)."""
        return {"node": self.node, "stage": self.stage, "stage_at": self.stage_at,
                "stage_age": None if self.stage_at is None else round(now - self.stage_at, 3),
                "last_event": self.last_event, "last_at": self.last_at,
                "last_age": None if self.last_at is None else round(now - self.last_at, 3)}


@dataclass(frozen=True, slots=True)
class Record:
    """One event to append: ``node``'s ``event`` at unix time ``at`` (seconds) from ``ip``, with its
    profile's ``mode`` (``install`` or ``live``, which decides what ``stub`` and ``config`` mean).

    Raises ``ValueError`` for an unknown event name.
    """

    node: str
    event: str
    mode: str
    at: float
    ip: str | None = None
    detail: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.event not in EVENTS:
            raise ValueError(f"unknown timeline event {self.event!r}")


class Timeline:
    """The timeline database ``<state_dir>/timeline.sqlite3``.

    Opened lazily on first use (creating ``state_dir`` and the file), in WAL mode so ``bootserver
    nodes`` can read and ``bootserver nodes reinstall`` can write while the server runs. Blocking,
    thread-safe. Errors: ``sqlite3.Error`` or ``OSError`` when the database cannot be opened or written.
    """

    FILENAME = "timeline.sqlite3"

    def __init__(self, state_dir: Path) -> None:
        self.path = Path(state_dir) / self.FILENAME
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._rlock = threading.Lock()
        self._reader: sqlite3.Connection | None = None
        #: False: commits never checkpoint the WAL (its fsync can take a slow disk's hundreds of ms);
        #: the owner calls :meth:`checkpoint` from elsewhere instead (see :class:`GroupCommit`).
        self.auto_checkpoint = True

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=5.0, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            if not self.auto_checkpoint:
                conn.execute("PRAGMA wal_autocheckpoint=0")
            conn.executescript(_SCHEMA)
            conn.execute("PRAGMA busy_timeout=0")  # from now on, BEGIN IMMEDIATE waits in _begin_immediate
            self._conn = conn
        return self._conn

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

    def record(self, node: str, event: str, *, mode: str, ip: str | None = None,
               detail: Mapping[str, Any] | None = None, at: float | None = None) -> str:
        """Append ``event`` for ``node`` (at unix time ``at``, default now) and return the node's new stage.

        ``mode`` is the node's profile mode (``install`` or ``live``), which decides what ``stub`` and
        ``config`` mean. Raises ``ValueError`` for an unknown event, ``sqlite3.Error`` on disk trouble.
        """
        at = time.time() if at is None else at
        return self.record_many([Record(node, event, mode, at, ip, detail)])[0]

    def record_many(self, records: Sequence[Record]) -> list[str]:
        """Append ``records`` in order in one transaction; return each node's stage after its record.

        An event older than the node's current stage (``at`` before ``stage_at``: recorded late, e.g.
        by another worker process) is kept in the history but does not change the stage, so a late
        ``script`` cannot undo a newer ``installing``. All or nothing: raises ``sqlite3.Error`` on disk
        trouble, and then none of the records was written.
        """
        stages: list[str] = []
        with self._lock:
            db = self._db()
            self._begin_immediate(db)
            try:
                for r in records:
                    row = db.execute("SELECT stage, stage_at, last_event, last_at FROM nodes WHERE node = ?",
                                     (r.node,)).fetchone()
                    stage, stage_at, last_event, last_at = row if row else ("new", r.at, r.event, r.at)
                    new = next_stage(stage, r.event, r.mode) if r.at >= stage_at else stage
                    if new != stage:
                        stage_at = r.at
                    if r.at >= last_at:  # a completion recorded late must not hide a newer event
                        last_event, last_at = r.event, r.at
                    db.execute("INSERT INTO events (node, at, event, ip, detail) VALUES (?, ?, ?, ?, ?)",
                               (r.node, r.at, r.event, r.ip, json.dumps(dict(r.detail)) if r.detail else None))
                    db.execute("INSERT INTO nodes (node, stage, stage_at, last_event, last_at) "
                               "VALUES (?, ?, ?, ?, ?) ON CONFLICT (node) DO UPDATE SET stage = excluded.stage, "
                               "stage_at = excluded.stage_at, last_event = excluded.last_event, "
                               "last_at = excluded.last_at",
                               (r.node, new, stage_at, last_event, last_at))
                    stages.append(new)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return stages

    #: Seconds a writer waits for another process's write transaction before giving up.
    WRITE_WAIT = 5.0

    def _begin_immediate(self, db: sqlite3.Connection) -> None:
        """``BEGIN IMMEDIATE``, waiting up to :attr:`WRITE_WAIT` seconds for another process's write
        (``serve --workers`` processes, ``nodes reinstall``) in steps of 1 ms.

        sqlite's own busy handler (the connection ``timeout``) sleeps 1, 2, 5, ... up to 100 ms between
        attempts: with two workers committing hundreds of times a second, the loser of a race slept
        ~100 ms and p99 latency of the script endpoint rose to 400-600 ms.
        """
        deadline = time.monotonic() + self.WRITE_WAIT
        while True:
            try:
                db.execute("BEGIN IMMEDIATE")
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

    def attribute(self, ip: str, *, now: float | None = None, window: float = ATTRIBUTION_WINDOW) -> str | None:
        """The node whose boot script was last served to ``ip`` within ``window`` seconds, or ``None``."""
        now = time.time() if now is None else now
        with self._rlock:
            row = self._read_db().execute(
                "SELECT node FROM events WHERE event = 'script' AND ip = ? AND at >= ? ORDER BY at DESC, id DESC "
                "LIMIT 1", (ip, now - window)).fetchone()
        return row[0] if row else None

    def events(self, node: str, *, limit: int | None = None) -> list[Event]:
        """The node's events, oldest first (the last ``limit`` if given)."""
        with self._lock:
            rows = self._db().execute(
                "SELECT node, at, event, ip, detail FROM events WHERE node = ? ORDER BY at DESC, id DESC LIMIT ?",
                (node, -1 if limit is None else limit)).fetchall()
        return [Event(n, at, ev, ip, json.loads(d) if d else {}) for n, at, ev, ip, d in reversed(rows)]

    def nodes(self, names: Iterator[str] | list[str] | tuple[str, ...] = ()) -> list[NodeState]:
        """Every node with events plus every name in ``names`` (as ``new`` when it has none), by name."""
        with self._lock:
            rows = self._db().execute("SELECT node, stage, stage_at, last_event, last_at FROM nodes").fetchall()
        states = {r[0]: NodeState(*r) for r in rows}
        for name in names:
            states.setdefault(name, NodeState(name, "new", None, None, None))
        return [states[n] for n in sorted(states)]


class GroupCommit:
    """Asynchronous writes to a :class:`Timeline` with group commit, for one event loop.

    :meth:`record` queues an event and waits for its commit. One writer thread (its own, so timeline
    writes never wait behind other blocking work) commits everything queued in one transaction; what
    arrives meanwhile forms the next batch. Events commit in the order they were queued. Under a boot
    storm this is one commit and one thread hand-off per batch instead of per request.

    Commits do not checkpoint the WAL: after every :attr:`CHECKPOINT_EVERY` records a second thread
    does, so its fsync never holds up a batch (it did: p99 latency of the script endpoint went from
    about 25 ms to 80-450 ms on a VM disk).
    """

    #: Records committed between two WAL checkpoints (a record is about 4 KiB of WAL at most).
    CHECKPOINT_EVERY = 1000

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        timeline.auto_checkpoint = False
        self._queue: list[tuple[Record, asyncio.Future[str]]] = []
        self._draining = False
        self._executor: ThreadPoolExecutor | None = None
        self._checkpointer: ThreadPoolExecutor | None = None
        self._checkpointing: asyncio.Future[None] | None = None
        self._since_checkpoint = 0

    async def record(self, record: Record) -> str:
        """Commit ``record``; return the node's stage after it. Raises ``sqlite3.Error`` or ``OSError``
        when its batch could not be committed (nothing of that batch was written)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[str] = loop.create_future()
        self._queue.append((record, fut))
        if not self._draining:
            self._draining = True
            loop.create_task(self._drain())
        return await fut

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="timeline-writer")
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                try:
                    stages = await loop.run_in_executor(self._executor, self.timeline.record_many,
                                                        [r for r, _ in batch])
                except asyncio.CancelledError:
                    for _, fut in batch + self._queue:
                        fut.cancel()
                    raise
                except Exception as e:  # every waiter of the batch gets the error
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(e)
                    continue
                for (_, fut), stage in zip(batch, stages):
                    if not fut.done():
                        fut.set_result(stage)
                self._since_checkpoint += len(batch)
                if self._since_checkpoint >= self.CHECKPOINT_EVERY and self._checkpointing is None:
                    self._since_checkpoint = 0
                    self._start_checkpoint(loop)
        finally:
            self._draining = False

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


def format_table(states: list[NodeState], now: float, profiles: Mapping[str, str] | None = None) -> str:
    """The ``bootserver nodes`` table: node, profile, stage, since, last event, when (plain text)."""
    profiles = profiles or {}
    rows = [("NODE", "PROFILE", "STAGE", "SINCE", "LAST EVENT", "WHEN")]
    for st in states:
        rows.append((st.node, profiles.get(st.node, "-"), st.stage,
                     format_age(None if st.stage_at is None else now - st.stage_at),
                     st.last_event or "-", format_age(None if st.last_at is None else now - st.last_at)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n" for r in rows)
