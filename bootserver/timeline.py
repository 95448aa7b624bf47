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

``unconfirmed``: the stub was served to a node whose profile has no real Ignition config (no
``ignition`` key), so no later request can tell the server whether the install or the live boot
finished: the stub was the last thing the server will see. For boot-once it counts as installed, as
``installing`` does.

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
from collections.abc import Awaitable, Callable, Generator, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
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
          "ignition", "running", "unconfirmed")

#: What can happen to one artifact request (event ``<kind>-<outcome>``).
ARTIFACT_OUTCOMES = ("requested", "completed", "partial", "unchanged", "failed")

#: Every event name.
EVENTS = ("script", "localboot", "stub", "config", "reinstall",
          *(f"{k}-{s}" for k in ARTIFACT_KINDS for s in ARTIFACT_OUTCOMES))

#: Stages after which an install-mode node with boot-once boots its local disk.
INSTALLED_STAGES = frozenset({"installing", "installed", "unconfirmed"})

#: Stages a stray artifact request (a retry, a curl from the same host) must not undo.
_FINAL_STAGES = frozenset({"installing", "installed", "ignition", "running", "unconfirmed"})

#: Default of ``timeline.keep_events``: rows of history kept per node (a full install is about 12).
KEEP_EVENTS = 1000

#: Version of the timeline schema (``PRAGMA user_version`` in sqlite; see :func:`_migrate`).
SCHEMA_VERSION = 2

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


def _migrate(db: sqlite3.Connection) -> None:
    """Bring the database to :data:`SCHEMA_VERSION` inside one write transaction (so two processes
    starting at once migrate once). Raises ``sqlite3.Error`` (``DatabaseError`` for a corrupt file)."""
    if db.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        if db.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
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
    kind, _, what = event.partition("-")
    if kind in ARTIFACT_KINDS and what in ARTIFACT_OUTCOMES:
        # a stray artifact request (a retry, a curl from the same host) must not undo an install
        return stage if stage in _FINAL_STAGES else kind
    raise ValueError(f"unknown timeline event {event!r}")


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
    ``dropped``: its oldest history rows removed by ``timeline.keep_events``."""

    node: str
    stage: str
    stage_at: float | None
    last_event: str | None
    last_at: float | None
    dropped: int = 0

    def as_dict(self, now: float) -> dict[str, Any]:
        """A JSON-able dict, with ``stage_age`` and ``last_age`` in seconds before ``now`` (or null)."""
        return {"node": self.node, "stage": self.stage, "stage_at": self.stage_at,
                "stage_age": None if self.stage_at is None else round(now - self.stage_at, 3),
                "last_event": self.last_event, "last_at": self.last_at,
                "last_age": None if self.last_at is None else round(now - self.last_at, 3),
                "dropped_events": self.dropped}


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

    def __post_init__(self) -> None:
        if self.event not in EVENTS:
            raise ValueError(f"unknown timeline event {self.event!r}")


#: One SQL statement of a :func:`append_steps` program: ``(sql with ? placeholders, parameters, want)``,
#: ``want`` being ``"row"`` (the first row or ``None``) or ``"rowcount"``.
Step = tuple[str, tuple[Any, ...], str]


def append_steps(r: Record, keep_events: int) -> Generator[Step, Any, str]:
    """The statements that append ``r`` inside an open write transaction, as a generator: it yields each
    :data:`Step` and is sent its result; it returns the node's stage after ``r``. The one definition
    of how an event changes the tables (stage, coalescing, ``keep_events``), run by the sqlite
    :class:`Timeline` (:func:`run_steps`) and the PostgreSQL store alike (the SQL is common to both).
    """
    # the node's row and its newest events row, in one statement (one round trip to PostgreSQL)
    row = yield ("SELECT n.stage, n.stage_at, n.last_event, n.last_at, n.last_id, n.events, n.dropped, "
                 "e.event, e.ip, e.detail, e.stage FROM nodes n LEFT JOIN events e ON e.id = n.last_id "
                 "WHERE n.node = ?", (r.node,), "row")
    stage, stage_at, last_event, last_at, last_id, held, dropped = \
        tuple(row[:7]) if row else ("new", r.at, r.event, r.at, None, 0, 0)
    prev = tuple(row[7:]) if row and row[7] is not None else None
    new = next_stage(stage, r.event, r.mode, real_config=r.real_config) if r.at >= stage_at else stage
    detail = json.dumps(dict(r.detail), sort_keys=True) if r.detail else None
    if new != stage:
        stage_at = r.at
    coalesced = False
    if prev == (r.event, r.ip, detail, new) and new == stage and r.at >= last_at:
        yield ("UPDATE events SET count = count + 1, last_at = ? WHERE id = ?", (r.at, last_id), "rowcount")
        coalesced = True
    if not coalesced:
        (last_id,) = yield ("INSERT INTO events (node, at, event, ip, detail, last_at, stage) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
                            (r.node, r.at, r.event, r.ip, detail, r.at, new), "row")
        if held < 0:  # migrated from schema 1: count once
            (held,) = yield ("SELECT count(*) FROM events WHERE node = ?", (r.node,), "row")
        else:
            held += 1
        if held > keep_events:
            gone = yield ("DELETE FROM events WHERE id IN (SELECT id FROM events WHERE node = ? "
                          "ORDER BY at, id LIMIT ?)", (r.node, held - keep_events), "rowcount")
            held -= gone
            dropped += gone
    if r.at >= last_at:  # a completion recorded late must not hide a newer event
        last_event, last_at = r.event, r.at
    yield ("INSERT INTO nodes (node, stage, stage_at, last_event, last_at, last_id, events, dropped) "
           "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (node) DO UPDATE SET stage = excluded.stage, "
           "stage_at = excluded.stage_at, last_event = excluded.last_event, "
           "last_at = excluded.last_at, last_id = excluded.last_id, events = excluded.events, "
           "dropped = excluded.dropped",
           (r.node, new, stage_at, last_event, last_at, last_id, held, dropped), "rowcount")
    return new


def run_steps(db: sqlite3.Connection, steps: Generator[Step, Any, str]) -> str:
    """Run an :func:`append_steps` program on a sqlite connection; returns what the program returns."""
    try:
        sql, params, want = next(steps)
        while True:
            cur = db.execute(sql, params)
            sql, params, want = steps.send(cur.fetchone() if want == "row" else cur.rowcount)
    except StopIteration as done:
        return done.value


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
        #: False: commits never checkpoint the WAL (its fsync can take a slow disk's hundreds of ms);
        #: the owner calls :meth:`checkpoint` from elsewhere instead (see :class:`GroupCommit`).
        self.auto_checkpoint = True

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=5.0, check_same_thread=False, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
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
        stages: list[str] = []
        with self._lock:
            db = self._db()
            self._begin_immediate(db)
            try:
                for r in records:
                    stages.append(self._append(db, r))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return stages

    def _append(self, db: sqlite3.Connection, r: Record) -> str:
        """One record inside the open transaction; returns the node's stage after it."""
        return run_steps(db, append_steps(r, self.keep_events))

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
            row = self._db().execute("SELECT node, stage, stage_at, last_event, last_at, dropped FROM nodes "
                                     "WHERE node = ?", (node,)).fetchone()
        return NodeState(*row) if row else NodeState(node, "new", None, None, None)

    def nodes(self, names: Iterator[str] | list[str] | tuple[str, ...] = ()) -> list[NodeState]:
        """Every node with events plus every name in ``names`` (as ``new`` when it has none), by name."""
        with self._lock:
            rows = self._db().execute(
                "SELECT node, stage, stage_at, last_event, last_at, dropped FROM nodes").fetchall()
        states = {r[0]: NodeState(*r) for r in rows}
        for name in names:
            states.setdefault(name, NodeState(name, "new", None, None, None))
        return [states[n] for n in sorted(states)]


class Batches:
    """Group commit on one event loop: :meth:`record` queues a record and waits for its commit; one
    drain task hands everything queued to ``commit`` (one transaction: all or nothing), what arrives
    meanwhile forms the next batch. Records commit in the order they were queued. Under a boot storm
    this is one commit per batch instead of one per request. Used by :class:`GroupCommit` (sqlite, on a
    writer thread) and the PostgreSQL store."""

    def __init__(self, commit: Callable[[list[Record]], Awaitable[list[str]]]) -> None:
        self._commit = commit
        self._queue: list[tuple[Record, asyncio.Future[str]]] = []
        self._draining: asyncio.Task[None] | None = None

    async def record(self, record: Record) -> str:
        """Commit ``record``; return the node's stage after it. Raises what ``commit`` raised for its
        batch (then nothing of that batch was written)."""
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._queue.append((record, fut))
        if self._draining is None:
            self._draining = asyncio.create_task(self._drain())
        return await fut

    def committed(self, count: int) -> None:
        """Called on the loop after each committed batch of ``count`` records (a hook)."""

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                try:
                    stages = await self._commit([r for r, _ in batch])
                except asyncio.CancelledError:
                    for _, fut in batch + self._queue:
                        fut.cancel()
                    raise
                except Exception as e:  # every waiter of the batch gets the error
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(e)
                    continue
                for (_, fut), stage in zip(batch, stages, strict=False):
                    if not fut.done():
                        fut.set_result(stage)
                self.committed(len(batch))
        finally:
            self._draining = None

    async def drained(self) -> None:
        """Wait until the records queued so far are committed (or failed)."""
        if self._draining is not None:
            await asyncio.gather(self._draining, return_exceptions=True)


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


def format_table(states: list[NodeState], now: float, profiles: Mapping[str, str] | None = None) -> str:
    """The ``bootserver nodes`` table: node, profile, stage, since, last event, when (plain text)."""
    profiles = profiles or {}
    rows = [("NODE", "PROFILE", "STAGE", "SINCE", "LAST EVENT", "WHEN")]
    for st in states:
        rows.append((st.node, profiles.get(st.node, "-"), st.stage,
                     format_age(None if st.stage_at is None else now - st.stage_at),
                     st.last_event or "-", format_age(None if st.last_at is None else now - st.last_at)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n" for r in rows)
