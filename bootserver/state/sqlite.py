"""The default state store: the sqlite node timeline (:class:`~bootserver.timeline.Timeline`, WAL) and
the keys file, both in ``state_dir``. Zero set-up; shared by the processes of one machine only.

Reads (:meth:`SqliteStore.current`, :meth:`SqliteStore.attribute`: one indexed row) run on the event
loop over the timeline's read connection; :meth:`SqliteStore.current` keeps what it read while the
timeline's generation (:meth:`~bootserver.timeline.Timeline.generation`) is unchanged. Writes go
through :class:`~bootserver.timeline.GroupCommit`'s writer thread; listings run in a worker thread.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NoReturn

from ..errors import UnavailableError
from ..signing import Keyring
from ..timeline import SCHEMA_VERSION, Current, Event, GroupCommit, NodeState, Record, Timeline
from . import PUBLIC_UNAVAILABLE, StateStore


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

    def _unavailable(self, e: Exception) -> NoReturn:
        raise UnavailableError(f"node timeline {self.timeline.path}: {e}", public=PUBLIC_UNAVAILABLE) from None

    async def start(self) -> None:
        """Nothing: the timeline opens on first use, the keys file on first signature."""

    async def migrate(self) -> tuple[int, int]:
        """Open (create or migrate) the timeline and check it; ``(version before, after)``."""
        def run() -> tuple[int, int]:
            before = 0
            if self.timeline.path.exists():
                with sqlite3.connect(self.timeline.path) as db:
                    before = db.execute("PRAGMA user_version").fetchone()[0]
                    if before == 0 and db.execute("SELECT 1 FROM sqlite_master WHERE name = 'events'").fetchone():
                        before = 1
            self.timeline.check()
            return before, SCHEMA_VERSION

        return await asyncio.to_thread(run)

    async def close(self) -> None:
        await self.writes.drained(closing=True)
        await asyncio.to_thread(self.writes.close)
        await asyncio.to_thread(self.timeline.close)

    async def stage(self, node: str) -> str:
        return (await self.current(node)).stage

    async def attribute(self, ip: str, now: float | None = None) -> str | None:
        try:
            return self.timeline.attribute(ip, now=now)
        except (sqlite3.Error, OSError) as e:
            self._unavailable(e)

    async def current(self, node: str) -> Current:
        """The node as last read, while the timeline's generation is unchanged (no process on this
        machine changed a stage or a newest row since: :meth:`Timeline.generation`), else read now."""
        try:
            generation = self.timeline.generation()
            if generation != self._seen:
                self._currents.clear()
                self._seen = generation
            hit = self._currents.get(node)
            if hit is None:
                hit = self._currents[node] = self.timeline.current(node)
            return hit
        except (sqlite3.Error, OSError) as e:
            self._unavailable(e)

    async def record(self, record: Record, current: Current | None = None) -> str:
        try:
            return await self._record(self.writes, record, current)
        except (sqlite3.Error, OSError) as e:
            self._unavailable(e)

    async def flush(self) -> None:
        await self.writes.drained()

    async def events(self, node: str, limit: int | None = None) -> list[Event]:
        try:
            return await asyncio.to_thread(self.timeline.events, node, limit=limit)
        except (sqlite3.Error, OSError) as e:
            self._unavailable(e)

    async def node(self, node: str) -> NodeState:
        try:
            return await asyncio.to_thread(self.timeline.node, node)
        except (sqlite3.Error, OSError) as e:
            self._unavailable(e)

    async def nodes(self, names: Iterable[str] = ()) -> list[NodeState]:
        try:
            return await asyncio.to_thread(self.timeline.nodes, list(names))
        except (sqlite3.Error, OSError) as e:
            self._unavailable(e)

    async def devices(self, names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        wanted = None if names is None else list(names)
        try:
            return await asyncio.to_thread(self.timeline.devices, wanted)
        except (sqlite3.Error, OSError, ValueError) as e:
            self._unavailable(e)

    async def write_devices(self, records: Mapping[str, Mapping[str, Any] | None], *,
                            replace: bool = True) -> list[str]:
        try:
            return await asyncio.to_thread(self.timeline.write_devices, dict(records), replace=replace)
        except (sqlite3.Error, OSError) as e:
            self._unavailable(e)

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
