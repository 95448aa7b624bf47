"""``bootserver nodes``: the fleet's stages (the default, ``list``), a node's events (``show``), a boot
that installs again (``reinstall``), the machines that matched no node (``discovered``) and making one a
node (``adopt``): one argparse sub-subcommand each."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import Config
from ..inventory import inventory
from .common import node, opened_store, opened_with_store

if TYPE_CHECKING:
    from .common import Subparsers


def listed(args: argparse.Namespace, config: Config) -> int:
    """A table of every node's stage and how long ago."""
    from ..fleet import read_fleet
    from ..nodes_view import format_table

    async def run() -> str:
        async with opened_with_store(config) as (store, merged):
            return format_table(await read_fleet(merged, store), time.time())

    sys.stdout.write(asyncio.run(run()))
    return 0


def show(args: argparse.Namespace, config: Config) -> int:
    """The node's events, after a ``device:`` line when ``provision`` recorded its device. A node no
    longer configured (a store node deleted) shows the history it left."""
    from ..nodes_view import format_events

    async def run() -> str:
        async with opened_with_store(config) as (store, merged):
            name = args.node
            if name not in merged.nodes and not (await store.node(name)).last_event:
                node(inventory(merged), name)  # no such node, and no history: the usual error
            device = await store.device(name)  # what provision recorded, if anything
            head = "" if device is None else (f"device: {device.get('provider', 'equinix')} "
                                              f"{device.get('id', '-')} {device.get('state', '-')}\n")
            return head + format_events(await store.events(name), await store.node(name), store.keep_events)

    sys.stdout.write(asyncio.run(run()))
    return 0


def reinstall(args: argparse.Namespace, config: Config) -> int:
    """Mark each node for reinstall: its next boot installs again."""
    from ..timeline import Record

    async def run() -> str:
        async with opened_with_store(config) as (store, merged):
            names = [node(inventory(merged), name) for name in args.nodes]
            out = []
            for one in names:
                await store.record(Record(one.name, "reinstall", one.mode, time.time(),
                                          real_config=one.ignition is not None))
                out.append(f"{one.name}: marked for reinstall; its next boot installs again\n")
            return "".join(out)

    sys.stdout.write(asyncio.run(run()))
    return 0


def discovered(args: argparse.Namespace, config: Config) -> int:
    """The machines that matched no node and wait to be adopted."""
    from ..adoption import lease_evidence
    from ..nodes_view import format_discovered

    async def run() -> str:
        async with opened_store(config) as store:
            return format_discovered(await store.discovered(), time.time(),
                                     lambda mac: lease_evidence(config, mac))

    sys.stdout.write(asyncio.run(run()))
    return 0


def adopt(args: argparse.Namespace, config: Config) -> int:
    """Make a discovered machine a node (:func:`bootserver.adoption.adopt`) and reload the server."""
    from ..adoption import Adopted
    from ..adoption import adopt as adopt_machine

    if args.selectable_anywhere:
        print(f"bootserver: warning: node {args.name} is selectable from any address: whoever names its MAC or "
              "UUID gets its script, stub and config (and marks it installed)", file=sys.stderr)

    async def run() -> Adopted:
        async with opened_store(config) as store:
            return await adopt_machine(config, store, args.machine, name=args.name, profile=args.profile,
                                       file=Path(args.file) if args.file else None,
                                       addresses=args.addresses and [a for a in args.addresses.split(",")
                                                                     if a.strip()],
                                       anywhere=args.selectable_anywhere, into_store=args.file is None)

    done = asyncio.run(run())
    print(f"{done.name}: adopted machine {done.machine.mac}" + (f" (uuid {done.machine.uuid})" if done.machine.uuid
                                                                else "")
          + (f" into {done.file}" if done.file is not None else " into the state store"))
    print(f"{done.name}: {done.outcome}")
    return 0


def apply(args: argparse.Namespace, config: Config) -> int:
    """Create or update the store nodes of a YAML file (``-``: standard input), all or nothing: one line
    per node, ``NAME created|updated|unchanged``."""
    from ..node_writes import apply_nodes, read_nodes

    specs = read_nodes(args.file, sys.stdin)
    source = "<stdin>" if args.file == "-" else args.file

    async def run() -> str:
        async with opened_store(config) as store:
            done = await apply_nodes(config, store, specs, source=source)
        return "".join(f"{a.name} {a.outcome}\n" for a in done)

    sys.stdout.write(asyncio.run(run()))
    return 0


def delete(args: argparse.Namespace, config: Config) -> int:
    """Delete store nodes, all or nothing: one line per node, ``NAME deleted``."""
    from ..node_writes import delete_nodes

    async def run() -> str:
        async with opened_store(config) as store:
            done = await delete_nodes(config, store, args.nodes)
        return "".join(f"{c.node} deleted\n" for c in done)

    sys.stdout.write(asyncio.run(run()))
    return 0


def export(args: argparse.Namespace, config: Config) -> int:
    """The store's nodes as YAML that ``nodes apply`` takes back unchanged."""
    from ..node_writes import export_yaml

    async def run() -> str:
        async with opened_store(config) as store:
            return export_yaml(await store.inventory())

    sys.stdout.write(asyncio.run(run()))
    return 0


def add(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Register ``nodes`` and its actions."""
    p = sub.add_parser("nodes", parents=[common], help="show each node's boot stage; mark nodes for reinstall; "
                       "list and adopt discovered machines",
                       description="Without an action: a table of every node's stage and how long ago. "
                       "'show NODE': the node's events. 'reinstall NODE...': the next boot installs again. "
                       "'apply -f FILE': create or update nodes in the state store (every replica serves "
                       "them within 2 s); 'delete NODE...': remove them; 'export': print them as YAML. "
                       "'discovered': the machines that matched no node and wait to be adopted. "
                       "'adopt MAC|UUID --name NAME --profile PROFILE [--file [PATH]]': make one a node "
                       "in the state store (with --file: in a file its include: names, default "
                       "nodes.d/NAME.yaml, and reload the server).")
    p.set_defaults(func=listed, action="list")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    a = actions.add_parser("list", parents=[common], help="a table of every node's stage (the default)")
    a.set_defaults(func=listed)
    a = actions.add_parser("show", parents=[common], help="a node's events")
    a.add_argument("node", metavar="NODE")
    a.set_defaults(func=show)
    a = actions.add_parser("reinstall", parents=[common], help="the next boot of each node installs again")
    a.add_argument("nodes", nargs="+", metavar="NODE")
    a.set_defaults(func=reinstall)
    a = actions.add_parser("apply", parents=[common], help="create or update nodes in the state store from a "
                           "YAML file (all or nothing)")
    a.add_argument("-f", "--file", required=True, metavar="FILE",
                   help="YAML with a nodes: mapping, as in the config ('-': standard input)")
    a.set_defaults(func=apply)
    a = actions.add_parser("delete", parents=[common], help="delete nodes from the state store (all or nothing)")
    a.add_argument("nodes", nargs="+", metavar="NODE")
    a.set_defaults(func=delete)
    a = actions.add_parser("export", parents=[common], help="the state store's nodes as YAML for nodes apply")
    a.set_defaults(func=export)
    a = actions.add_parser("discovered", parents=[common], help="the machines that matched no node")
    a.set_defaults(func=discovered)
    a = actions.add_parser("adopt", parents=[common], help="make a discovered machine a node and reload the server")
    a.add_argument("machine", metavar="MAC|UUID")
    a.add_argument("--name", required=True, help="the node's name (and hostname)")
    a.add_argument("--profile", required=True, help="the node's profile")
    a.add_argument("--file", metavar="PATH", nargs="?", const="", help="write the node into a YAML file the "
                   "config's include: reads (PATH, default nodes.d/NAME.yaml beside the config) and reload the "
                   "server, instead of into the state store (the default: every replica serves it within 2 s)")
    a.add_argument("--addresses", metavar="IP[,CIDR...]", help="the addresses the node may boot from "
                   "(default: the one the machine reported from)")
    a.add_argument("--selectable-anywhere", action="store_true", help="hand the node's script to any "
                   "address that names its MAC or UUID (not only its addresses)")
    a.set_defaults(func=adopt)
