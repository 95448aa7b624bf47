"""The state store a config selects (``state_store``: PostgreSQL, else sqlite in ``state_dir``), the
check ``serve`` makes before it listens, and ``bootserver db migrate``.

The interface is :class:`bootserver.state.StateStore`; this module sits beside the two backends that
implement it, so the package's interface never imports a backend.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..timeline import Timeline
from . import StateStore
from .sqlite import SqliteStore

if TYPE_CHECKING:
    from ..config import Config


def prepare_store(config: Config) -> None:
    """What ``serve`` checks before it listens (and before ``--workers`` forks): the sqlite timeline's
    integrity (:meth:`~bootserver.timeline.Timeline.check`), or that the database answers, its schema
    is migrated and the signing keys exist. Raises ``TimelineDamagedError`` (exit 2) or
    :class:`~bootserver.state.StateStoreError` (exit 1), one line each."""
    if config.state_store is None:
        timeline = Timeline(config.state_dir, config.timeline.keep_events)
        try:
            timeline.check()
        finally:
            timeline.close()
        return

    async def check() -> None:
        store = open_store(config)
        try:
            await store.start()
        finally:
            await store.close()

    asyncio.run(check())


async def migrate_store(config: Config) -> tuple[str, int, int]:
    """``bootserver db migrate``: bring the store's schema to this version; returns ``(store name,
    version before, version after)``. Raises as :func:`prepare_store`."""
    store = open_store(config)
    try:
        before, after = await store.migrate()
    finally:
        await store.close()
    return store.name, before, after


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
