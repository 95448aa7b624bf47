"""A state store in memory: :class:`MemoryStore`, the fake backend of the core modules' own tests
(``tests/test_service.py``, ``test_runtime.py``, ``test_inventory.py`` ...), beside the real ones.

Like matchbox's ``storage/testfakes`` (a fixed, in-memory store behind the same interface as the file
store), it implements the whole :class:`~bootserver.state.StateStore` with dicts and lists: the stage
rules are the real ones (:func:`bootserver.timeline.next_stage`), so a node's stage follows its events
as on sqlite and PostgreSQL; what it leaves out is what the backends' own tests cover (group commit,
write-behind, coalescing repeats into one row, ``keep_events``, transactions across processes, claims
across replicas). Every call answers at once, so a test of a module over it runs in milliseconds and
needs no ``state_dir``. Where the behaviour of the stores themselves is at stake, use the real ones
(``tests/state/``, ``support.stores.backend``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from bootserver.discovery import Discovered
from bootserver.errors import PreconditionFailedError, UnknownStoreNodeError
from bootserver.signing import KeyEntry, Keyring
from bootserver.state import StateStore
from bootserver.state.apistore import AuditEntry, TokenRecord
from bootserver.state.nodestore import Applied, Inventory, NodeChange, NodeWrite, StoredNode, node_json
from bootserver.timeline import ATTRIBUTION_WINDOW, Current, Event, NodeState, Record, next_stage

#: The signing key of every :class:`MemoryStore` unless given (32 bytes, as the real stores make).
MEMORY_KEY = bytes(range(32))


class MemoryStore(StateStore):
    """The whole state store in memory (see the module docstring). ``keys``: its signing keys (default
    one key, :data:`MEMORY_KEY`); ``keep_events``: as ``timeline.keep_events`` (rows beyond it dropped,
    oldest first). ``records`` holds every :class:`~bootserver.timeline.Record` it was given, in order,
    for a test to read."""

    name = "memory"
    backend = "memory"

    def __init__(self, keys: Sequence[KeyEntry] = (KeyEntry(MEMORY_KEY, 0),), keep_events: int = 100) -> None:
        self.keep_events = keep_events
        self._keys = Keyring(Path("/nonexistent/keys.json"), list(keys))
        self.records: list[Record] = []
        self._events: dict[str, list[Event]] = {}
        self._states: dict[str, NodeState] = {}
        self._devices: dict[str, dict[str, Any]] = {}
        self._discovered: dict[str, Discovered] = {}
        self._stored: dict[str, StoredNode] = {}
        self._changes: list[NodeChange] = []
        self._tokens: dict[str, TokenRecord] = {}
        self._audit: list[AuditEntry] = []
        self.started = self.closed = False

    # -- Lifecycle

    async def start(self) -> None:
        self.started = True

    async def migrate(self) -> tuple[int, int]:
        return (1, 1)

    async def close(self) -> None:
        self.closed = True

    async def ready(self) -> str | None:
        return None

    # -- TimelineStore

    async def stage(self, node: str) -> str:
        return (await self.node(node)).stage

    async def attribute(self, ip: str, now: float | None = None) -> str | None:
        now = time.time() if now is None else now
        served = [e for events in self._events.values() for e in events
                  if e.event == "script" and e.ip == ip and now - (e.last_at or e.at) <= ATTRIBUTION_WINDOW]
        return max(served, key=lambda e: e.last_at or e.at).node if served else None

    async def current(self, node: str) -> Current:
        state = self._states.get(node)
        device = self._devices.get(node)
        if state is None:
            return Current("new", device=device)
        last = self._events[node][-1]
        return Current(state.stage, state.stage_at, state.last_at, len(self.records),
                       (last.event, last.ip, dict(last.detail) or None, state.stage), device)

    async def record(self, record: Record, current: Current | None = None) -> str:
        self.records.append(record)
        state = self._states.get(record.node) or NodeState(record.node, "new", record.at, None, None)
        stage_at = state.stage_at or record.at
        stage = next_stage(state.stage, record.event, record.mode, real_config=record.real_config) \
            if record.at >= stage_at else state.stage
        events = self._events.setdefault(record.node, [])
        events.append(Event(record.node, record.at, record.event, record.ip, dict(record.detail or {}),
                            record.count, record.last_at))
        dropped = state.dropped + max(0, len(events) - self.keep_events)
        del events[:max(0, len(events) - self.keep_events)]
        self._states[record.node] = NodeState(record.node, stage, record.at if stage != state.stage else stage_at,
                                              record.event, record.last, dropped, record.ip)
        return stage

    async def flush(self) -> None:
        """Nothing is queued: every record is in at once."""

    async def events(self, node: str, limit: int | None = None) -> list[Event]:
        events = list(self._events.get(node, ()))
        return events if limit is None else events[-limit:]

    async def node(self, node: str) -> NodeState:
        return self._states.get(node) or NodeState(node, "new", None, None, None)

    async def nodes(self, names: Iterable[str] = ()) -> list[NodeState]:
        return [await self.node(n) for n in sorted({*self._states, *names})]

    # -- DeviceStore

    async def devices(self, names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        wanted = sorted(self._devices) if names is None else [n for n in names if n in self._devices]
        return {n: dict(self._devices[n]) for n in wanted}

    async def write_devices(self, records: Mapping[str, Mapping[str, Any] | None], *,
                            replace: bool = True) -> list[str]:
        written = []
        for node, device in records.items():
            if device is None:
                if self._devices.pop(node, None) is not None:
                    written.append(node)
            elif replace or node not in self._devices:
                self._devices[node] = dict(device)
                written.append(node)
        return written

    # -- DiscoveryStore

    async def discover(self, record: Discovered, keep: int) -> Discovered:
        self._discovered[record.mac] = record
        for mac in sorted(self._discovered, key=lambda m: self._discovered[m].last_seen)[:-keep or None]:
            del self._discovered[mac]
        return record

    async def discovered(self) -> list[Discovered]:
        return sorted(self._discovered.values(), key=lambda d: d.last_seen, reverse=True)

    async def forget_discovered(self, macs: Iterable[str]) -> int:
        return sum(self._discovered.pop(mac, None) is not None for mac in macs)

    # -- KeyStore

    def keyring(self) -> Keyring:
        return self._keys

    async def rotate_keys(self, grace: int) -> Keyring:
        now = int(time.time())
        old = [KeyEntry(e.key, e.created, now + grace if e.retires is None else e.retires)
               for e in self._keys.entries]
        self._keys = Keyring(self._keys.path, [KeyEntry(bytes(reversed(old[0].key)), now), *old])
        return self._keys

    # -- NodeStore (no claims: the real stores' uniqueness is tests/state/test_store_nodes.py's)

    async def inventory(self) -> Inventory:
        return Inventory(MappingProxyType(dict(self._stored)), len(self._changes))

    async def stored_node(self, name: str) -> StoredNode | None:
        return self._stored.get(name)

    async def apply_nodes(self, writes: Sequence[NodeWrite], at: float | None = None) -> list[Applied]:
        at = time.time() if at is None else at
        for w in writes:
            w.check(None if w.name not in self._stored else self._stored[w.name].generation)
        out = []
        for w in writes:
            old = self._stored.get(w.name)
            if old is not None and node_json(old.spec) == node_json(w.spec):
                out.append(Applied(w.name, "unchanged", old.generation))
                continue
            generation = 1 if old is None else old.generation + 1
            self._stored[w.name] = StoredNode(w.name, dict(w.spec), generation, at)
            change = "created" if old is None else "updated"
            self._changes.append(NodeChange(len(self._changes) + 1, w.name, change, generation, at))
            out.append(Applied(w.name, change, generation))
        return out

    async def delete_nodes(self, names: Sequence[str], expect: Mapping[str, int] | None = None,
                           at: float | None = None) -> list[NodeChange]:
        at = time.time() if at is None else at
        for name in names:
            if name not in self._stored:
                raise UnknownStoreNodeError(name)
            if expect is not None and name in expect and expect[name] != self._stored[name].generation:
                raise PreconditionFailedError(name, expect[name], self._stored[name].generation)
        made = []
        for name in names:
            gone = self._stored.pop(name)
            made.append(NodeChange(len(self._changes) + 1, name, "deleted", gone.generation, at))
            self._changes.append(made[-1])
        return made

    async def node_changes(self, since: int) -> tuple[list[NodeChange], int]:
        return [c for c in self._changes if c.revision > since], len(self._changes)

    async def inventory_revision(self) -> int:
        return len(self._changes)

    # -- ApiStore

    async def create_token(self, record: TokenRecord) -> None:
        self._tokens[record.name] = record

    async def tokens(self) -> list[TokenRecord]:
        return sorted(self._tokens.values(), key=lambda t: t.name)

    async def revoke_token(self, name: str) -> bool:
        return self._tokens.pop(name, None) is not None

    async def touch_tokens(self, used: Mapping[str, float]) -> None:
        for name, when in used.items():
            if name in self._tokens:
                t = self._tokens[name]
                self._tokens[name] = TokenRecord(t.name, t.hash, t.scopes, t.created, t.expires, when)

    async def write_audit(self, entries: Sequence[AuditEntry]) -> None:
        self._audit.extend(entries)

    async def audit(self, node: str | None = None, token: str | None = None, limit: int = 1000) -> list[AuditEntry]:
        kept = [e for e in reversed(self._audit) if (node is None or e.node == node)
                and (token is None or e.token == token)]
        return kept[:limit]
