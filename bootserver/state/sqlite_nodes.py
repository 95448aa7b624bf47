"""The store's nodes on a sqlite connection (:mod:`bootserver.state.nodestore`'s SQL and plan): the
work of one transaction each, which :class:`~bootserver.state.sqlite.SqliteStore` runs through
:meth:`~bootserver.state.sqlite_timeline.Timeline.transaction` (writes: ``BEGIN IMMEDIATE``, so one
writer at a time on the machine) and :meth:`~bootserver.state.sqlite_timeline.Timeline.snapshot` (reads).
Blocking; raises ``sqlite3.Error`` and the store's typed errors."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from ..errors import ChangesExpiredError, NodeConflictError, PreconditionFailedError, UnknownStoreNodeError
from .nodestore import (
    BUMP_SQL,
    CHANGE_SQL,
    CHANGES_SQL,
    CLAIM_SQL,
    DELETE_SQL,
    GET_SQL,
    HOLDER_SQL,
    INSERT_SQL,
    KEEP_CHANGES,
    LIST_SQL,
    STATE_SQL,
    TRIM_SQL,
    TRIMMED_SQL,
    UNCLAIM_SQL,
    UPDATE_SQL,
    Applied,
    Change,
    Inventory,
    NodeChange,
    NodeWrite,
    change_of,
    numbered,
    plan_apply,
    stored_of,
)


def inventory(db: sqlite3.Connection) -> Inventory:
    """Every store node and the revision (call inside one read transaction)."""
    revision = db.execute(STATE_SQL).fetchone()[0]
    nodes = {row[0]: stored_of(row) for row in db.execute(LIST_SQL)}
    return Inventory(MappingProxyType(nodes), int(revision))


def _log(db: sqlite3.Connection, changes: Sequence[tuple[str, Change, int]], at: float) -> list[NodeChange]:
    """Number ``changes`` (raise the revision), write them to the change log, drop what it no longer keeps."""
    if not changes:
        return []
    (revision,) = db.execute(BUMP_SQL, (len(changes),)).fetchone()
    made = numbered(changes, int(revision), at)
    db.executemany(CHANGE_SQL, [(c.revision, c.node, c.change, c.generation, c.at) for c in made])
    floor = int(revision) - KEEP_CHANGES
    if floor > 0 and db.execute(TRIM_SQL, (floor,)).rowcount:
        db.execute(TRIMMED_SQL, (floor, floor))
    return made


def apply(db: sqlite3.Connection, writes: Sequence[NodeWrite], at: float) -> list[Applied]:
    """:meth:`~bootserver.state.nodestore.NodeStore.apply_nodes` inside the caller's write transaction."""
    rows = {}
    for w in writes:
        row = db.execute(GET_SQL, (w.name,)).fetchone()
        if row is not None:
            rows[w.name] = (row[1], int(row[2]))
    plan = plan_apply(writes, rows, at)
    db.executemany(INSERT_SQL, plan.inserts)
    db.executemany(UPDATE_SQL, plan.updates)
    db.executemany(UNCLAIM_SQL, [(n,) for n in plan.reclaimed])
    for kind, value, node in plan.claims:
        if not db.execute(CLAIM_SQL, (kind, value, node)).rowcount:
            (holder,) = db.execute(HOLDER_SQL, (kind, value)).fetchone()
            raise NodeConflictError(node, kind, value, holder, "store")
    _log(db, plan.changes, at)
    return plan.applied


def delete(db: sqlite3.Connection, names: Sequence[str], expect: Mapping[str, int], at: float) -> list[NodeChange]:
    """:meth:`~bootserver.state.nodestore.NodeStore.delete_nodes` inside the caller's write transaction."""
    changes: list[tuple[str, Change, int]] = []
    for name in dict.fromkeys(names):
        row = db.execute(GET_SQL, (name,)).fetchone()
        if row is None:
            raise UnknownStoreNodeError(name)
        if name in expect and int(row[2]) != expect[name]:
            raise PreconditionFailedError(name, expect[name], int(row[2]))
        db.execute(DELETE_SQL, (name,))
        db.execute(UNCLAIM_SQL, (name,))
        changes.append((name, "deleted", int(row[2])))
    return _log(db, changes, at)


def changes(db: sqlite3.Connection, since: int) -> tuple[list[NodeChange], int]:
    """:meth:`~bootserver.state.nodestore.NodeStore.node_changes` (call inside one read transaction)."""
    revision, trimmed = db.execute(STATE_SQL).fetchone()
    if since < trimmed:
        raise ChangesExpiredError(since, int(trimmed) + 1)
    return [change_of(row) for row in db.execute(CHANGES_SQL, (since,))], int(revision)
