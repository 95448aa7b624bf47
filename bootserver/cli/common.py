"""What the command groups of :mod:`bootserver.cli` share: the global options, a node's name checked
against the config, the option types, the progress lines, and the state store opened for one command.

Each command module imports the modules it runs inside its functions, on purpose: a command loads only
what it uses (``bootserver nodes`` loads no aiohttp application, ``check-config`` no state store).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from ..config import Config, ResolvedNode
from ..errors import UnknownNodeError
from ..inventory import Inventory

if TYPE_CHECKING:
    from ..signing import Keyring
    from ..state import StateStore

    #: What each command module registers its commands with (``build_parser``'s subparsers).
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

LOG_LEVELS = ["debug", "info", "warning", "error"]


def common_parser() -> argparse.ArgumentParser:
    """The global options every subcommand takes after its name (``--config``, ``--log-level``,
    ``--log-format``), as a parent parser. Not given, they stay unset (``argparse.SUPPRESS``), so a
    sub-subcommand never overwrites one given before it; :func:`bootserver.cli.main` fills the defaults."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="PATH", default=argparse.SUPPRESS,
                        help="config file (default: $BOOTSERVER_CONFIG, else the embedded default)")
    common.add_argument("--log-level", choices=LOG_LEVELS, default=argparse.SUPPRESS, help="(default info)")
    common.add_argument("--log-format", choices=["text", "json"], default=argparse.SUPPRESS,
                        help="log lines as text or as one JSON object per line (default text)")
    return common


def node(nodes: Inventory, arg: str) -> ResolvedNode:
    """The node a command's argument ``arg`` names in a config's inventory (:func:`bootserver.inventory.inventory`),
    as resolved there; else :class:`UnknownNodeError` (exit 2) naming the config file."""
    found = nodes.get(arg)
    if found is None:
        raise UnknownNodeError(f"{nodes.source}: nodes: no node {arg!r}")
    return found


def for_nodes(config: Config, names: list[str]) -> Config:
    """``config``, with the state store's nodes merged in when one of ``names`` is not a node of its
    files (a store node: ``render``, ``url``, ``iso``, ``provision`` name it as a file node), so a
    command about file nodes never opens the store. Raises what
    :func:`bootserver.node_writes.with_store` raises."""
    if all(name in config.nodes for name in names):
        return config
    import asyncio

    from ..node_writes import with_store

    async def merged() -> Config:
        async with opened_store(config) as store:
            return await with_store(config, store)

    return asyncio.run(merged())


def duration_arg(value: str) -> int:
    """An option's duration (``24h``, ``7d``: :func:`bootserver.values.parse_duration`) in seconds."""
    from ..values import parse_duration

    try:
        return parse_duration(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def say(node: str, message: str) -> None:
    """A progress line of a command about ``node``, on standard error."""
    print(f"bootserver: {node}: {message}", file=sys.stderr, flush=True)


@contextlib.asynccontextmanager
async def opened_store(config: Config) -> AsyncIterator[StateStore]:
    """The config's state store (:func:`bootserver.state.backends.open_store`: sqlite in ``state_dir``,
    or the ``state_store`` database), started for the block and closed after it, also on error. Raises
    what :meth:`~bootserver.state.StateStore.start` raises."""
    from ..state.backends import open_store

    store = open_store(config)
    await store.start()
    try:
        yield store
    finally:
        await store.close()


@contextlib.asynccontextmanager
async def opened_with_store(config: Config) -> AsyncIterator[tuple[StateStore, Config]]:
    """:func:`opened_store` and the config with the store's nodes
    (:func:`bootserver.node_writes.with_store`) for the block."""
    from ..node_writes import with_store

    async with opened_store(config) as store:
        yield store, await with_store(config, store)


async def keyring(config: Config) -> Keyring:
    """The signing keys of the config's state store (current first), read once; the store is closed."""
    async with opened_store(config) as store:
        return store.keyring()
