"""The default state store: the sqlite node timeline (:class:`~bootserver.state.sqlite_timeline.Timeline`,
WAL) and the keys file, both in ``state_dir``. Zero set-up; shared by the processes of one machine only.

Reads (:meth:`SqliteStore.current`, :meth:`SqliteStore.attribute`: one indexed row) run on the event
loop over the timeline's read connection; :meth:`SqliteStore.current` keeps what it read while the
timeline's generation (:meth:`~bootserver.state.sqlite_timeline.Timeline.generation`) is unchanged.
Writes go through :class:`GroupCommit`'s writer thread; listings run in a worker thread. Every
``sqlite3.Error`` stays here: it becomes :class:`~bootserver.errors.UnavailableError` (HTTP 503) while
serving, :class:`~bootserver.state.StateStoreError` at start and in ``db migrate``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..discovery import Discovered
from ..errors import UnavailableError
from ..signing import Keyring
from ..timeline import Current, Event, NodeState, Record
from . import PUBLIC_UNAVAILABLE, RepeatKey, StateStore, StateStoreError, sqlite_nodes
from .apistore import (
    AUDIT_READ_SQL,
    AUDIT_SQL,
    CREATE_TOKEN_SQL,
    REVOKE_TOKEN_SQL,
    TOKENS_SQL,
    TOUCH_TOKEN_SQL,
    AuditEntry,
    TokenExistsError,
    TokenRecord,
    audit_of,
    audit_params,
    token_of,
)
from .batches import Batches
from .nodestore import (
    GET_SQL,
    REVISION_SQL,
    Applied,
    Inventory,
    NodeChange,
    NodeWrite,
    StoredNode,
    stored_of,
)
from .sqlite_timeline import SCHEMA_VERSION, Timeline, connect

log = logging.getLogger("bootserver.timeline")


class GroupCommit(Batches):
    """Asynchronous writes to a sqlite :class:`Timeline` with group commit (:class:`Batches`) on one
    writer thread of its own, so timeline writes never wait behind other blocking work.

    Commits do not checkpoint the WAL: the timeline does it on a thread of its own after every
    :attr:`Timeline.CHECKPOINT_EVERY` rows written, by this writer or any other (discovery reports,
    device records), and at once when the WAL grows large
    (:meth:`~bootserver.state.sqlite_timeline.Timeline._wrote`), so the ``-wal`` file stays below
    :attr:`Timeline.WAL_BOUND` at any write rate. :meth:`record` raises ``sqlite3.Error`` or ``OSError``.
    """

    def __init__(self, timeline: Timeline) -> None:
        super().__init__(self._in_thread)
        self.timeline = timeline
        timeline.auto_checkpoint = False
        self._executor: ThreadPoolExecutor | None = None

    async def _in_thread(self, records: list[Record]) -> list[str]:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="timeline-writer")
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.timeline.record_many,
                                                                records)

    def close(self) -> None:
        """Stop the writer thread once its current work is done (call after the last write), and wait
        for the timeline's checkpoint, if one runs."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        self._executor = None
        self.timeline.wait_checkpoint()


class Answering:
    """``with answering:`` around a read or write of the timeline while serving: an ``sqlite3.Error``
    or ``OSError`` (and the ``also`` types) raised inside becomes
    :class:`~bootserver.errors.UnavailableError` (HTTP 503, public text
    :data:`~bootserver.state.PUBLIC_UNAVAILABLE`) naming the timeline file ``path``, without the
    driver's traceback. A class rather than ``contextlib.contextmanager``: it runs on every script
    request."""

    __slots__ = ("errors", "path")

    def __init__(self, path: Path, *also: type[Exception]) -> None:
        self.path = path
        self.errors: tuple[type[Exception], ...] = (sqlite3.Error, OSError, *also)

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None, tb: object) -> None:
        if e is not None and isinstance(e, self.errors):
            raise UnavailableError(f"node timeline {self.path}: {e}", public=PUBLIC_UNAVAILABLE) from None


class SqliteStore(StateStore):
    """The sqlite timeline ``<state_dir>/timeline.sqlite3`` and ``<state_dir>/keys.json``.

    Opened lazily (as before ``state_store`` existed): :meth:`start` does nothing, so a server whose
    ``state_dir`` is unusable still serves artifacts and answers 503 to scripts and stubs.
    """

    backend = "sqlite"

    def __init__(self, state_dir: Path, keep_events: int) -> None:
        self.state_dir = Path(state_dir)
        self.keep_events = keep_events
        #: The sqlite timeline (blocking API, for the CLI and tests on this machine).
        self.timeline = Timeline(state_dir, keep_events)
        self.writes = GroupCommit(self.timeline)
        self.name = str(self.timeline.path)
        self._keyring: Keyring | None = None
        #: The nodes as read (:meth:`current`) under the timeline generation ``_seen``.
        self._currents: dict[str, Current] = {}
        self._seen = b""
        #: What turns the timeline's errors into a 503 while serving (one place: :class:`Answering`).
        self._answering = Answering(self.timeline.path)
        self._answering_devices = Answering(self.timeline.path, ValueError)  # a device record not JSON


    async def start(self) -> None:
        """Nothing: the timeline opens on first use, the keys file on first signature."""

    async def prepare(self) -> None:
        """Open the timeline (creating or migrating it) and check its integrity
        (:meth:`~bootserver.state.sqlite_timeline.Timeline.check`), then load or create the keys file.
        Raises ``TimelineDamagedError`` (exit 2), :class:`StateStoreError`, ``KeyFileError`` (exit 2) or
        ``KeyStoreError``, one line naming the file."""
        await asyncio.to_thread(self.timeline.check)
        await asyncio.to_thread(self.keyring)

    async def migrate(self) -> tuple[int, int]:
        """Open (create or migrate) the timeline and check it; ``(version before, after)``. Raises as
        :meth:`prepare`."""
        def version() -> int:
            if not self.timeline.path.exists():
                return 0
            with contextlib.closing(connect(self.timeline.path)) as db:
                before: int = db.execute("PRAGMA user_version").fetchone()[0]
                if before == 0 and db.execute("SELECT 1 FROM sqlite_master WHERE name = 'events'").fetchone():
                    before = 1
                return before

        def run() -> tuple[int, int]:
            try:
                before = version()
            except sqlite3.Error as e:
                self.timeline.check()  # a damaged or unopenable file: its own one-line error
                raise StateStoreError(f"{self.timeline.path}: node timeline: {e}") from None
            self.timeline.check()
            return before, SCHEMA_VERSION

        return await asyncio.to_thread(run)

    async def close(self) -> None:
        await self.writes.drained(closing=True)
        await asyncio.to_thread(self.writes.close)
        try:
            await asyncio.to_thread(self.timeline.close)
        except sqlite3.Error as e:
            raise StateStoreError(f"{self.timeline.path}: node timeline: {e}") from None

    async def stage(self, node: str) -> str:
        return (await self.current(node)).stage

    async def attribute(self, ip: str, now: float | None = None) -> str | None:
        with self._answering:
            return self.timeline.attribute(ip, now=now)

    async def current(self, node: str) -> Current:
        """The node as last read, while the timeline's generation is unchanged (no process on this
        machine changed a stage or a newest row since: :meth:`Timeline.generation`), else read now."""
        with self._answering:
            generation = self.timeline.generation()
            if generation != self._seen:
                self._currents.clear()
                self._seen = generation
            hit = self._currents.get(node)
            if hit is None:
                hit = self._currents[node] = self.timeline.current(node)
            return hit

    async def record(self, record: Record, current: Current | None = None) -> str:
        with self._answering:
            return await self._record(self.writes, record, current)

    def count_again(self, key: RepeatKey, at: float) -> bool:
        return self.writes.count_again(key[1], key, at)

    async def flush(self) -> None:
        await self.writes.drained()

    async def events(self, node: str, limit: int | None = None) -> list[Event]:
        with self._answering:
            return await asyncio.to_thread(self.timeline.events, node, limit=limit)

    async def boot_started(self, node: str) -> float | None:
        """On the loop, over the read connection: the rows of one boot, not a worker thread's hop and
        the whole history (0.28 ms of a cold boot's CPU in a 1,000-machine storm, issue 40)."""
        with self._answering:
            return self.timeline.boot_started(node)

    async def node(self, node: str) -> NodeState:
        with self._answering:
            return await asyncio.to_thread(self.timeline.node, node)

    async def nodes(self, names: Iterable[str] = ()) -> list[NodeState]:
        with self._answering:
            return await asyncio.to_thread(self.timeline.nodes, list(names))

    async def devices(self, names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        wanted = None if names is None else list(names)
        with self._answering_devices:
            return await asyncio.to_thread(self.timeline.devices, wanted)

    async def write_devices(self, records: Mapping[str, Mapping[str, Any] | None], *,
                            replace: bool = True) -> list[str]:
        with self._answering:
            return await asyncio.to_thread(self.timeline.write_devices, dict(records), replace=replace)

    async def discover(self, record: Discovered, keep: int) -> Discovered:
        with self._answering:
            return await asyncio.to_thread(self.timeline.discover, record, keep)

    async def discovered(self) -> list[Discovered]:
        with self._answering:
            return await asyncio.to_thread(self.timeline.discovered)

    async def forget_discovered(self, macs: Iterable[str]) -> int:
        with self._answering:
            return await asyncio.to_thread(self.timeline.forget_discovered, list(macs))

    # -- the fleet API's tokens and audit trail (bootserver.state.apistore) -------------------------

    async def create_token(self, record: TokenRecord) -> None:
        row = (record.name, record.hash, " ".join(record.scopes), record.created, record.expires)
        with self._answering:
            made = await asyncio.to_thread(self.timeline.transaction,
                                           lambda db: db.execute(CREATE_TOKEN_SQL, row).rowcount)
        if not made:
            raise TokenExistsError(f"token {record.name}: the name is taken (tokens list; tokens revoke {record.name})")

    async def tokens(self) -> list[TokenRecord]:
        with self._answering:
            rows = await asyncio.to_thread(self.timeline.snapshot, lambda db: db.execute(TOKENS_SQL).fetchall())
        return [token_of(r) for r in rows]

    async def revoke_token(self, name: str) -> bool:
        with self._answering:
            return bool(await asyncio.to_thread(self.timeline.transaction,
                                                lambda db: db.execute(REVOKE_TOKEN_SQL, (name,)).rowcount))

    async def touch_tokens(self, used: Mapping[str, float]) -> None:
        rows = [(at, name, at) for name, at in used.items()]
        if rows:
            with self._answering:
                await asyncio.to_thread(self.timeline.transaction,
                                        lambda db: db.executemany(TOUCH_TOKEN_SQL, rows), len(rows))

    async def write_audit(self, entries: Sequence[AuditEntry]) -> None:
        rows = [e.row() for e in entries]
        if rows:
            with self._answering:
                await asyncio.to_thread(self.timeline.transaction, lambda db: db.executemany(AUDIT_SQL, rows),
                                        len(rows))

    async def audit(self, node: str | None = None, token: str | None = None, limit: int = 1000) -> list[AuditEntry]:
        params = audit_params(node, token, limit)
        with self._answering:
            rows = await asyncio.to_thread(self.timeline.snapshot,
                                           lambda db: db.execute(AUDIT_READ_SQL, params).fetchall())
        return [audit_of(r) for r in rows]

    # -- the store's nodes (bootserver.state.nodestore) ------------------------------------------------

    async def inventory(self) -> Inventory:
        with self._answering:
            return await asyncio.to_thread(self.timeline.snapshot, sqlite_nodes.inventory)

    async def stored_node(self, name: str) -> StoredNode | None:
        with self._answering:
            row = await asyncio.to_thread(self.timeline.snapshot,
                                          lambda db: db.execute(GET_SQL, (name,)).fetchone())
        return None if row is None else stored_of(row)

    async def apply_nodes(self, writes: Sequence[NodeWrite], at: float | None = None) -> list[Applied]:
        stamp = time.time() if at is None else at
        with self._answering:
            return await asyncio.to_thread(self.timeline.transaction,
                                           lambda db: sqlite_nodes.apply(db, writes, stamp), len(writes))

    async def delete_nodes(self, names: Sequence[str], expect: Mapping[str, int] | None = None,
                           at: float | None = None) -> list[NodeChange]:
        stamp = time.time() if at is None else at
        with self._answering:
            return await asyncio.to_thread(self.timeline.transaction,
                                           lambda db: sqlite_nodes.delete(db, names, expect or {}, stamp),
                                           len(names))

    async def node_changes(self, since: int) -> tuple[list[NodeChange], int]:
        with self._answering:
            return await asyncio.to_thread(self.timeline.snapshot, lambda db: sqlite_nodes.changes(db, since))

    async def inventory_revision(self) -> int:
        """One row on the read connection, on the loop (no thread hop): what every worker polls."""
        with self._answering:
            return int(self.timeline.read_one(REVISION_SQL))

    def keyring(self) -> Keyring:
        """The keys file (created on first use; ``refreshed()`` re-reads it when another process
        rotated it). Raises ``KeyFileError``/``KeyStoreError``."""
        if self._keyring is None:
            self._keyring = Keyring.load_or_create(self.state_dir)
        return self._keyring

    async def rotate_keys(self, grace: int) -> Keyring:
        self._keyring = await asyncio.to_thread(lambda: Keyring.load_or_create(self.state_dir).rotate(grace))
        return self._keyring

    async def ready(self) -> str | None:
        try:
            await asyncio.to_thread(self.timeline.stage, "")
        except (sqlite3.Error, OSError) as e:
            return f"node timeline {self.timeline.path}: {e}"
        return None
