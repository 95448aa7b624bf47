"""The sqlite node timeline: :class:`Timeline`, the database ``<state_dir>/timeline.sqlite3`` (WAL),
its versioned schema (:func:`_migrate`), the start-up integrity check and the generation file.

The rules (stages, coalescing, ``keep_events``) are :mod:`bootserver.timeline`'s, shared with the
PostgreSQL store: :func:`run_batch` runs their one batch plan (:func:`~bootserver.timeline.plan_batch`)
on a sqlite connection. :class:`Timeline`'s methods are blocking and thread-safe. The server writes
through :class:`~bootserver.state.sqlite.GroupCommit`: one writer thread commits every event waiting in
one transaction, so a boot storm costs one commit per batch, not one per request. Its reads
(:meth:`Timeline.current`, :meth:`Timeline.attribute`: one indexed row) run on the event loop over a
separate read connection; in WAL mode readers never wait for the writer. Every commit that adds a row
changes :meth:`Timeline.generation`, so processes sharing the file know when what they hold of a node is
stale.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from ..discovery import COLUMNS, Discovered, merged, record_of, row_params
from ..errors import InputError
from ..files import LinkRefused
from ..timeline import (
    ATTRIBUTION_WINDOW,
    CURRENT_SQL,
    KEEP_EVENTS,
    NODES_SQL,
    Current,
    Event,
    NodeState,
    Record,
    boot_started_back,
    current_of,
    device_json,
    device_of,
)
from . import StateStoreError
from .apistore import SQLITE_SCHEMA as API_SCHEMA
from .nodestore import SCHEMA_SQL as INVENTORY_SCHEMA_SQL
from .sqlite_batch import run_batch

log = logging.getLogger("bootserver.timeline")

#: The file beside the timeline database whose bytes change whenever a commit changed a node's stage or
#: newest row (:meth:`Timeline.generation`): a shared-memory signal between the processes of one machine
#: that their in-memory view of the nodes is stale, cheaper than a query per request.
GENERATION_FILE = "timeline.generation"
GENERATION_BYTES = 8

#: Version of the timeline schema (``PRAGMA user_version`` in sqlite; see :func:`_migrate`).
SCHEMA_VERSION = 7

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


# Version 4: machines that reported themselves and are not nodes (bootserver.discovery).
_SCHEMA_V4 = """
CREATE TABLE IF NOT EXISTS discovered (
    mac        TEXT PRIMARY KEY,   -- aa:bb:cc:dd:ee:ff, the MAC the machine asked with
    uuid       TEXT,               -- SMBIOS UUID, lower-case, or NULL
    facts      TEXT NOT NULL,      -- JSON object of texts (serial, manufacturer, product, NICs...)
    address    TEXT,               -- where its last report came from
    first_seen REAL NOT NULL,      -- unix seconds
    last_seen  REAL NOT NULL,
    reports    INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS discovered_last_seen ON discovered (last_seen)
"""

# Version 5: every address that reported a MAC (bootserver.discovery.merged), not just the last one.
_COLUMNS_V5 = (("discovered", "addresses", "TEXT"),)  # JSON object {address: unix seconds of its last report}

#: Write a machine's record (``:mac, :uuid, :facts, :address, :first_seen, :last_seen, :reports,
#: :addresses``; :func:`~bootserver.discovery.merged` made it from the row read in the same transaction).
DISCOVER_SQL = ("INSERT INTO discovered (mac, uuid, facts, address, first_seen, last_seen, reports, addresses) "
                "VALUES (:mac, :uuid, :facts, :address, :first_seen, :last_seen, :reports, :addresses) "
                "ON CONFLICT (mac) DO UPDATE SET uuid = excluded.uuid, facts = excluded.facts, "
                "address = excluded.address, last_seen = excluded.last_seen, reports = excluded.reports, "
                "addresses = excluded.addresses")
#: Drop all but the ``:keep`` records reported last.
TRIM_DISCOVERED_SQL = ("DELETE FROM discovered WHERE mac IN (SELECT mac FROM discovered "
                       "ORDER BY last_seen DESC, mac LIMIT -1 OFFSET :keep)")
DISCOVERED_SQL = f"SELECT {COLUMNS} FROM discovered ORDER BY last_seen DESC, mac"


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
        if version < 4:
            for statement in filter(str.strip, _SCHEMA_V4.split(";")):
                db.execute(statement)
        if version < 5:
            for table, column, decl in _COLUMNS_V5:
                if column not in {r[1] for r in db.execute(f"PRAGMA table_info({table})")}:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
        if version < 6:  # the fleet API's tokens and audit trail (bootserver.state.apistore)
            for statement in filter(str.strip, API_SCHEMA.split(";")):
                db.execute(statement)
        if version < 7:  # the store's nodes (bootserver.state.nodestore)
            for statement in filter(str.strip, INVENTORY_SCHEMA_SQL.split(";")):
                db.execute(statement)
        if version < SCHEMA_VERSION:
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def connect(path: Path, **kwargs: Any) -> sqlite3.Connection:
    """``sqlite3.connect(path, **kwargs)`` that never opens the database through a link (SQLite's
    ``nofollow`` URI parameter, SQLite 3.31+) nor its ``-wal``/``-shm`` files (looked at first): the
    timeline is written, and a link in ``state_dir`` must not make the server write elsewhere. Raises
    :class:`~bootserver.files.LinkRefused` or ``sqlite3.Error``."""
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.is_symlink():
            raise LinkRefused(side)
    if path.is_symlink():
        raise LinkRefused(path)
    return sqlite3.connect(f"file:{quote(str(path))}?nofollow=1", uri=True, **kwargs)


T = TypeVar("T")


class TimelineDamagedError(StateStoreError, InputError):
    """The timeline database is not a usable sqlite database (exit 2, as bad input). The message names
    the file and what to do."""



class Timeline:
    """The timeline database ``<state_dir>/timeline.sqlite3``.

    Opened lazily on first use (creating ``state_dir`` and the file, migrating an older schema), in WAL
    mode so ``bootserver nodes`` can read and ``bootserver nodes reinstall`` can write while the server
    runs. Each node keeps its newest ``keep_events`` history rows. Blocking, thread-safe. Errors:
    ``sqlite3.Error`` or ``OSError`` when the database cannot be opened or written.
    """

    FILENAME = "timeline.sqlite3"

    #: Rows written (history records, discovery reports, device records, forgotten machines) between
    #: two WAL checkpoints when :attr:`auto_checkpoint` is off.
    CHECKPOINT_EVERY = 1000
    #: The bound on the ``-wal`` file while serving, bytes: whatever the write rate, it stays below.
    WAL_BOUND = 64 * 1024 * 1024
    #: A ``-wal`` file this large (bytes) after a commit gets a ``TRUNCATE`` checkpoint (it waits for
    #: readers to move to the newest snapshot, then empties the file), not a ``PASSIVE`` one: under a
    #: steady stream of commits a passive checkpoint never catches up with the writer, and the WAL,
    #: which only starts over once fully copied, would grow without end (it did: 285 MB from 10,000
    #: discovery reports). Its margin to :attr:`WAL_BOUND` covers the commits made while it waits.
    WAL_TRUNCATE_AT = 16 * 1024 * 1024

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
        #: the owner calls :meth:`checkpoint` from elsewhere instead (see
        #: :class:`~bootserver.state.sqlite.GroupCommit`).
        self.auto_checkpoint = True
        self._wal = self.path.with_name(self.FILENAME + "-wal")
        self._since_checkpoint = 0
        self._checkpointer: threading.Thread | None = None

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = connect(self.path, timeout=5.0, check_same_thread=False, isolation_level=None)
            try:
                # two processes creating the file at once: the switch to WAL can answer "locked" at
                # once (no busy handler), so it waits here as a write does
                self._wait_unlocked(lambda: conn.execute("PRAGMA journal_mode=WAL"))
                conn.execute("PRAGMA synchronous=NORMAL")
                if not self.auto_checkpoint:
                    conn.execute("PRAGMA wal_autocheckpoint=0")
                conn.execute(f"PRAGMA journal_size_limit={self.WAL_TRUNCATE_AT}")
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
        :class:`~bootserver.state.StateStoreError` (exit 1) when it cannot be opened at all (``state_dir``
        not creatable, permissions, locked): one line naming the file."""
        try:
            with self._lock:
                problems = [r[0] for r in self._db().execute("PRAGMA quick_check").fetchall()]
        except (sqlite3.OperationalError, OSError) as e:  # cannot open, locked, read-only: not damage
            self.close()
            raise StateStoreError(f"{self.path}: cannot open the node timeline: "
                                  f"{getattr(e, 'strerror', None) or e}") from None
        except sqlite3.DatabaseError as e:  # not a database, malformed
            problems = [str(e)]
        if problems != ["ok"]:
            self.close()
            raise TimelineDamagedError(
                f"{self.path}: the node timeline is damaged ({'; '.join(problems[:3])}): stop every "
                f"bootserver using it, then restore it from a backup or move it aside (its stages and "
                f"boot-once marks are lost: installed nodes install again unless marked by hand)")

    def checkpoint(self, mode: str = "PASSIVE") -> None:
        """Copy the WAL's committed pages into the database file (``PRAGMA wal_checkpoint(PASSIVE)``:
        it never blocks writers or readers; ``TRUNCATE``: waits up to 5 s for the writer and for readers
        of older snapshots, then empties the ``-wal`` file). Blocking; opens and closes its own
        connection. Raises ``sqlite3.Error``."""
        if mode not in ("PASSIVE", "TRUNCATE"):
            raise ValueError(f"checkpoint mode {mode!r}")
        conn = connect(self.path, timeout=5.0, isolation_level=None)
        try:
            conn.execute(f"PRAGMA wal_checkpoint({mode})")
        finally:
            conn.close()

    def _wrote(self, rows: int) -> None:
        """After a commit of ``rows`` rows (under ``_lock``): with :attr:`auto_checkpoint` off, start a
        checkpoint on a thread of its own (its fsync never holds up a commit: it did, p99 latency of
        the script endpoint went from about 25 ms to 80-450 ms on a VM disk) after every
        :attr:`CHECKPOINT_EVERY` rows, whatever wrote them, or at once, truncating, when the ``-wal``
        file reached :attr:`WAL_TRUNCATE_AT` bytes. One checkpoint at a time; a commit made while one
        runs asks again. Past half of :attr:`WAL_BOUND` the commit itself waits for a truncating one."""
        if self.auto_checkpoint:
            return
        self._since_checkpoint += rows
        try:
            size = os.stat(self._wal).st_size
        except OSError:
            size = 0
        big = size >= self.WAL_TRUNCATE_AT
        if self._since_checkpoint < self.CHECKPOINT_EVERY and not big:
            return
        if size >= self.WAL_BOUND // 2:  # the checkpoints fall behind (a long reader?): this commit waits
            self.wait_checkpoint()
            self._since_checkpoint = 0
            self._checkpoint_behind("TRUNCATE")
            return
        if self._checkpointer is not None and self._checkpointer.is_alive():
            return
        self._since_checkpoint = 0
        mode = "TRUNCATE" if big else "PASSIVE"
        self._checkpointer = threading.Thread(target=self._checkpoint_behind, args=(mode,),
                                              name="timeline-checkpoint", daemon=True)
        self._checkpointer.start()

    def _checkpoint_behind(self, mode: str) -> None:
        try:
            self.checkpoint(mode)
        except (sqlite3.Error, OSError) as e:
            log.warning("%s: WAL checkpoint failed: %s", self.path, e)

    def wait_checkpoint(self) -> None:
        """Wait for the checkpoint started after a commit, if one runs."""
        checkpointer = self._checkpointer
        if checkpointer is not None:
            checkpointer.join()

    def _read_db(self) -> sqlite3.Connection:
        """The read connection (separate from the writer's, so a read never queues behind a commit)."""
        if self._reader is None:
            with self._lock:
                self._db()  # creates the file, WAL mode and the schema
            self._reader = connect(self.path, timeout=1.0, check_same_thread=False, isolation_level=None)
        return self._reader

    def close(self) -> None:
        """Close the database connections (they reopen on next use), after the checkpoint running, if
        any."""
        self.wait_checkpoint()
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
            self._wrote(len(records))
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
            # never through a link: this file is written on every commit (files.LinkRefused)
            fd = os.open(self.path.with_name(GENERATION_FILE), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
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

    def transaction(self, work: Callable[[sqlite3.Connection], T], rows: int = 1) -> T:
        """``work(db)`` inside one write transaction (``BEGIN IMMEDIATE``: other writers wait, see
        :meth:`_begin_immediate`), committed when it returns, rolled back when it raises (then nothing
        of it was written); ``rows`` counts toward the next WAL checkpoint. Raises what ``work`` raised
        or ``sqlite3.Error``."""
        with self._lock:
            db = self._db()
            self._begin_immediate(db)
            try:
                out = work(db)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self._wrote(max(rows, 1))
        return out

    def snapshot(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work(db)`` on the read connection inside one read transaction: every statement of it sees
        the same committed state. Raises what ``work`` raised or ``sqlite3.Error``."""
        with self._rlock:
            db = self._read_db()
            db.execute("BEGIN")
            try:
                return work(db)
            finally:
                db.execute("COMMIT")

    def read_one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """The first column of the first row of ``sql`` on the read connection (``None``: no row): one
        indexed row, cheap enough for the event loop. Raises ``sqlite3.Error``."""
        with self._rlock:
            row = self._read_db().execute(sql, params).fetchone()
        return None if row is None else row[0]

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

    def boot_started(self, node: str) -> float | None:
        """:func:`~bootserver.timeline.boot_started` of the node, read newest row first on the read
        connection and only as far back as its latest boot (about a dozen indexed rows, not its whole
        history)."""
        with self._rlock:
            rows = self._read_db().execute(
                "SELECT event, at FROM events WHERE node = ? ORDER BY at DESC, id DESC", (node,))
            try:
                return boot_started_back(rows)
            finally:
                rows.close()

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

    # -- discovered machines (bootserver.discovery) ----------------------------------------------

    def discover(self, record: Discovered, keep: int) -> Discovered:
        """Record a machine's report (a new row, or its row merged with the report: :func:`~bootserver.
        discovery.merged`), then keep only the ``keep`` records reported last; one transaction. Returns
        the machine's record as written. Raises ``sqlite3.Error``."""
        with self._lock:
            db = self._db()
            self._begin_immediate(db)
            try:
                row = db.execute(f"SELECT {COLUMNS} FROM discovered WHERE mac = ?", (record.mac,)).fetchone()
                now = merged(None if row is None else record_of(row), record)
                db.execute(DISCOVER_SQL, row_params(now))
                db.execute(TRIM_DISCOVERED_SQL, {"keep": keep})
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self._wrote(1)
        return now

    def discovered(self) -> list[Discovered]:
        """Every discovered machine, last reported first. Raises ``sqlite3.Error``."""
        with self._lock:
            rows = self._db().execute(DISCOVERED_SQL).fetchall()
        return [record_of(r) for r in rows]

    def forget_discovered(self, macs: Sequence[str]) -> int:
        """Remove the records of ``macs``; returns how many there were. Raises ``sqlite3.Error``."""
        with self._lock:
            db = self._db()
            self._begin_immediate(db)
            try:
                n = sum(db.execute("DELETE FROM discovered WHERE mac = ?", (m,)).rowcount for m in macs)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self._wrote(max(n, 1))
        return n

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
            self._wrote(max(len(rows), 1))
            if done:
                generation[:] = os.urandom(GENERATION_BYTES)
        return done
