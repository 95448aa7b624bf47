"""The state store a config selects (``state_store``: PostgreSQL, else sqlite in ``state_dir``), the
check ``serve`` makes before it listens, and ``bootserver db migrate``.

The interface is :class:`bootserver.state.StateStore`; this module sits beside the two backends that
implement it, so the package's interface never imports a backend.

Both ``serve`` (before it listens) and ``db migrate`` move the device records of older versions,
files ``state_dir/nodes/<node>.json``, into the store (:func:`move_device_files`): like the schema, an
upgrade must not leave ``network: provider`` nodes answering 503 until someone remembers a command,
and the move is idempotent and never replaces a record the store already holds, so replicas starting
at once are safe.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BootserverError, InputError
from . import StateStore
from .sqlite import SqliteStore

if TYPE_CHECKING:
    from ..config import Config

log = logging.getLogger("bootserver.state")

#: What a device record file becomes once its record is in the store (kept, owner-only, for a look
#: back or a downgrade; nothing reads it).
MOVED_SUFFIX = ".migrated"


def read_device_files(state_dir: Path) -> dict[str, tuple[Path, dict[str, Any]]]:
    """The device records of ``<state_dir>/nodes/<node>.json`` (the files of bootserver before device
    records moved into the state store: ``{"node": ..., "device": {...}}``), ``{node: (file, record)}``
    by node name; a file without a ``device`` member holds nothing to move and is left out.

    Reads every file before returning, so a caller moves nothing when one is bad. Raises
    :class:`~bootserver.errors.InputError` (exit 2) naming the file when one is not a JSON object, its
    ``device`` is not one, or its ``node`` is not its file name; ``BootserverError`` (exit 1) when one
    cannot be read.
    """
    folder = Path(state_dir) / "nodes"
    if not folder.is_dir():
        return {}
    found: dict[str, tuple[Path, dict[str, Any]]] = {}
    for path in sorted(folder.glob("*.json")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise BootserverError(f"{path}: cannot read the device record: {getattr(e, 'strerror', None) or e}"
                                  ) from None
        try:
            data = json.loads(text)
        except ValueError as e:
            raise InputError(f"{path}: not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise InputError(f"{path}: not a JSON object")
        node = path.name[: -len(".json")]
        if data.get("node", node) != node:
            raise InputError(f"{path}: node: {data['node']!r} is not the node the file is named after ({node!r})")
        device = data.get("device")
        if device is None:
            continue
        if not isinstance(device, dict):
            raise InputError(f"{path}: device: not a JSON object")
        found[node] = (path, device)
    return found


async def move_device_files(store: StateStore, state_dir: Path) -> list[str]:
    """Move the device records of ``<state_dir>/nodes/*.json`` (:func:`read_device_files`) into
    ``store``, once: one transaction adds the records of nodes the store has none for (a record already
    there, e.g. written since by ``provision`` through another replica, is newer and stays), then each
    file is renamed ``<node>.json.migrated`` (:data:`MOVED_SUFFIX`), so a second run finds nothing.
    Returns one line per file (``[]``: nothing to move).

    Raises as :func:`read_device_files` before anything is moved; ``UnavailableError`` when the store
    cannot be written (nothing moved); ``BootserverError`` (exit 1) when a file cannot be renamed after
    its record was added (a second run renames it and keeps the store's record).
    """
    found = read_device_files(state_dir)
    if not found:
        return []
    added = set(await store.add_devices({node: device for node, (_, device) in found.items()}))
    lines = []
    for node, (path, _) in found.items():
        kept = path.with_name(path.name + MOVED_SUFFIX)
        try:
            path.rename(kept)
        except OSError as e:
            raise BootserverError(f"{path}: its device record is in {store.name}, but the file cannot be "
                                  f"renamed to {kept.name}: {e.strerror or e}") from None
        if node in added:
            lines.append(f"{path}: device record of node {node} moved into {store.name} (file kept as {kept.name})")
        else:
            lines.append(f"{path}: node {node} already has a device record in {store.name}, kept that one "
                         f"(file kept as {kept.name})")
    return lines


def prepare_store(config: Config) -> None:
    """What ``serve`` does before it listens (and before ``--workers`` forks): the store's one-time
    set-up (:meth:`~bootserver.state.StateStore.prepare`: schema, integrity or connection, signing
    keys); then the device record files of an older version are moved into the store
    (:func:`move_device_files`, a log line each). Raises as :meth:`~bootserver.state.StateStore.prepare`
    (``TimelineDamagedError``: exit 2; :class:`~bootserver.state.StateStoreError`: exit 1; one line
    each) or as :func:`move_device_files`."""
    async def check() -> None:
        store = open_store(config)
        try:
            await store.prepare()
            for line in await move_device_files(store, config.state_dir):
                log.info("%s", line)
        finally:
            await store.close()

    asyncio.run(check())


async def migrate_store(config: Config) -> tuple[str, int, int, list[str]]:
    """``bootserver db migrate``: bring the store's schema to this version, then move the device record
    files of an older version into it (:func:`move_device_files`); returns ``(store name, version
    before, version after, a line per file moved)``. Raises as :func:`prepare_store`."""
    store = open_store(config)
    try:
        before, after = await store.migrate()
        moved = await move_device_files(store, config.state_dir)
    finally:
        await store.close()
    return store.name, before, after, moved


def open_store(config: Config) -> StateStore:
    """The state store ``config`` selects: PostgreSQL for ``state_store``, else sqlite in ``state_dir``.
    Nothing is opened until :meth:`~bootserver.state.StateStore.start`."""
    if config.state_store is not None:
        # on purpose here: psycopg loads only for a config that names a database
        from .postgresql import PostgresStore

        pf = config.state_store.password_file
        return PostgresStore(config.state_store.url, keep_events=config.timeline.keep_events,
                             password_file=None if pf is None else config.resolve_path(pf), source=config.source)
    return SqliteStore(config.state_dir, keep_events=config.timeline.keep_events)
