"""A state store whose database is gone: :class:`BrokenStore`, the fake behind ``test_lost_store.py``.

Like matchbox's ``testfakes.BrokenStore`` (every storage call returns an error), every call that needs
the database raises what the real backends raise when it is gone at that moment:
:class:`~bootserver.errors.UnavailableError` with the public text of :data:`bootserver.state.PUBLIC_UNAVAILABLE`
and, for the log only, the store's URL and libpq's message with its socket path (what
``state.postgresql`` builds from a ``psycopg.OperationalError``); the one-time and command calls
(``prepare``, ``migrate``, ``rotate_keys``) raise :class:`~bootserver.state.StateStoreError`, as that store does.

Why a fake and not the real PostgreSQL stopped (which ``test_replicas.py`` does, with its timing: the
pool's reconnects, keys kept in hand, recovery): here the database is lost at *every* call, from the
first request on and for each one of them, with no window where a reconnect or a pending commit gets
through, so one table can ask every endpoint and get the same answer on every run.

What the real stores do without their database, and so this one too: :meth:`start` succeeds (the
database answered then: the signing keys in hand were read at start), :meth:`flush` and :meth:`close`
return (their batches keep failed records for the next commit, and nothing is queued here),
:meth:`ready` says why not, and :meth:`keyring` gives the keys in hand, :attr:`~bootserver.signing.Keyring.stale`
since they cannot be read again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NoReturn

from bootserver.discovery import Discovered
from bootserver.errors import UnavailableError
from bootserver.signing import KeyEntry, Keyring
from bootserver.state import PUBLIC_UNAVAILABLE, StateStore, StateStoreError
from bootserver.state.apistore import AuditEntry, TokenRecord
from bootserver.state.nodestore import Applied, Inventory, NodeChange, NodeWrite, StoredNode
from bootserver.timeline import Current, Event, NodeState, Record

#: libpq's message when the server's socket is gone (a local path: it must reach the log, never a body).
LOST = ('connection failed: connection to server on socket "/run/postgresql/.s.PGSQL.5432" failed: '
        "No such file or directory")


class BrokenStore(StateStore):
    """A :class:`~bootserver.state.StateStore` whose database is gone at every call (see the module
    docstring); ``keys`` are the signing keys it read at start, the ones the server signs with."""

    name = "postgresql://bootserver@db.internal:5432/bootserver"
    backend = "postgresql"
    keep_events = 100

    def __init__(self, keys: Sequence[KeyEntry]) -> None:
        self._keys = Keyring.held(keys, self.keyring, lambda: f"state store {self.name}: {LOST}")

    def _lost(self) -> NoReturn:
        raise UnavailableError(f"state store {self.name}: {LOST}", public=PUBLIC_UNAVAILABLE)

    async def start(self) -> None:
        """The database answered at start: the keys in hand come from then."""

    async def prepare(self) -> None:
        raise StateStoreError(f"{self.name}: cannot connect to the state store: {LOST}")

    async def migrate(self) -> tuple[int, int]:
        raise StateStoreError(f"{self.name}: cannot migrate the state store: {LOST}")

    async def close(self) -> None:
        """Nothing queued, nothing to release."""

    async def stage(self, node: str) -> str:
        self._lost()

    async def attribute(self, ip: str, now: float | None = None) -> str | None:
        self._lost()

    async def current(self, node: str) -> Current:
        self._lost()

    async def record(self, record: Record, current: Current | None = None) -> str:
        self._lost()

    async def flush(self) -> None:
        """Nothing is queued (every record failed before it was); a real store's failed batch waits."""

    async def events(self, node: str, limit: int | None = None) -> list[Event]:
        self._lost()

    async def discover(self, record: Discovered, keep: int) -> Discovered:
        self._lost()

    async def discovered(self) -> list[Discovered]:
        self._lost()

    async def forget_discovered(self, macs: Iterable[str]) -> int:
        self._lost()

    async def node(self, node: str) -> NodeState:
        self._lost()

    async def nodes(self, names: Iterable[str] = ()) -> list[NodeState]:
        self._lost()

    async def devices(self, names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        self._lost()

    async def write_devices(self, records: Mapping[str, Mapping[str, Any] | None], *,
                            replace: bool = True) -> list[str]:
        self._lost()

    async def create_token(self, record: TokenRecord) -> None:
        self._lost()

    async def tokens(self) -> list[TokenRecord]:
        self._lost()

    async def revoke_token(self, name: str) -> bool:
        self._lost()

    async def touch_tokens(self, used: Mapping[str, float]) -> None:
        self._lost()

    async def write_audit(self, entries: Sequence[AuditEntry]) -> None:
        self._lost()

    async def audit(self, node: str | None = None, token: str | None = None, limit: int = 1000) -> list[AuditEntry]:
        self._lost()

    async def inventory(self) -> Inventory:
        self._lost()

    async def stored_node(self, name: str) -> StoredNode | None:
        self._lost()

    async def apply_nodes(self, writes: Sequence[NodeWrite], at: float | None = None) -> list[Applied]:
        self._lost()

    async def delete_nodes(self, names: Sequence[str], expect: Mapping[str, int] | None = None,
                           at: float | None = None) -> list[NodeChange]:
        self._lost()

    async def node_changes(self, since: int) -> tuple[list[NodeChange], int]:
        self._lost()

    async def inventory_revision(self) -> int:
        self._lost()

    def keyring(self) -> Keyring:
        return self._keys

    async def rotate_keys(self, grace: int) -> Keyring:
        raise StateStoreError(f"{self.name}: cannot rotate the signing keys: {LOST}")

    async def ready(self) -> str | None:
        return f"state store {self.name}: {LOST}"
