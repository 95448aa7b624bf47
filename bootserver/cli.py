"""The ``bootserver`` command line (argparse).

Every subcommand takes ``--config PATH`` (fallback ``$BOOTSERVER_CONFIG``, then the embedded default).
Exit status: 0 ok, 1 runtime failure, 2 bad usage or bad input; errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
from typing import Callable, Sequence

from . import __version__
from .config import Config, load_config
from .errors import BootserverError, UnknownNodeError
from .logs import setup_logging

Command = Callable[[argparse.Namespace, Config], int]


def _cmd_serve(args: argparse.Namespace, config: Config) -> int:
    from .web import run

    run(config)
    return 0


def _cmd_sync(args: argparse.Namespace, config: Config) -> int:
    from .sync import sync_images

    asyncio.run(sync_images(config, stream=args.stream, facility=args.facility))
    return 0


def _node(config: Config, name: str) -> str:
    if name not in config.nodes:
        raise UnknownNodeError(f"{config.source}: nodes: no node {name!r}")
    return name


def _cmd_render(args: argparse.Namespace, config: Config) -> int:
    from .fetch import client_session
    from .service import BootService

    svc = BootService(config)
    node = _node(config, args.node)
    if args.what == "ipxe":
        async def script() -> str:
            async with client_session() as session:
                return await svc.boot_script(node, session)

        sys.stdout.write(asyncio.run(script()))
    else:
        sys.stdout.buffer.write(svc.stub(node))
    sys.stdout.flush()
    return 0


def _cmd_url(args: argparse.Namespace, config: Config) -> int:
    from .urls import Urls

    urls = Urls(config)
    node = _node(config, args.node)
    print(urls.chain(node))
    print()
    sys.stdout.write(urls.userdata(node))
    return 0


def _cmd_check(args: argparse.Namespace, config: Config) -> int:
    print(f"{config.source}: ok: {len(config.streams)} streams, {len(config.profiles)} profiles, "
          f"{len(config.nodes)} nodes")
    return 0


def _cmd_nodes(args: argparse.Namespace, config: Config) -> int:
    import time

    from .timeline import Timeline, format_table

    timeline = Timeline(config.state_dir)
    try:
        if args.action == "reinstall":
            for name in args.nodes:
                _node(config, name)
            for name in args.nodes:
                mode = config.profiles[config.nodes[name].profile].mode
                timeline.record(name, "reinstall", mode=mode)
                print(f"{name}: marked for reinstall; its next boot installs again")
            return 0
        if args.action == "show":
            node = _node(config, args.nodes[0])
            for e in timeline.events(node):
                when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.at))
                detail = " ".join(f"{k}={v}" for k, v in e.detail.items())
                print(f"{when}  {e.event:<20} {e.ip or '-':<15} {detail}".rstrip())
            return 0
        states = timeline.nodes(list(config.nodes))
        profiles = {n: node.profile for n, node in config.nodes.items()}
        sys.stdout.write(format_table(states, time.time(), profiles))
        return 0
    finally:
        timeline.close()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand of the user contract."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="PATH", help="config file (default: $BOOTSERVER_CONFIG, "
                        "else the embedded default)")
    common.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    common.add_argument("--log-format", default="text", choices=["text", "json"],
                        help="log lines as text or as one JSON object per line (default text)")
    parser = argparse.ArgumentParser(prog="bootserver", description="Boot CoreOS on bare metal through iPXE.")
    parser.add_argument("--version", action="version", version=f"bootserver {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("serve", parents=[common], help="run the HTTP server")
    p.set_defaults(func=_cmd_serve)
    p = sub.add_parser("sync-images", parents=[common], help="download artifacts into the cache")
    p.add_argument("--stream", help="only this stream")
    p.add_argument("--facility", help="only the profiles of nodes in this facility")
    p.set_defaults(func=_cmd_sync)
    p = sub.add_parser("render", parents=[common], help="print what the server sends a node")
    p.add_argument("what", choices=["ipxe", "ignition"])
    p.add_argument("node")
    p.set_defaults(func=_cmd_render)
    p = sub.add_parser("url", parents=[common], help="print a node's chain URL and #!ipxe userdata")
    p.add_argument("node")
    p.set_defaults(func=_cmd_url)
    p = sub.add_parser("check-config", parents=[common], help="check the config and exit")
    p.set_defaults(func=_cmd_check)
    p = sub.add_parser("nodes", parents=[common], help="show each node's boot stage; mark nodes for reinstall",
                       description="Without an action: a table of every node's stage and how long ago. "
                       "'show NODE': the node's events. 'reinstall NODE...': the next boot installs again.")
    p.add_argument("action", nargs="?", choices=["list", "show", "reinstall"], default="list")
    p.add_argument("nodes", nargs="*", metavar="NODE")
    p.set_defaults(func=_cmd_nodes)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bootserver`` console script. Returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "nodes":
        wanted = {"list": (0, 0), "show": (1, 1), "reinstall": (1, None)}[args.action]
        if len(args.nodes) < wanted[0] or (wanted[1] is not None and len(args.nodes) > wanted[1]):
            parser.error(f"nodes {args.action}: expected "
                         + ("no NODE" if wanted[1] == 0 else "one NODE" if wanted[1] == 1 else "NODE..."))
    setup_logging(args.log_level, args.log_format)
    config = None
    try:
        config = load_config(args.config)
        return args.func(args, config)
    except BootserverError as e:
        print(f"bootserver: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except sqlite3.Error as e:
        where = config.state_dir if config is not None else "state_dir"
        print(f"bootserver: {where}: node timeline: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
