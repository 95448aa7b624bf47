"""The shared state store: one PostgreSQL database for every replica (``state_store: postgresql://...``).

Driver: psycopg 3 (async) with a psycopg_pool :class:`~psycopg_pool.AsyncConnectionPool`. What is shared,
and how fast another replica sees it:

* the node timeline (tables ``events`` and ``nodes``, the same rows and rules as the sqlite timeline:
  :func:`bootserver.timeline.plan_batch` plans the writes of both). Every script request reads the
  node's row from the database (the reads of concurrent requests in one statement: :class:`Reads`), so
  boot-once and ``nodes reinstall`` hold on every replica at once. Writes are batched (group commit: one
  transaction per batch, two round trips); a batch locks its nodes' rows in name order,
  so two replicas writing the same nodes never deadlock;
* each node's device record (table ``devices``, what its provider recorded at ``provision``): read
  with the node's row by the same statement, so a ``network: provider`` script costs no extra round
  trip, and written at once by ``provision``/``deprovision`` through any replica's config;
* the signing keys (table ``signing_keys``): loaded at start and polled every :data:`KEYS_POLL`
  seconds, so ``keys rotate`` through any replica's config reaches every replica within that time.
  While they cannot be read (a poll or any statement failed since the last read, or no read for
  :data:`KEYS_STALE` seconds) the keys in hand are ``stale``: a signature none of them verifies is a
  503 (it may come from a key rotated meanwhile), not a 403 (:meth:`bootserver.signing.Signer.check`).

The schema is versioned (table ``bootserver_schema``) and migrated at start under a transaction-level
advisory lock (:data:`MIGRATION_LOCK`), so replicas starting at once migrate once; ``bootserver db
migrate`` does the same by hand.

Losing the database: the first reads and writes fail within :data:`WAIT` seconds with
:class:`~bootserver.errors.UnavailableError` (HTTP 503 for scripts and stubs: never a guessed
boot-once); the store then remembers that the database is down (a circuit: :meth:`PostgresStore.
_opened_circuit`) and every statement, ``/readyz`` included, fails at once instead of waiting for the
pool, while one background probe connects every :data:`PROBE_EVERY` seconds. When it gets through, a
new pool replaces the old one (whose connections died with the server) and statements run again:
recovery within about a second of the database answering, not after the pool's own reconnection
backoff (20-30 s). Artifacts keep flowing meanwhile, and the signing keys in hand stay in use. A batch
that fails on a broken connection is retried once on a new one (nothing of a failed transaction was
written, so a retry cannot double an event).

The password comes from ``state_store.password_file``, else libpq's own ``PGPASSWORD``/``PGPASSFILE``
(``~/.pgpass``); a password inside the URL works but is discouraged (it ends up in the config file).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, Generic, TypeVar

import psycopg
from psycopg import conninfo
from psycopg_pool import AsyncConnectionPool

from ..discovery import COLUMNS, Discovered, merged, record_of, row_params
from ..errors import (
    ChangesExpiredError,
    NodeConflictError,
    PreconditionFailedError,
    UnavailableError,
    UnknownStoreNodeError,
)
from ..signing import KEY_BYTES, KeyEntry, Keyring
from ..timeline import (
    ATTRIBUTION_WINDOW,
    BATCH_ROWS_SQL,
    CURRENT_COLUMNS,
    CURRENT_JOINS,
    NODES_SQL,
    Current,
    Event,
    NodeState,
    Record,
    current_of,
    device_json,
    device_of,
    plan_batch,
)
from . import PUBLIC_UNAVAILABLE, RepeatKey, StateStore, StateStoreError
from .apistore import (
    AUDIT_READ_SQL,
    AUDIT_SQL,
    CREATE_TOKEN_SQL,
    POSTGRES_SCHEMA,
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
    BUMP_SQL,
    CHANGE_SQL,
    CHANGES_SQL,
    GET_SQL,
    KEEP_CHANGES,
    LIST_SQL,
    REVISION_SQL,
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
    StoredNode,
    change_of,
    numbered,
    plan_apply,
    stored_of,
)

log = logging.getLogger("bootserver.state")

#: Seconds between two reads of the signing keys (how soon a rotation reaches every replica).
KEYS_POLL = 2.0
#: Seconds a request waits for a database connection, and to connect, before it is refused (503).
WAIT = 3.0
#: Seconds after the last read of the signing keys from which they count as stale even though no read
#: failed yet (a poll hanging on a dead connection): one poll interval plus one wait.
KEYS_STALE = KEYS_POLL + WAIT
#: Connections per replica process.
POOL_MAX = 8
#: Seconds between two connection attempts of the probe while the database is down (the circuit is open).
PROBE_EVERY = 0.5
#: SQLSTATEs of a database that went away (PostgreSQL's errcodes: class 08, connection exception, and
#: 57P01-57P03, the server shutting down or starting); an error without a SQLSTATE is libpq's own, a
#: connection that could not be made or broke.
_GONE_SQLSTATES = ("57P01", "57P02", "57P03")
#: Key of the advisory lock held while migrating (``pg_advisory_xact_lock``), ASCII "bootsrv1".
MIGRATION_LOCK = 0x626F6F7473727631

#: The schema, one entry per version (version N is ``MIGRATIONS[N - 1]``); never edit a released entry.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE events (
        id      BIGSERIAL PRIMARY KEY,
        node    TEXT NOT NULL,
        at      DOUBLE PRECISION NOT NULL,       -- unix seconds, the first of a coalesced row
        event   TEXT NOT NULL,
        ip      TEXT,
        detail  TEXT,                            -- JSON object or NULL
        count   INTEGER NOT NULL DEFAULT 1,      -- coalesced repeats
        last_at DOUBLE PRECISION NOT NULL,       -- unix seconds, the last of them
        stage   TEXT                             -- the node's stage after the event
    );
    CREATE INDEX events_node ON events (node, at, id);
    CREATE INDEX events_script_ip ON events (ip, last_at) WHERE event = 'script';
    CREATE TABLE nodes (
        node       TEXT PRIMARY KEY,
        stage      TEXT NOT NULL,
        stage_at   DOUBLE PRECISION NOT NULL,
        last_event TEXT NOT NULL,
        last_at    DOUBLE PRECISION NOT NULL,
        last_id    BIGINT,
        events     INTEGER NOT NULL DEFAULT 0,
        dropped    INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE signing_keys (
        key     BYTEA PRIMARY KEY,
        created BIGINT NOT NULL,                 -- unix seconds
        retires BIGINT                           -- unix seconds; NULL: the current key
    );
    """,
    """
    CREATE TABLE devices (
        node    TEXT PRIMARY KEY,
        device  TEXT NOT NULL,                   -- JSON object: the provider's record
        updated DOUBLE PRECISION NOT NULL        -- unix seconds of the last write
    );
    """,
    """
    CREATE TABLE discovered (
        mac        TEXT PRIMARY KEY,             -- aa:bb:cc:dd:ee:ff, the MAC the machine asked with
        uuid       TEXT,                         -- SMBIOS UUID, lower-case, or NULL
        facts      TEXT NOT NULL,                -- JSON object of texts (bootserver.discovery)
        address    TEXT,                         -- where its last report came from
        first_seen DOUBLE PRECISION NOT NULL,    -- unix seconds
        last_seen  DOUBLE PRECISION NOT NULL,
        reports    INTEGER NOT NULL DEFAULT 1
    );
    CREATE INDEX discovered_last_seen ON discovered (last_seen);
    """,
    """
    -- every address that reported a MAC (bootserver.discovery.merged): {address: unix seconds}, JSON
    ALTER TABLE discovered ADD COLUMN addresses TEXT;
    """,
    POSTGRES_SCHEMA,  # the fleet API's tokens and audit trail (bootserver.state.apistore)
    # the store's nodes (bootserver.state.nodestore)
    """
    CREATE TABLE inventory_nodes (
        name       TEXT PRIMARY KEY,
        spec       TEXT NOT NULL,                -- JSON object: the node's mapping in the config's node schema
        generation BIGINT NOT NULL,              -- 1 when created, +1 per write that changed it
        updated    DOUBLE PRECISION NOT NULL     -- unix seconds
    );
    CREATE TABLE inventory_claims (
        kind  TEXT NOT NULL,                     -- mac, uuid, hostname, address
        value TEXT NOT NULL,
        node  TEXT NOT NULL,
        PRIMARY KEY (kind, value)
    );
    CREATE INDEX inventory_claims_node ON inventory_claims (node);
    CREATE TABLE inventory_changes (
        revision   BIGINT PRIMARY KEY,
        node       TEXT NOT NULL,
        change     TEXT NOT NULL,                -- created, updated, deleted
        generation BIGINT NOT NULL,
        at         DOUBLE PRECISION NOT NULL
    );
    CREATE TABLE inventory_state (
        id       INTEGER PRIMARY KEY CHECK (id = 1),
        revision BIGINT NOT NULL,                -- the store's revision
        trimmed  BIGINT NOT NULL                 -- the newest revision the change log dropped
    );
    INSERT INTO inventory_state (id, revision, trimmed) VALUES (1, 0, 0);
    """,
)

#: A machine's first report, or nothing when it has a row (then read, locked, by :data:`_DISCOVERED_ROW`).
_DISCOVER_NEW = ("INSERT INTO discovered (mac, uuid, facts, address, first_seen, last_seen, reports, addresses) "
                 "VALUES (%(mac)s, %(uuid)s, %(facts)s, %(address)s, %(first_seen)s, %(last_seen)s, %(reports)s, "
                 "%(addresses)s) ON CONFLICT (mac) DO NOTHING")
_DISCOVERED_ROW = f"SELECT {COLUMNS} FROM discovered WHERE mac = %(mac)s FOR UPDATE"
#: The row merged with a later report (:func:`~bootserver.discovery.merged`).
_DISCOVER_MERGED = ("UPDATE discovered SET uuid = %(uuid)s, facts = %(facts)s, address = %(address)s, "
                    "last_seen = %(last_seen)s, reports = %(reports)s, addresses = %(addresses)s WHERE mac = %(mac)s")
_TRIM_DISCOVERED = ("DELETE FROM discovered WHERE mac IN (SELECT mac FROM discovered "
                    "ORDER BY last_seen DESC, mac OFFSET %(keep)s)")


def public_name(url: str) -> str:
    """``url`` without its password (for messages and logs). Raises ``psycopg.ProgrammingError`` for a
    malformed URL."""
    params = conninfo.conninfo_to_dict(url)
    user = f"{params['user']}@" if params.get("user") else ""
    port = f":{params['port']}" if params.get("port") else ""
    return f"postgresql://{user}{params.get('host', '')}{port}/{params.get('dbname', '')}"


def _pg(sql: str) -> str:
    """A statement of :mod:`bootserver.timeline` (``?`` placeholders) in psycopg's ``%s`` style."""
    return sql.replace("?", "%s")


#: For each (client address, since): the node whose script was last served to it since then (:class:`Reads`).
_ATTRIBUTIONS = ("SELECT q.ip, q.since, (SELECT node FROM events WHERE event = 'script' AND ip = q.ip "
                 "AND last_at >= q.since ORDER BY last_at DESC, id DESC LIMIT 1) "
                 "FROM unnest(%s::text[], %s::float8[]) AS q(ip, since)")
#: The rows of several nodes (:class:`Reads`), each preceded by its name: node row, newest history row
#: and device record, in one statement.
_CURRENTS = f"SELECT q.node, {CURRENT_COLUMNS} FROM unnest(%s::text[]) AS q(node) {CURRENT_JOINS}"
#: Device records: write (one statement for the whole set), remove, read.
_SET_DEVICES = ("INSERT INTO devices (node, device, updated) SELECT * FROM unnest(%s::text[], %s::text[], "
                "%s::float8[]) ON CONFLICT (node) DO {} RETURNING node")
_CLEAR_DEVICES = "DELETE FROM devices WHERE node = ANY(%s) RETURNING node"
#: Before the batch's read: a node without a row gets the one plan_batch would assume, so it can be locked.
_NEW_NODE = ("INSERT INTO nodes (node, stage, stage_at, last_event, last_at) VALUES (%s, 'new', %s, %s, %s) "
             "ON CONFLICT (node) DO NOTHING")
#: The batch's node rows, locked in name order (two replicas writing the same nodes never deadlock).
_BATCH_ROWS = _pg(BATCH_ROWS_SQL.format(nodes="= ANY(%s) ORDER BY n.node FOR UPDATE OF n"))
_IDS = "SELECT nextval(pg_get_serial_sequence('events', 'id')) FROM generate_series(1, %s)"
#: The store's nodes: an apply's rows read and locked in name order; its inserts and claims in one
#: statement each (``ON CONFLICT DO NOTHING``: what another writer holds is left out of what returns).
_LOCK_NODES = ("SELECT name, spec, generation FROM inventory_nodes WHERE name = ANY(%s) ORDER BY name "
               "FOR UPDATE")
_INSERT_NODES = ("INSERT INTO inventory_nodes (name, spec, generation, updated) SELECT * FROM "
                 "unnest(%s::text[], %s::text[], %s::bigint[], %s::float8[]) ON CONFLICT (name) DO NOTHING "
                 "RETURNING name")
_CLAIM_ALL = ("INSERT INTO inventory_claims (kind, value, node) SELECT * FROM unnest(%s::text[], %s::text[], "
              "%s::text[]) ON CONFLICT (kind, value) DO NOTHING RETURNING kind, value")
_HOLDERS = ("SELECT c.kind, c.value, c.node FROM inventory_claims c JOIN unnest(%s::text[], %s::text[]) "
            "AS q(kind, value) ON c.kind = q.kind AND c.value = q.value")


K = TypeVar("K")
V = TypeVar("V")


class Reads(Generic[K, V]):
    """Reads of concurrent requests in one statement: a read joins the next statement, never one
    already sent, so it sees everything committed before it was asked; one statement at a time, and
    what arrives meanwhile forms the next. Under load a replica makes one round trip for many requests
    instead of one each (the read of one request alone is still one round trip).

    ``fetch(keys)`` returns the value of each key (a key it leaves out gets ``default``)."""

    def __init__(self, fetch: Callable[[list[K]], Awaitable[dict[K, V]]], default: V) -> None:
        self._fetch = fetch
        self._default = default
        self._waiting: dict[K, list[asyncio.Future[V]]] = {}
        self._reading: asyncio.Task[None] | None = None

    async def get(self, key: K) -> V:
        """The value of ``key``. Raises what ``fetch`` raised."""
        fut: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append(fut)
        if self._reading is None:
            self._reading = asyncio.create_task(self._read())
        return await fut

    async def _read(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, {}
                try:
                    values = await self._fetch(list(batch))
                except Exception as e:
                    for futs in batch.values():
                        for fut in futs:
                            if not fut.done():
                                fut.set_exception(e)
                    continue
                for key, futs in batch.items():
                    value = values.get(key, self._default)
                    for fut in futs:
                        if not fut.done():
                            fut.set_result(value)
        finally:
            self._reading = None


class PostgresStore(StateStore):
    """The state of every replica in one PostgreSQL database (see the module docstring).

    ``url`` is a libpq connection URI (``postgresql://user@host:5432/db``); ``password_file`` a file
    whose first line is the password; ``source`` the config file, for messages.
    """

    backend = "postgresql"

    def __init__(self, url: str, *, password_file: Path | None = None, keep_events: int,
                 source: str = "config") -> None:
        self.url = url
        self.password_file = password_file
        self.keep_events = keep_events
        self.source = source
        self.name = public_name(url)
        self._pool: AsyncConnectionPool | None = None
        #: the circuit: why the database is down (the first error that said so), ``None`` while it answers
        self._down: str | None = None
        self._down_since = 0.0
        self._probe: asyncio.Task[None] | None = None
        #: pools replaced after an outage, closing in the background (closed by :meth:`close` at the latest)
        self._retired: set[asyncio.Task[None]] = set()
        self._batches = Batches(self._commit)
        self._currents: Reads[str, Current] = Reads(self._read_currents, Current("new"))
        self._attributions: Reads[tuple[str, float], str | None] = Reads(self._read_attributions, None)
        self._keys: Keyring | None = None
        self._poller: asyncio.Task[None] | None = None
        self._keys_failing = False
        #: when the keys were last read (``time.monotonic()``), and why they could not be since (None: they could)
        self._keys_read_at = 0.0
        self._keys_problem: str | None = None

    def _connect_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"autocommit": True, "connect_timeout": max(1, int(WAIT)),
                                  "application_name": "bootserver"}
        if self.password_file is not None:
            try:
                kwargs["password"] = self.password_file.read_text().splitlines()[0]
            except (OSError, IndexError) as e:
                raise StateStoreError(f"{self.source}: state_store.password_file: cannot read "
                                      f"{self.password_file}: {getattr(e, 'strerror', None) or 'empty'}") from None
        return kwargs

    async def _new_pool(self) -> AsyncConnectionPool:
        """A pool opened with its first connection. Raises :class:`StateStoreError` (one line)."""
        pool = AsyncConnectionPool(self.url, kwargs=self._connect_kwargs(), min_size=1, max_size=POOL_MAX,
                                   timeout=WAIT, open=False, name="bootserver-state")
        try:
            await pool.open(wait=True, timeout=WAIT + 2)
        except Exception as e:
            await pool.close()
            raise StateStoreError(f"{self.name}: cannot connect to the state store: {_one_line(e)}") from None
        return pool

    async def _open_pool(self) -> AsyncConnectionPool:
        """The pool (opened on first use). Raises :class:`~bootserver.errors.UnavailableError` at once
        while the circuit is open (the database is down: :meth:`_opened_circuit`), never waiting."""
        if self._down is not None:
            raise UnavailableError(f"state store {self.name}: {self._down} (down for "
                                   f"{time.monotonic() - self._down_since:.0f} s; trying again every "
                                   f"{PROBE_EVERY:g} s)", public=PUBLIC_UNAVAILABLE)
        if self._pool is None:
            self._pool = await self._new_pool()
        return self._pool

    def _opened_circuit(self, e: Exception, pool: AsyncConnectionPool | None) -> None:
        """After ``e`` on ``pool``: when ``e`` says the database is gone (no connection within
        :data:`WAIT`, a connection refused or broken, the server shutting down: :data:`_GONE_SQLSTATES`)
        and ``pool`` is the current pool, open the circuit and start the probe (:meth:`_probe_until_up`)."""
        gone = isinstance(e, psycopg.OperationalError) and not isinstance(e, psycopg.errors.QueryCanceled) and (
            e.sqlstate is None or e.sqlstate.startswith("08") or e.sqlstate in _GONE_SQLSTATES)
        if not gone or pool is not self._pool or self._down is not None:
            return
        self._down, self._down_since = _one_line(e), time.monotonic()
        log.warning("%s: the state store is down (%s): refusing at once, trying to connect every %g s",
                    self.name, self._down, PROBE_EVERY)
        if self._probe is None or self._probe.done():
            self._probe = asyncio.get_running_loop().create_task(self._probe_until_up())

    async def _probe_until_up(self) -> None:
        """While the circuit is open: connect every :data:`PROBE_EVERY` seconds (the first at once); once
        a connection answers, a new pool replaces the old one (closed in the background after
        :data:`WAIT` seconds, the longest a statement may still be using it) and the circuit closes."""
        delay = 0.0
        while self._down is not None:
            await asyncio.sleep(delay)
            delay = PROBE_EVERY
            try:
                conn = await psycopg.AsyncConnection.connect(self.url, **self._connect_kwargs())
                async with conn:
                    await conn.execute("SELECT 1")
                pool = await self._new_pool()
            except (psycopg.Error, StateStoreError, OSError) as e:
                self._down = _one_line(e)
                continue
            old, self._pool = self._pool, pool
            log.info("%s: the state store answers again after %.1f s", self.name,
                     time.monotonic() - self._down_since)
            self._down = None
            if old is not None:
                task = asyncio.get_running_loop().create_task(self._retire(old))
                self._retired.add(task)
                task.add_done_callback(self._retired.discard)

    @staticmethod
    async def _retire(pool: AsyncConnectionPool) -> None:
        await asyncio.sleep(WAIT)
        await pool.close()

    async def migrate(self) -> tuple[int, int]:
        """Bring the schema to the newest version under the migration advisory lock; returns
        ``(version before, version after)``. Raises :class:`StateStoreError`."""
        pool = await self._open_pool()
        try:
            async with pool.connection() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
                await conn.execute("CREATE TABLE IF NOT EXISTS bootserver_schema (version INTEGER NOT NULL)")
                row = await (await conn.execute("SELECT max(version) FROM bootserver_schema")).fetchone()
                before = (row[0] if row else None) or 0
                if before > len(MIGRATIONS):
                    raise StateStoreError(f"{self.name}: schema version {before} is newer than this bootserver "
                                          f"knows ({len(MIGRATIONS)}): upgrade bootserver on this replica")
                for version in range(before + 1, len(MIGRATIONS) + 1):
                    await conn.execute(MIGRATIONS[version - 1].encode())
                    await conn.execute("INSERT INTO bootserver_schema (version) VALUES (%s)", (version,))
                    log.info("%s: state store schema migrated to version %d", self.name, version)
        except psycopg.Error as e:
            raise StateStoreError(f"{self.name}: cannot migrate the state store: {_one_line(e)}") from None
        return before, len(MIGRATIONS)

    async def start(self) -> None:
        await self.migrate()
        self._keys = await self._load_keys(create=True)
        self._poller = asyncio.create_task(self._poll_keys())

    async def close(self) -> None:
        tasks = [t for t in (self._poller, self._probe) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._batches.drained(closing=True)
        for task in list(self._retired):
            task.cancel()
        await asyncio.gather(*self._retired, return_exceptions=True)
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    def _unavailable(self, e: Exception, pool: AsyncConnectionPool | None) -> UnavailableError:
        """The error to raise after ``e`` on ``pool``; opens the circuit when ``e`` says the database is
        gone (:meth:`_opened_circuit`)."""
        self._keys_problem = f"state store {self.name}: {_one_line(e)}"  # the keys cannot be read either
        self._opened_circuit(e, pool)
        return UnavailableError(f"state store {self.name}: {_one_line(e)}", public=PUBLIC_UNAVAILABLE)

    async def _fetch(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        pool = await self._open_pool()
        try:
            async with pool.connection() as conn:
                return await (await conn.execute(sql, params)).fetchall()
        except psycopg.Error as e:
            raise self._unavailable(e, pool) from None

    async def stage(self, node: str) -> str:
        return (await self.current(node)).stage

    async def current(self, node: str) -> Current:
        return await self._currents.get(node)

    async def _read_currents(self, nodes: list[str]) -> dict[str, Current]:
        return {r[0]: current_of(r[1:]) for r in await self._fetch(_CURRENTS, (nodes,))}

    async def attribute(self, ip: str, now: float | None = None) -> str | None:
        now = time.time() if now is None else now
        return await self._attributions.get((ip, now - ATTRIBUTION_WINDOW))

    async def _read_attributions(self, asks: list[tuple[str, float]]) -> dict[tuple[str, float], str | None]:
        rows = await self._fetch(_ATTRIBUTIONS, ([ip for ip, _ in asks], [since for _, since in asks]))
        return {(ip, since): node for ip, since, node in rows}

    async def record(self, record: Record, current: Current | None = None) -> str:
        return await self._record(self._batches, record, current)

    def count_again(self, key: RepeatKey, at: float) -> bool:
        return self._batches.count_again(key[1], key, at)

    async def flush(self) -> None:
        await self._batches.drained()

    async def _commit(self, records: list[Record]) -> list[str]:
        """One transaction for ``records`` in two round trips: (1) create missing node rows, read and lock
        the batch's node rows in name order, take ids; (2) one pipeline of every write and the commit
        (:func:`~bootserver.timeline.plan_batch`)."""
        pool = await self._open_pool()
        first: dict[str, Record] = {}
        for r in records:
            first.setdefault(r.node, r)
        names = sorted(first)
        for attempt in (1, 2):
            try:
                async with pool.connection() as conn:
                    try:
                        # BEGIN and COMMIT as plain statements: psycopg's transaction() syncs at each
                        async with conn.pipeline(), conn.cursor() as cur:
                            await cur.execute("BEGIN")
                            await cur.executemany(_NEW_NODE, [(n, first[n].at, first[n].event, first[n].at)
                                                              for n in names])
                            read = await conn.execute(_BATCH_ROWS, (names,))
                            ids = await conn.execute(_IDS, (len(records),))
                            rows = {r[0]: r[1:] for r in await read.fetchall()}  # the first round trip
                            writes = plan_batch(records, rows, (i for (i,) in await ids.fetchall()),
                                                self.keep_events)
                            for sql, params in writes.statements():
                                await cur.executemany(_pg(sql), params)
                            await cur.execute("COMMIT")
                        return writes.stages  # the second: the writes and COMMIT, sent together
                    except BaseException:
                        if conn.info.transaction_status != psycopg.pq.TransactionStatus.UNKNOWN:
                            await conn.rollback()
                        raise
            except psycopg.OperationalError as e:
                if attempt == 2 or isinstance(e, psycopg.errors.QueryCanceled):
                    raise self._unavailable(e, pool) from None
                log.warning("%s: timeline batch of %d failed, retrying on a new connection: %s",
                            self.name, len(records), _one_line(e))
            except psycopg.Error as e:
                raise self._unavailable(e, pool) from None
        raise AssertionError("unreachable")

    async def events(self, node: str, limit: int | None = None) -> list[Event]:
        rows = await self._fetch("SELECT node, at, event, ip, detail, count, last_at FROM events WHERE node = %s "
                                 "ORDER BY at DESC, id DESC LIMIT %s", (node, limit))
        return [Event(n, at, ev, ip, json.loads(d) if d else {}, count, last)
                for n, at, ev, ip, d, count, last in reversed(rows)]

    async def node(self, node: str) -> NodeState:
        rows = await self._fetch(NODES_SQL + " WHERE n.node = %s", (node,))
        return NodeState(*rows[0]) if rows else NodeState(node, "new", None, None, None)

    async def nodes(self, names: Iterable[str] = ()) -> list[NodeState]:
        rows = await self._fetch(NODES_SQL, ())
        states = {r[0]: NodeState(*r) for r in rows}
        for name in names:
            states.setdefault(name, NodeState(name, "new", None, None, None))
        return [states[n] for n in sorted(states)]

    # -- device records ----------------------------------------------------------------------------

    async def devices(self, names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        if names is None:
            rows = await self._fetch("SELECT node, device FROM devices ORDER BY node", ())
        else:
            rows = await self._fetch("SELECT node, device FROM devices WHERE node = ANY(%s) ORDER BY node",
                                     (list(names),))
        return {n: device_of(d) for n, d in rows}

    async def write_devices(self, records: Mapping[str, Mapping[str, Any] | None], *,
                            replace: bool = True) -> list[str]:
        """One transaction: one statement writes the records, one removes the ``None`` ones."""
        at = time.time()
        put = {n: device_json(d) for n, d in records.items() if d is not None}
        gone = [n for n, d in records.items() if d is None]
        upsert = _SET_DEVICES.format("UPDATE SET device = EXCLUDED.device, updated = EXCLUDED.updated"
                                     if replace else "NOTHING")
        pool = await self._open_pool()
        done: set[str] = set()
        try:
            async with pool.connection() as conn, conn.transaction():
                if put:
                    cur = await conn.execute(upsert, (list(put), list(put.values()), [at] * len(put)))
                    done.update(n for (n,) in await cur.fetchall())
                if gone:
                    cur = await conn.execute(_CLEAR_DEVICES, (gone,))
                    done.update(n for (n,) in await cur.fetchall())
        except psycopg.Error as e:
            raise self._unavailable(e, pool) from None
        return [n for n in records if n in done]

    # -- discovered machines -----------------------------------------------------------------------

    async def discover(self, record: Discovered, keep: int) -> Discovered:
        """One transaction: the first report's insert (nothing when the machine has a row) and the row
        read, locked, in one pipeline; then the row merged with the report, and the trim."""
        first = merged(None, record)
        pool = await self._open_pool()
        try:
            async with pool.connection() as conn, conn.transaction():
                async with conn.pipeline():
                    added = await conn.execute(_DISCOVER_NEW, row_params(first))
                    cur = await conn.execute(_DISCOVERED_ROW, {"mac": record.mac})
                row = await cur.fetchone()
                now = first if added.rowcount == 1 or row is None else merged(record_of(row), record)
                async with conn.pipeline():
                    if now is not first:
                        await conn.execute(_DISCOVER_MERGED, row_params(now))
                    await conn.execute(_TRIM_DISCOVERED, {"keep": keep})
        except psycopg.Error as e:
            raise self._unavailable(e, pool) from None
        return now

    async def discovered(self) -> list[Discovered]:
        rows = await self._fetch(f"SELECT {COLUMNS} FROM discovered ORDER BY last_seen DESC, mac", ())
        return [record_of(r) for r in rows]

    async def forget_discovered(self, macs: Iterable[str]) -> int:
        pool = await self._open_pool()
        try:
            async with pool.connection() as conn, conn.transaction():
                cur = await conn.execute("DELETE FROM discovered WHERE mac = ANY(%s)", (list(macs),))
                return cur.rowcount
        except psycopg.Error as e:
            raise self._unavailable(e, pool) from None

    # -- the fleet API's tokens and audit trail (bootserver.state.apistore) -------------------------

    async def _write(self, sql: str, rows: Sequence[tuple[Any, ...]]) -> int:
        """``sql`` once per row in one transaction; the rows it changed. Raises ``UnavailableError``."""
        pool = await self._open_pool()
        try:
            async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
                changed = 0
                for row in rows:
                    await cur.execute(_pg(sql), row)
                    changed += max(cur.rowcount, 0)
                return changed
        except psycopg.Error as e:
            raise self._unavailable(e, pool) from None

    async def create_token(self, record: TokenRecord) -> None:
        row = (record.name, record.hash, " ".join(record.scopes), record.created, record.expires)
        if not await self._write(CREATE_TOKEN_SQL, [row]):
            raise TokenExistsError(f"token {record.name}: the name is taken (tokens list; tokens revoke {record.name})")

    async def tokens(self) -> list[TokenRecord]:
        return [token_of(r) for r in await self._fetch(TOKENS_SQL, ())]

    async def revoke_token(self, name: str) -> bool:
        return bool(await self._write(REVOKE_TOKEN_SQL, [(name,)]))

    async def touch_tokens(self, used: Mapping[str, float]) -> None:
        if used:
            await self._write(TOUCH_TOKEN_SQL, [(at, name, at) for name, at in used.items()])

    async def write_audit(self, entries: Sequence[AuditEntry]) -> None:
        if entries:
            await self._write(AUDIT_SQL, [e.row() for e in entries])

    async def audit(self, node: str | None = None, token: str | None = None, limit: int = 1000) -> list[AuditEntry]:
        return [audit_of(r) for r in await self._fetch(_pg(AUDIT_READ_SQL), audit_params(node, token, limit))]
    # -- the store's nodes (bootserver.state.nodestore) ------------------------------------------------

    async def inventory(self) -> Inventory:
        pool = await self._open_pool()
        try:
            async with pool.connection() as conn, conn.transaction():
                await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                revision = (await (await conn.execute(REVISION_SQL)).fetchone() or (0,))[0]
                rows = await (await conn.execute(LIST_SQL)).fetchall()
        except psycopg.Error as e:
            raise self._unavailable(e, pool) from None
        return Inventory(MappingProxyType({r[0]: stored_of(r) for r in rows}), int(revision))

    async def stored_node(self, name: str) -> StoredNode | None:
        rows = await self._fetch(_pg(GET_SQL), (name,))
        return stored_of(rows[0]) if rows else None

    async def _log(self, conn: psycopg.AsyncConnection[Any], changes: Sequence[tuple[str, Change, int]],
                   at: float) -> list[NodeChange]:
        """Number ``changes`` under the revision row's lock, log them, trim the log (the caller's transaction)."""
        if not changes:
            return []
        (revision,) = await (await conn.execute(_pg(BUMP_SQL), (len(changes),))).fetchone() or (0,)
        made = numbered(changes, int(revision), at)
        async with conn.cursor() as cur:
            await cur.executemany(_pg(CHANGE_SQL), [(c.revision, c.node, c.change, c.generation, c.at) for c in made])
        floor = int(revision) - KEEP_CHANGES
        if floor > 0 and (await conn.execute(_pg(TRIM_SQL), (floor,))).rowcount:
            await conn.execute(_pg(TRIMMED_SQL), (floor, floor))
        return made

    async def apply_nodes(self, writes: Sequence[NodeWrite], at: float | None = None) -> list[Applied]:
        """One transaction: the written nodes' rows locked in name order, the new ones inserted in one
        statement, the claims in one (a claim another writer took, or takes meanwhile: its insert waits
        for that one's commit and is left out, then named in the error), the revision raised last."""
        stamp = time.time() if at is None else at
        pool = await self._open_pool()
        try:
            async with pool.connection() as conn, conn.transaction():
                names = sorted({w.name for w in writes})
                rows = {r[0]: (r[1], int(r[2])) for r in
                        await (await conn.execute(_LOCK_NODES, (names,))).fetchall()}
                plan = plan_apply(writes, rows, stamp)
                if plan.inserts:
                    cols = [list(c) for c in zip(*plan.inserts, strict=True)]
                    done = {n for (n,) in await (await conn.execute(_INSERT_NODES, cols)).fetchall()}
                    for name, *_ in plan.inserts:
                        if name not in done:  # created meanwhile by a writer that committed first
                            w = next(w for w in writes if w.name == name)
                            if w.create_only or w.expect_generation is not None:
                                raise PreconditionFailedError(name, w.expect_generation, 1)
                            raise NodeConflictError(name, "name", name, name, "store")
                async with conn.cursor() as cur:
                    if plan.updates:
                        await cur.executemany(_pg(UPDATE_SQL), plan.updates)
                    if plan.reclaimed:
                        await cur.executemany(_pg(UNCLAIM_SQL), [(n,) for n in plan.reclaimed])
                if plan.claims:
                    kinds, values, owners = (list(c) for c in zip(*plan.claims, strict=True))
                    taken = set(await (await conn.execute(_CLAIM_ALL, (kinds, values, owners))).fetchall())
                    lost = [(k, v, n) for k, v, n in plan.claims if (k, v) not in taken]
                    if lost:
                        holders = {(k, v): n for k, v, n in await (await conn.execute(
                            _HOLDERS, ([k for k, _, _ in lost], [v for _, v, _ in lost]))).fetchall()}
                        kind, value, node = lost[0]
                        raise NodeConflictError(node, kind, value, holders.get((kind, value), "?"), "store")
                await self._log(conn, plan.changes, stamp)
        except psycopg.Error as e:
            raise self._unavailable(e, pool) from None
        return plan.applied

    async def delete_nodes(self, names: Sequence[str], expect: Mapping[str, int] | None = None,
                           at: float | None = None) -> list[NodeChange]:
        stamp = time.time() if at is None else at
        expect = expect or {}
        pool = await self._open_pool()
        try:
            async with pool.connection() as conn, conn.transaction():
                wanted = list(dict.fromkeys(names))
                rows = {r[0]: int(r[2]) for r in
                        await (await conn.execute(_LOCK_NODES, (sorted(wanted),))).fetchall()}
                changes: list[tuple[str, Change, int]] = []
                for name in wanted:
                    if name not in rows:
                        raise UnknownStoreNodeError(name)
                    if name in expect and rows[name] != expect[name]:
                        raise PreconditionFailedError(name, expect[name], rows[name])
                    changes.append((name, "deleted", rows[name]))
                await conn.execute("DELETE FROM inventory_nodes WHERE name = ANY(%s)", (wanted,))
                await conn.execute("DELETE FROM inventory_claims WHERE node = ANY(%s)", (wanted,))
                return await self._log(conn, changes, stamp)
        except psycopg.Error as e:
            raise self._unavailable(e, pool) from None

    async def node_changes(self, since: int) -> tuple[list[NodeChange], int]:
        pool = await self._open_pool()
        try:
            async with pool.connection() as conn, conn.transaction():
                await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                revision, trimmed = await (await conn.execute(STATE_SQL)).fetchone() or (0, 0)
                if since < trimmed:
                    raise ChangesExpiredError(since, int(trimmed) + 1)
                rows = await (await conn.execute(_pg(CHANGES_SQL), (since,))).fetchall()
        except psycopg.Error as e:
            raise self._unavailable(e, pool) from None
        return [change_of(r) for r in rows], int(revision)

    async def inventory_revision(self) -> int:
        rows = await self._fetch(REVISION_SQL, ())
        return int(rows[0][0]) if rows else 0

    # -- signing keys ------------------------------------------------------------------------------

    async def _load_keys(self, create: bool = False) -> Keyring:
        """The keys in the database (current first); with ``create``, a first key when there is none
        (under the migration lock, so replicas starting at once agree on one)."""
        pool = await self._open_pool()
        select = "SELECT key, created, retires FROM signing_keys ORDER BY retires IS NOT NULL, created DESC"
        try:
            async with pool.connection() as conn, conn.transaction():
                rows = await (await conn.execute(select)).fetchall()
                if not rows and create:
                    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
                    rows = await (await conn.execute(select)).fetchall()
                    if not rows:
                        await conn.execute("INSERT INTO signing_keys (key, created) VALUES (%s, %s)",
                                           (secrets.token_bytes(KEY_BYTES), int(time.time())))
                        rows = await (await conn.execute(select)).fetchall()
        except psycopg.Error as e:
            self._opened_circuit(e, pool)  # an idle replica learns of an outage from its key poll
            raise StateStoreError(f"{self.name}: cannot read the signing keys: {_one_line(e)}") from None
        keys = self._keyring_of(rows)
        self._keys_read_at = time.monotonic()
        self._keys_problem = None
        return keys

    def _keyring_of(self, rows: list[tuple[Any, ...]]) -> Keyring:
        entries = [KeyEntry(bytes(k), int(c), None if r is None else int(r)) for k, c, r in rows]
        if not entries or entries[0].retires is not None:
            raise StateStoreError(f"{self.name}: signing_keys: no current key (run `bootserver keys rotate`)")
        return Keyring.held(entries, self.keyring, self._keys_staleness)

    def _keys_staleness(self) -> str | None:
        """Why the keys in hand may lack a newer one (:attr:`Keyring.stale`), or ``None``."""
        if self._keys_problem is not None:
            return self._keys_problem
        age = time.monotonic() - self._keys_read_at
        return f"{self.name}: signing keys last read {age:.0f} s ago" if age > KEYS_STALE else None

    async def _poll_keys(self) -> None:
        """Re-read the keys every :data:`KEYS_POLL` seconds; keep the keys in hand when that fails."""
        while True:
            await asyncio.sleep(KEYS_POLL)
            try:
                keys = await self._load_keys()
            except (StateStoreError, UnavailableError) as e:
                if not self._keys_failing:
                    log.warning("%s: keeping the signing keys in hand: %s", self.name, e)
                self._keys_failing = True
                self._keys_problem = str(e)
                continue
            if self._keys_failing:
                log.info("%s: signing keys read again", self.name)
            self._keys_failing = False
            if self._keys is None or keys.entries != self._keys.entries:
                self._keys = keys

    def keyring(self) -> Keyring:
        """The keys read at :meth:`start` and kept fresh by polling (before start: none, so nothing
        verifies and nothing can be signed)."""
        return self._keys if self._keys is not None else Keyring.held((), self.keyring)

    async def rotate_keys(self, grace: int) -> Keyring:
        pool = await self._open_pool()
        t = int(time.time())
        try:
            async with pool.connection() as conn, conn.transaction():
                await conn.execute("LOCK TABLE signing_keys IN EXCLUSIVE MODE")
                await conn.execute("UPDATE signing_keys SET retires = %s WHERE retires IS NULL", (t + grace,))
                await conn.execute("DELETE FROM signing_keys WHERE retires <= %s", (t,))
                await conn.execute("INSERT INTO signing_keys (key, created) VALUES (%s, %s)",
                                   (secrets.token_bytes(KEY_BYTES), t))
        except psycopg.Error as e:
            raise StateStoreError(f"{self.name}: cannot rotate the signing keys: {_one_line(e)}") from None
        self._keys = await self._load_keys()
        return self._keys

    async def ready(self) -> str | None:
        try:
            await self._fetch("SELECT 1", ())
        except (UnavailableError, StateStoreError) as e:
            return str(e)
        return None


def _one_line(e: BaseException) -> str:
    """An exception's message on one line (libpq messages span several)."""
    return " ".join(str(e).split()) or type(e).__name__

