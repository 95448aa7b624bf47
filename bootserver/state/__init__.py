"""The state store: where a server keeps the node timeline (events, stages, boot-once and reinstall
marks) and the URL signing keys. One interface, two backends:

* :class:`~bootserver.state.sqlite.SqliteStore` (the default, no ``state_store`` key): the sqlite
  :class:`~bootserver.state.sqlite_timeline.Timeline` and ``keys.json`` in ``state_dir``. One machine:
  shared by the ``serve --workers`` processes and the CLI of that machine.
* :class:`~bootserver.state.postgresql.PostgresStore` (``state_store: postgresql://...``): one
  PostgreSQL database shared by every replica, so a stub served by one replica makes the node installed
  for all, a URL signed by one verifies on all, and ``keys rotate`` / ``nodes reinstall`` through any
  replica's config reach all of them (docs/design.md, "Replicas").

Besides the timeline and the keys, the store holds each node's **device record**: what the node's
provider recorded at ``provision`` (a JSON object, at least ``{"provider", "id", "state"}``; Equinix adds
``project``, ``hostname``, ``ip_addresses``, ``network_ports``..., Redfish ``address``, ``system``...).
``provision``, ``deprovision`` and ``devices`` read and write it through any replica's config, and a
``network: provider`` node's boot script reads it with the node's row (:attr:`Current.device
<bootserver.timeline.Current.device>`, same statement). Before, these records were files
``state_dir/nodes/<node>.json``; ``bootserver db migrate`` moves them in
(:func:`bootserver.state.backends.move_device_files`).

The store also holds nodes of its own (source ``store``, beside the config's files): the inventory
every replica shares, :class:`~bootserver.state.nodestore.NodeStore`, which :class:`StateStore`
includes (docs/design.md, "Store nodes").

Every method is a coroutine (the PostgreSQL store talks over the network; the sqlite store answers
reads on the loop, as one indexed row, and writes through its group-commit thread). When the store
cannot be reached or written, methods raise :class:`~bootserver.errors.UnavailableError` (HTTP 503):
without it a server cannot tell an installed node from a new one, and must not guess.

The backend a config selects is opened by :func:`bootserver.state.backends.open_store` (the backends
import this interface, so this module imports neither of them).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ..discovery import Discovered
from ..errors import BootserverError
from ..timeline import Current, Event, NodeState, Record, boot_started
from .apistore import ApiStore
from .batches import Batches
from .nodestore import NodeStore

if TYPE_CHECKING:
    from ..signing import Keyring


#: What a write-behind repeat is counted by (:meth:`StateStore.count_again`): the node as read
#: (:class:`~bootserver.timeline.Current`) and the record's node, event, client address, detail, mode
#: and ``real_config``.
RepeatKey = tuple[Current, str, str, str | None, Mapping[str, Any] | None, str, bool]


def repeat_key(current: Current, node: str, event: str, ip: str | None, detail: Mapping[str, Any] | None,
               mode: str, real_config: bool) -> RepeatKey:
    """The :data:`RepeatKey` of a record of those fields for the node as read in ``current``: two
    records with equal keys are the same record (:meth:`~bootserver.timeline.Record.repeats`) for the
    same newest row and stage (:meth:`~bootserver.timeline.Current.coalesces`)."""
    return (current, node, event, ip, detail or None, mode, real_config)


#: What a 503 answer says when the store cannot answer (no path, no URL: see :class:`BootserverError`).
PUBLIC_UNAVAILABLE = "node timeline unavailable (the server cannot write its state); retry later"


class StateStoreError(BootserverError):
    """The state store cannot be used at start (unreachable, refused, a newer schema, no keys, a file
    that cannot be opened): exit 1, one line naming the store (a file path, or a PostgreSQL URL without
    its password). Each backend turns its driver's errors (``sqlite3.Error``, ``psycopg.Error``) into
    this, or into :class:`~bootserver.errors.UnavailableError` while serving: no caller sees a driver
    exception."""


class Lifecycle(Protocol):
    """The store's own life: open it (:meth:`start`, or :meth:`prepare` once before a server forks),
    migrate its schema, say whether it answers (:meth:`ready`), close it. What the runtime and the
    commands that open a store use."""

    #: What the store is, for messages: a file path, or a PostgreSQL URL without its password.
    name: str
    #: ``sqlite`` or ``postgresql`` (what ``/readyz`` shows).
    backend: str

    @abstractmethod
    async def start(self) -> None:
        """Open the store: create or migrate its schema, check it, load (or create) the signing keys.
        Raises :class:`~bootserver.errors.BootserverError` subclasses naming the store."""

    async def prepare(self) -> None:
        """The one-time set-up of a server before it listens (and before ``serve --workers`` forks, so
        its processes do not race): create or migrate the schema and check it, load or create the
        signing keys. Call instead of :meth:`start`, then :meth:`close`. By default :meth:`start`
        (which does all that for PostgreSQL); the sqlite store, whose :meth:`start` opens nothing,
        checks its file's integrity here. Raises :class:`StateStoreError` naming the store (a damaged
        sqlite file: exit 2, see :class:`~bootserver.state.sqlite_timeline.TimelineDamagedError`), or
        the keys' errors (:class:`~bootserver.signing.KeyFileError`, exit 2)."""
        await self.start()

    @abstractmethod
    async def migrate(self) -> tuple[int, int]:
        """Create or upgrade the schema (without loading keys); returns ``(version before, after)``."""

    @abstractmethod
    async def close(self) -> None:
        """Finish pending writes and release connections and threads."""

    @abstractmethod
    async def ready(self) -> str | None:
        """``None`` when the store answers now, else why not (one line, no secret)."""


class TimelineStore(Protocol):
    """The node timeline: each node's stage and history, written through the group commit. What the
    runtime's record, the fleet view, the stall watch and the DHCP engine's first mile use."""

    #: History rows kept per node (``timeline.keep_events``).
    keep_events: int

    @abstractmethod
    async def stage(self, node: str) -> str:
        """The node's current stage (``new`` without events). Raises ``UnavailableError``."""

    @abstractmethod
    async def attribute(self, ip: str, now: float | None = None) -> str | None:
        """The node whose script was last served to ``ip`` within the attribution window (see
        :mod:`bootserver.timeline`), or ``None``. Raises ``UnavailableError``."""

    @abstractmethod
    async def current(self, node: str) -> Current:
        """The node's stage and newest history row, in one read (what the next event is checked
        against: :meth:`~bootserver.timeline.Current.coalesces`). Raises ``UnavailableError``."""

    @abstractmethod
    async def record(self, record: Record, current: Current | None = None) -> str:
        """Commit ``record`` (group commit: one transaction per batch); returns the node's stage after it.
        Raises ``UnavailableError`` when it could not be committed (then nothing of its batch was).

        With ``current`` (the node as :meth:`current` read it for this request) a record that only
        repeats the node's newest row is written behind: queued, returned at once, committed with the
        next batch (:class:`~bootserver.state.batches.Batches`). Anything else (a new row, a stage change:
        boot-once, attribution) is committed before this returns, so every process and replica sees it.
        """

    def count_again(self, key: RepeatKey, at: float) -> bool:
        """Count one more event at unix time ``at`` into the node's write-behind record that
        :meth:`record` queued for ``key`` (:func:`repeat_key`: the record's fields and the node as read),
        if it is still queued, without making a :class:`~bootserver.timeline.Record`; ``False`` when
        there is none such (then :meth:`record` it). What is committed and shown is the same either
        way: the node's newest row counted once more
        (:meth:`~bootserver.state.batches.Batches.count_again`)."""
        return False

    @abstractmethod
    async def flush(self) -> None:
        """Commit the write-behind records queued so far (before a listing reads the tables)."""

    @abstractmethod
    async def events(self, node: str, limit: int | None = None) -> list[Event]:
        """The node's history rows, oldest first (the last ``limit``). Raises ``UnavailableError``."""

    async def boot_started(self, node: str) -> float | None:
        """The unix time of the first ``script`` of the node's latest boot
        (:func:`~bootserver.timeline.boot_started`), ``None`` when its history holds none. Raises
        ``UnavailableError``."""
        return boot_started(await self.events(node))

    @abstractmethod
    async def node(self, node: str) -> NodeState:
        """One node's state. Raises ``UnavailableError``."""

    @abstractmethod
    async def nodes(self, names: Iterable[str] = ()) -> list[NodeState]:
        """Every node with events plus every name in ``names``, by name. Raises ``UnavailableError``."""



class DeviceStore(Protocol):
    """The device records: what each node's provider recorded at ``provision`` (see the module
    docstring). What ``provision``, ``deprovision``, ``devices`` and the fleet view use."""

    @abstractmethod
    async def devices(self, names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        """``{node: its device record}`` for the nodes of ``names`` that have one (every recorded node
        when ``None``), by name. Raises ``UnavailableError``."""

    @abstractmethod
    async def write_devices(self, records: Mapping[str, Mapping[str, Any] | None], *,
                            replace: bool = True) -> list[str]:
        """Write each node's device record (``None`` removes it) in one transaction, all or nothing;
        with ``replace=False`` a node that already has a record keeps it. Every process and replica
        reads the new records at their next request (a sqlite server's cached :meth:`current` is
        invalidated). Returns the nodes written or removed, in order. Raises ``UnavailableError``."""

    async def device(self, node: str) -> dict[str, Any] | None:
        """The node's device record, ``None`` without one. Raises ``UnavailableError``."""
        return (await self.devices([node])).get(node)

    async def set_device(self, node: str, device: Mapping[str, Any]) -> None:
        """Record ``device`` (a provider's record, a JSON-able mapping) as the node's device, replacing
        the one before. Raises ``UnavailableError``."""
        await self.write_devices({node: device})

    async def clear_device(self, node: str) -> bool:
        """Remove the node's device record; whether it had one. Raises ``UnavailableError``."""
        return bool(await self.write_devices({node: None}))

    async def add_devices(self, records: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """Record the devices of the nodes that have none yet (one transaction); the others keep
        theirs. Returns the nodes added. Raises ``UnavailableError``."""
        return await self.write_devices(records, replace=False)


class DiscoveryStore(Protocol):
    """The discovered machines: reports of machines no node matched, until they are adopted. What the
    discovery intake, the page, the fleet API and ``nodes adopt`` use."""

    @abstractmethod
    async def discover(self, record: Discovered, keep: int) -> Discovered:
        """Record a discovered machine's report (:class:`~bootserver.discovery.Discovered`: a new row, or
        its row merged with the report by :func:`~bootserver.discovery.merged`, read and written in one
        transaction; ``record.last_seen`` is the report's time), then keep only the ``keep`` records
        reported last (the same transaction: the table never holds more). Returns the machine's record
        as written. Raises :class:`~bootserver.errors.UnavailableError`."""

    @abstractmethod
    async def discovered(self) -> list[Discovered]:
        """Every discovered machine, last reported first. Raises :class:`~bootserver.errors.UnavailableError`."""

    @abstractmethod
    async def forget_discovered(self, macs: Iterable[str]) -> int:
        """Remove the records of ``macs`` (adopted machines); returns how many there were. Raises
        :class:`~bootserver.errors.UnavailableError`."""



class KeyStore(Protocol):
    """The URL signing keys (:mod:`bootserver.signing`): read, kept fresh, rotated. What the signer and
    ``keys rotate`` use."""

    @abstractmethod
    def keyring(self) -> Keyring:
        """The signing keys in hand (current first), kept fresh: its ``refreshed()`` returns the newest
        keys any process wrote. Call after :meth:`start`."""

    @abstractmethod
    async def rotate_keys(self, grace: int) -> Keyring:
        """Make a new current key; the previous one stays accepted ``grace`` seconds. Returns the keys."""


class StateStore(Lifecycle, TimelineStore, DeviceStore, DiscoveryStore, KeyStore, NodeStore, ApiStore, ABC):
    """The whole state store (see the module docstring), as each backend implements it: its seams, each
    what one kind of consumer needs and is typed with: :class:`Lifecycle`, :class:`TimelineStore`,
    :class:`DeviceStore`, :class:`DiscoveryStore`, :class:`KeyStore`, the store's nodes
    (:class:`~bootserver.state.nodestore.NodeStore`) and the fleet API's tokens and audit trail
    (:class:`~bootserver.state.apistore.ApiStore`). Only what opens a store (the runtime, a command)
    holds the whole."""

    @staticmethod
    async def _record(batches: Batches, record: Record, current: Current | None) -> str:
        if current is not None and current.coalesces(record):
            batches.record_behind(record, current.last_id, repeat_key(current, record.node, record.event,
                                                                      record.ip, record.detail, record.mode,
                                                                      record.real_config))
            return current.stage
        return await batches.record(record)
