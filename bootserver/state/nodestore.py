"""The state store's nodes: the inventory every replica shares (issue 48; docs/design.md, "Store nodes").

Besides the config's ``nodes:`` and its ``include:`` files (source ``file:PATH``, read-only to all but
the file), the state store holds nodes of source ``store``: each a mapping of exactly the config's node
schema (``nodes.<name>`` of :class:`bootserver.config.Document`), stored as canonical JSON
(:func:`node_json`), with a ``generation`` that every write of that node bumps (1 when created).
The store as a whole has a ``revision``: a counter that every committed write raises by the number of
nodes it changed, one entry per change in a bounded change log (:data:`KEEP_CHANGES` entries:
revision, node, ``created``/``updated``/``deleted``, the node's generation after it, time). Polling
:meth:`NodeStore.inventory_revision` is one indexed row; :meth:`NodeStore.node_changes` resumes a
watch from a revision. Revisions are given out under one row lock in commit order, so a reader that
saw revision R never later finds a change numbered R or below that it missed.

Uniqueness of what identifies a machine across store nodes (MACs, the SMBIOS UUID, the hostname,
static addresses; the claim kinds ``mac``: ``aa:bb:cc:dd:ee:ff``, ``uuid`` and ``hostname``: lower
case, ``address``: ``ipaddress`` text) is a primary key of the claims table ``(kind, value) ->
node``, not a read before the write: of two writers racing for one MAC one commits, the other's insert
waits for it and then finds the key taken, and it is refused with
:class:`~bootserver.errors.NodeConflictError` naming the winner. Two writers racing to create the
same *name* are decided by the nodes table's primary key the same way: with ``create_only`` the loser
gets :class:`~bootserver.errors.PreconditionFailedError`; a plain apply is create-or-update, so the
second one updates what the first created (its outcome says ``updated``).

The store checks none of the config's rules: what a node means (its profile, network, provider
settings), the file nodes' names and claims, are the config layer's
(:func:`bootserver.config.loader.with_store_nodes`, :mod:`bootserver.node_writes`), which computes each
write's claims (:func:`bootserver.config.loader.node_claims`).

Both backends implement :class:`NodeStore` (:class:`~bootserver.state.sqlite.SqliteStore`,
:class:`~bootserver.state.postgresql.PostgresStore`); the SQL both run is here.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from ..errors import PreconditionFailedError

#: Change-log entries kept (the oldest go first); a watch further behind lists the nodes again.
KEEP_CHANGES = 100_000

Outcome = Literal["created", "updated", "unchanged"]
Change = Literal["created", "updated", "deleted"]


def node_json(spec: Mapping[str, Any]) -> str:
    """The stored form of a node's mapping: JSON with sorted keys and no spaces, so that equal mappings
    have equal text (what makes an apply ``unchanged``). Raises ``TypeError``/``ValueError`` for a value
    JSON cannot hold."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@dataclass(frozen=True)
class StoredNode:
    """One store node: ``name``, ``spec`` (its mapping in the config's node schema, as written),
    ``generation`` (1 when created, +1 per write that changed it) and ``updated`` (unix seconds)."""

    name: str
    spec: Mapping[str, Any]
    generation: int
    updated: float


@dataclass(frozen=True)
class Inventory:
    """Every store node (``nodes``: name -> :class:`StoredNode`, by name) as of store ``revision``
    (read in one snapshot)."""

    nodes: Mapping[str, StoredNode] = field(default_factory=lambda: MappingProxyType({}))
    revision: int = 0


@dataclass(frozen=True)
class NodeWrite:
    """One node of an apply: ``name``, ``spec`` (its mapping, checked by the config layer first),
    ``claims`` (the ``(kind, value)`` pairs it holds: ``mac``, ``uuid``, ``hostname``, ``address``), and its
    preconditions:
    ``expect_generation`` (HTTP ``If-Match``: the write holds only while the store node is at that
    generation) or ``create_only`` (``If-None-Match: *``: only when no store node has that name)."""

    name: str
    spec: Mapping[str, Any]
    claims: tuple[tuple[str, str], ...] = ()
    expect_generation: int | None = None
    create_only: bool = False

    def check(self, generation: int | None) -> None:
        """Raise :class:`~bootserver.errors.PreconditionFailedError` unless the preconditions hold for
        a store node at ``generation`` (``None``: none of that name)."""
        if self.create_only and generation is not None:
            raise PreconditionFailedError(self.name, None, generation)
        if self.expect_generation is not None and generation != self.expect_generation:
            raise PreconditionFailedError(self.name, self.expect_generation, generation)


@dataclass(frozen=True)
class Applied:
    """What an apply did to one node: ``outcome`` (``created``, ``updated``, ``unchanged``) and its
    ``generation`` after it."""

    name: str
    outcome: Outcome
    generation: int


@dataclass(frozen=True)
class NodeChange:
    """One entry of the change log: store ``revision`` (the store's revision once it was committed),
    ``node``, ``change`` (``created``, ``updated``, ``deleted``), the node's ``generation`` after it (its
    last one for ``deleted``), ``at`` (unix seconds)."""

    revision: int
    node: str
    change: Change
    generation: int
    at: float


class NodeStore(ABC):
    """The node interface of the state store (see the module docstring); both backends implement it.
    Every method is a coroutine and raises :class:`~bootserver.errors.UnavailableError` when the store
    cannot answer (nothing written)."""

    @abstractmethod
    async def inventory(self) -> Inventory:
        """Every store node with its generation, and the store's revision, in one snapshot."""

    @abstractmethod
    async def stored_node(self, name: str) -> StoredNode | None:
        """Store node ``name``, or ``None``."""

    @abstractmethod
    async def apply_nodes(self, writes: Sequence[NodeWrite], at: float | None = None) -> list[Applied]:
        """Create or update every node of ``writes`` in one transaction, all or nothing, at unix time
        ``at`` (default now); one :class:`Applied` per write, in order. A node whose stored JSON
        (:func:`node_json`) is already ``spec``'s is ``unchanged`` (no generation bump, no change-log
        entry). Raises :class:`~bootserver.errors.PreconditionFailedError` (a write's precondition),
        :class:`~bootserver.errors.NodeConflictError` (a claim another store node holds, naming it;
        also the loser of a race) and nothing is written."""

    @abstractmethod
    async def delete_nodes(self, names: Sequence[str], expect: Mapping[str, int] | None = None,
                           at: float | None = None) -> list[NodeChange]:
        """Delete the store nodes ``names`` and their claims in one transaction, all or nothing; with
        ``expect`` (name -> generation, HTTP ``If-Match``) only while each is at that generation.
        Returns the change-log entries made. Raises :class:`~bootserver.errors.UnknownStoreNodeError`,
        :class:`~bootserver.errors.PreconditionFailedError`; nothing deleted then."""

    @abstractmethod
    async def node_changes(self, since: int) -> tuple[list[NodeChange], int]:
        """The change-log entries after revision ``since``, oldest first, and the store's revision.
        Raises :class:`~bootserver.errors.ChangesExpiredError` when entries after ``since`` were
        dropped already (``since`` older than the log keeps: list the nodes again)."""

    @abstractmethod
    async def inventory_revision(self) -> int:
        """The store's revision (0 before the first write): one indexed row, cheap to poll."""


# -- the SQL both backends run (``?`` placeholders; the PostgreSQL store converts them) ---------------

#: The tables (sqlite; the PostgreSQL migration says the same in its types): the nodes, the claims
#: (primary key: what makes a MAC, UUID, hostname or address one node's), the change log, and the one
#: row holding the store's revision and the newest revision the log dropped.
SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS inventory_nodes (
    name       TEXT PRIMARY KEY,
    spec       TEXT NOT NULL,           -- JSON object: the node's mapping in the config's node schema
    generation INTEGER NOT NULL,        -- 1 when created, +1 per write that changed it
    updated    REAL NOT NULL            -- unix seconds
);
CREATE TABLE IF NOT EXISTS inventory_claims (
    kind  TEXT NOT NULL,                -- mac, uuid, hostname, address
    value TEXT NOT NULL,
    node  TEXT NOT NULL,
    PRIMARY KEY (kind, value)
);
CREATE INDEX IF NOT EXISTS inventory_claims_node ON inventory_claims (node);
CREATE TABLE IF NOT EXISTS inventory_changes (
    revision   INTEGER PRIMARY KEY,
    node       TEXT NOT NULL,
    change     TEXT NOT NULL,           -- created, updated, deleted
    generation INTEGER NOT NULL,
    at         REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS inventory_state (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    revision INTEGER NOT NULL,          -- the store's revision
    trimmed  INTEGER NOT NULL           -- the newest revision the change log dropped
);
INSERT INTO inventory_state (id, revision, trimmed) VALUES (1, 0, 0) ON CONFLICT (id) DO NOTHING
"""

REVISION_SQL = "SELECT revision FROM inventory_state WHERE id = 1"
STATE_SQL = "SELECT revision, trimmed FROM inventory_state WHERE id = 1"
LIST_SQL = "SELECT name, spec, generation, updated FROM inventory_nodes ORDER BY name"
GET_SQL = "SELECT name, spec, generation, updated FROM inventory_nodes WHERE name = ?"
INSERT_SQL = "INSERT INTO inventory_nodes (name, spec, generation, updated) VALUES (?, ?, ?, ?)"
UPDATE_SQL = "UPDATE inventory_nodes SET spec = ?, generation = ?, updated = ? WHERE name = ?"
DELETE_SQL = "DELETE FROM inventory_nodes WHERE name = ?"
UNCLAIM_SQL = "DELETE FROM inventory_claims WHERE node = ?"
CLAIM_SQL = ("INSERT INTO inventory_claims (kind, value, node) VALUES (?, ?, ?) "
             "ON CONFLICT (kind, value) DO NOTHING")
HOLDER_SQL = "SELECT node FROM inventory_claims WHERE kind = ? AND value = ?"
CHANGE_SQL = "INSERT INTO inventory_changes (revision, node, change, generation, at) VALUES (?, ?, ?, ?, ?)"
CHANGES_SQL = ("SELECT revision, node, change, generation, at FROM inventory_changes WHERE revision > ? "
               "ORDER BY revision")
#: Raise the revision by ``?`` (under the row's lock: revisions in commit order).
BUMP_SQL = "UPDATE inventory_state SET revision = revision + ? WHERE id = 1 RETURNING revision"
#: Drop the log entries at or below ``?`` and remember it.
TRIM_SQL = "DELETE FROM inventory_changes WHERE revision <= ?"
TRIMMED_SQL = "UPDATE inventory_state SET trimmed = ? WHERE id = 1 AND trimmed < ?"


def stored_of(row: Sequence[Any]) -> StoredNode:
    """A :class:`StoredNode` of a ``(name, spec JSON, generation, updated)`` row."""
    return StoredNode(row[0], MappingProxyType(json.loads(row[1])), int(row[2]), float(row[3]))


def change_of(row: Sequence[Any]) -> NodeChange:
    """A :class:`NodeChange` of a ``(revision, node, change, generation, at)`` row."""
    return NodeChange(int(row[0]), row[1], row[2], int(row[3]), float(row[4]))


@dataclass
class ApplyPlan:
    """What an apply writes, decided from the nodes' rows as read (and locked) in its transaction:
    ``applied`` (one per write, in order), the rows to insert and update, the nodes whose claims are
    replaced with ``claims`` (sorted, so two writers take them in one order and never deadlock), and
    the change-log entries to number (``(node, change, generation)``)."""

    applied: list[Applied]
    inserts: list[tuple[str, str, int, float]]
    updates: list[tuple[str, int, float, str]]
    reclaimed: list[str]
    claims: list[tuple[str, str, str]]
    changes: list[tuple[str, Change, int]]


def plan_apply(writes: Sequence[NodeWrite], rows: Mapping[str, tuple[str, int]], at: float) -> ApplyPlan:
    """The :class:`ApplyPlan` of ``writes`` against the stored ``rows`` (name -> ``(spec JSON,
    generation)``). Raises :class:`~bootserver.errors.PreconditionFailedError`, ``TypeError`` or
    ``ValueError`` (a spec JSON cannot hold)."""
    plan = ApplyPlan([], [], [], [], [], [])
    for w in writes:
        row = rows.get(w.name)
        w.check(None if row is None else row[1])
        text = node_json(w.spec)
        if row is None:
            plan.inserts.append((w.name, text, 1, at))
            plan.applied.append(Applied(w.name, "created", 1))
            plan.changes.append((w.name, "created", 1))
        elif row[0] == text:
            plan.applied.append(Applied(w.name, "unchanged", row[1]))
            continue
        else:
            plan.updates.append((text, row[1] + 1, at, w.name))
            plan.applied.append(Applied(w.name, "updated", row[1] + 1))
            plan.changes.append((w.name, "updated", row[1] + 1))
            plan.reclaimed.append(w.name)
        plan.claims += [(kind, value, w.name) for kind, value in w.claims]
    plan.claims.sort()
    return plan


def numbered(changes: Sequence[tuple[str, Change, int]], revision: int, at: float) -> list[NodeChange]:
    """The change-log entries of ``changes`` once the store's revision was raised to ``revision`` (the
    last one gets it)."""
    first = revision - len(changes) + 1
    return [NodeChange(first + i, node, change, generation, at) for i, (node, change, generation) in enumerate(changes)]
