"""Writing the state store's nodes (issue 48): ``bootserver nodes apply``, ``delete``, ``export``, ``nodes
adopt`` and the fleet API write through here, with any replica's config and no server running.

A write is checked before anything is written, as ``check-config`` checks a file node: the config
layer's merge (:func:`bootserver.config.loader.with_store_nodes`: schema, profile, facility, hostname,
default node, network and kargs, provider's boot source, no name or claim of a file node), then each
written node's kernel command line (:func:`bootserver.scripts.check_command_lines`) and boot network
(:func:`bootserver.images.network.check_boot_networks`). Only then the store writes it, all or nothing
(:meth:`bootserver.state.nodestore.NodeStore.apply_nodes`), where the claims table decides races.
Every serving process picks the change up by itself (:mod:`bootserver.http.running`, the store watch).
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, TextIO

import yaml

from .config import Config, Node
from .config.loader import STORE_NAME, UniqueKeyLoader, node_claims, store_node, with_store_nodes
from .errors import ChangesExpiredError, ConfigError, FileNodeError, NodeCheckError, NodeConflictError
from .images.network import check_boot_networks
from .scripts import check_command_lines
from .state.backends import open_store
from .state.nodestore import Applied, Inventory, NodeChange, NodeStore, NodeWrite


@dataclass(frozen=True)
class Precondition:
    """A write's precondition on one node (the fleet API's ``If-Match``/``If-None-Match: *``):
    ``generation`` the node must be at, or ``create_only`` (no such node yet)."""

    generation: int | None = None
    create_only: bool = False


def checked(config: Config, inventory: Inventory, specs: Mapping[str, Any], *,
            source: str = STORE_NAME) -> Config:
    """``config``'s file nodes with the store's nodes of ``inventory`` and ``specs`` (name -> mapping)
    over them, each node of ``specs`` checked as ``check-config`` checks a file node (see the module
    docstring); returns the merged config. Raises :class:`~bootserver.errors.NodeCheckError` (node and
    key), :class:`~bootserver.errors.FileNodeError`, :class:`~bootserver.errors.NodeConflictError` (a
    file node's claim), :class:`~bootserver.kargs.CommandLineTooLong`, naming ``source``."""
    stored: dict[str, Mapping[str, Any] | Node] = {n: s.spec for n, s in inventory.nodes.items()}
    for name in specs:
        if name in config.nodes and config.node_sources.get(name) != "store":
            raise FileNodeError(name, config.node_sources[name])
    stored.update({name: store_node(name, spec, source) for name, spec in specs.items()})
    merged = with_store_nodes(config, stored, source=source, written=list(specs))
    # the written nodes alone, under the writer's name, through check-config's later checks
    alone = dataclasses.replace(merged, source=source,
                                nodes=MappingProxyType({n: merged.nodes[n] for n in specs}),
                                node_sources=MappingProxyType(dict.fromkeys(specs, "store")))
    check_command_lines(alone)
    try:
        check_boot_networks(alone)
    except ConfigError as e:
        raise ConfigError(source, e.keypath, e.message) from None
    return merged


async def with_store(config: Config, store: NodeStore) -> Config:
    """``config`` with the state store's nodes merged in (source ``store``,
    :func:`bootserver.config.loader.with_store_nodes`): what a command that names or lists nodes works
    on, whichever replica's config it is given. Raises what the merge raises (a store node whose name a
    file node now has: one line naming both) and ``UnavailableError``."""
    inventory = await store.inventory()
    if not inventory.nodes:
        return config
    return with_store_nodes(config, {n: s.spec for n, s in inventory.nodes.items()})


async def apply_nodes(config: Config, store: NodeStore, specs: Mapping[str, Any], *, source: str = STORE_NAME,
                      preconditions: Mapping[str, Precondition] | None = None) -> list[Applied]:
    """Create or update the store nodes ``specs`` (name -> mapping of the config's node schema), all or
    nothing, after :func:`checked`; one :class:`~bootserver.state.nodestore.Applied` per node, in
    order. Raises what :func:`checked` raises (nothing written), and what the store's
    :meth:`~bootserver.state.nodestore.NodeStore.apply_nodes` raises (a precondition, a claim another
    store node holds: the race's loser; ``UnavailableError``)."""
    merged = checked(config, await store.inventory(), specs, source=source)
    pre = preconditions or {}
    writes = [NodeWrite(name, spec, node_claims(name, merged.nodes[name]),
                        expect_generation=pre[name].generation if name in pre else None,
                        create_only=pre[name].create_only if name in pre else False)
              for name, spec in specs.items()]
    return await store.apply_nodes(writes)


async def delete_nodes(config: Config, store: NodeStore, names: Sequence[str],
                       expect: Mapping[str, int] | None = None) -> list[NodeChange]:
    """Delete the store nodes ``names`` (all or nothing; ``expect``: name -> generation each must be
    at). Raises :class:`~bootserver.errors.FileNodeError` for a file node's name (nothing deleted), and
    what :meth:`~bootserver.state.nodestore.NodeStore.delete_nodes` raises (an unknown store node, a
    precondition)."""
    for name in names:
        if name in config.nodes and config.node_sources.get(name) != "store":
            raise FileNodeError(name, config.node_sources[name])
    return await store.delete_nodes(names, expect)


def read_nodes(path: str, stdin: TextIO | None = None) -> dict[str, Any]:
    """The ``nodes:`` mapping of the YAML file ``path`` (``-``: ``stdin``), the input of ``nodes apply``:
    a mapping whose only key is ``nodes``, a mapping of names to node mappings. Raises
    :class:`~bootserver.errors.ConfigError` naming the file (``<stdin>`` for ``-``) and the key."""
    name = "<stdin>" if path == "-" else path
    try:
        text = (stdin.read() if stdin is not None else "") if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(name, "", f"cannot read: {getattr(e, 'strerror', None) or e}") from None
    try:
        doc = yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader that refuses a key given twice
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        raise ConfigError(name, "", f"{where}invalid YAML: {getattr(e, 'problem', None) or e}") from None
    if not isinstance(doc, dict) or set(doc) - {"nodes"}:
        extra = sorted(str(k) for k in doc) if isinstance(doc, dict) else []
        raise ConfigError(name, next((k for k in extra if k != "nodes"), ""),
                          "expected a mapping with one key, nodes: (a mapping of node names to nodes, as in "
                          "the config)")
    nodes = doc.get("nodes") or {}
    if not isinstance(nodes, dict):
        raise ConfigError(name, "nodes", "expected a mapping of node names to nodes")
    for key in nodes:
        if not isinstance(key, str):
            raise ConfigError(name, "nodes", f"{key!r}: a node's name must be a string")
    return nodes


def export_yaml(inventory: Inventory) -> str:
    """The store's nodes as the YAML ``nodes apply`` reads (:func:`read_nodes`): ``nodes:`` with each
    node's mapping as stored, by name; applying it again changes nothing."""
    out = io.StringIO()
    yaml.safe_dump({"nodes": {n: dict(s.spec) for n, s in inventory.nodes.items()}}, out, sort_keys=False,
                   default_flow_style=False, allow_unicode=True)
    return out.getvalue()


def serving_config(config: Config) -> tuple[Config, list[str]]:
    """What ``serve`` serves at start: ``config`` (its files) with the state store's nodes
    (:meth:`StoreNodes.merged`, strict: a store node whose name or claim a file node now has refuses the
    start, naming both origins), and the lines of the store nodes left out. Opens and closes the store.
    Raises :class:`~bootserver.errors.FileNodeError`, :class:`~bootserver.errors.NodeConflictError`, the
    store's errors."""
    async def run() -> tuple[Config, list[str]]:
        store = open_store(config)
        await store.start()
        try:
            nodes = StoreNodes()
            await nodes.load(store)
        finally:
            await store.close()
        return nodes.merged(config, strict=True)

    return asyncio.run(run())


#: Seconds between two polls of the store's revision by a serving process (``serve``'s workers,
#: ``bootserver dhcp``): a store write is served everywhere within this plus one rebuild.
POLL = 0.5


class StoreNodes:
    """The state store's nodes as one process last read them, kept by polling the store's revision
    (:meth:`~bootserver.state.nodestore.NodeStore.inventory_revision`, one row: cheap) and reading only
    the nodes that changed since (:meth:`~bootserver.state.nodestore.NodeStore.node_changes`; the whole
    inventory when the change log no longer reaches back). Each node's mapping is checked against the
    schema once per generation (:func:`~bootserver.config.loader.store_node`). What ``serve``'s store
    watch (:mod:`bootserver.http.running`) and ``bootserver dhcp`` build their config from
    (:meth:`merged`)."""

    def __init__(self) -> None:
        #: The store's revision as read (-1: never read).
        self.revision = -1
        #: name -> (generation, its mapping, the checked node or ``None`` when it fails the schema)
        self.nodes: dict[str, tuple[int, Mapping[str, Any], Node | None]] = {}
        #: The schema error of each node that fails it (by name), for :meth:`merged`'s skipped lines.
        self._errors: dict[str, str] = {}

    def _take(self, name: str, generation: int, spec: Mapping[str, Any]) -> None:
        self._errors.pop(name, None)
        try:
            node: Node | None = store_node(name, spec)
        except ConfigError as e:
            node, self._errors[name] = None, str(e)
        self.nodes[name] = (generation, spec, node)

    async def load(self, store: NodeStore) -> None:
        """Read every store node (at start). Raises ``UnavailableError``."""
        inventory = await store.inventory()
        self.nodes.clear()
        self._errors.clear()
        for name, s in inventory.nodes.items():
            self._take(name, s.generation, s.spec)
        self.revision = inventory.revision

    async def refresh(self, store: NodeStore) -> set[str]:
        """Read what changed since the revision last read; returns the names of the nodes created, changed
        or deleted (empty: nothing changed). Raises ``UnavailableError``."""
        revision = await store.inventory_revision()
        if revision == self.revision:
            return set()
        try:
            changes, revision = await store.node_changes(self.revision)
        except ChangesExpiredError:
            before = {n: g for n, (g, _, _) in self.nodes.items()}
            await self.load(store)
            return {n for n in before.keys() | self.nodes.keys()
                    if before.get(n) != (self.nodes[n][0] if n in self.nodes else None)}
        names = {c.node for c in changes}
        for name in sorted(names):
            stored = await store.stored_node(name)
            if stored is None:
                self.nodes.pop(name, None)
                self._errors.pop(name, None)
            else:  # also at the same generation: deleted and created again in between
                self._take(name, stored.generation, stored.spec)
        self.revision = revision
        return names

    def merged(self, files: Config, *, strict: bool, written: Iterable[str] | None = None) -> tuple[Config, list[str]]:
        """``files`` (a config loaded from its files) with these store nodes
        (:func:`~bootserver.config.loader.with_store_nodes`); with ``written``, only those nodes are checked
        again (the others were, against the same files). A node that fails the checks under this config
        (its profile is not in this replica's config, say) is left out and named in the returned lines;
        with ``strict`` (a start, a reload: the files changed), a store node whose name or claim a file node
        now has refuses the whole config instead: raises :class:`~bootserver.errors.FileNodeError` or
        :class:`~bootserver.errors.NodeConflictError`, naming both origins."""
        nodes = {n: node for n, (_, _, node) in self.nodes.items() if node is not None}
        skipped = [f"store node {n} is not served: {e}" for n, e in sorted(self._errors.items())]
        check = None if written is None else [n for n in written if n in nodes]
        for _ in range(len(nodes) + 1):
            try:
                return with_store_nodes(files, nodes, written=check), skipped
            except (FileNodeError, NodeConflictError, NodeCheckError) as e:
                if strict and not isinstance(e, NodeCheckError):
                    raise
                bad = e.node if e.node in nodes else None
                if bad is None:
                    raise
                del nodes[bad]
                if check is not None:
                    check = [n for n in check if n != bad]
                skipped.append(f"store node {bad} is not served: {e}")
        raise AssertionError("unreachable")
