"""The ``bootserver`` command line (argparse).

Every subcommand takes ``--config PATH`` (fallback ``$BOOTSERVER_CONFIG``, then the embedded default).
Exit status: 0 ok, 1 runtime failure, 2 bad usage or bad input; errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Callable, Sequence

from . import __version__
from .config import Config, load_config
from .errors import BootserverError, UnknownNodeError

Command = Callable[[argparse.Namespace, Config], int]


def _cmd_serve(args: argparse.Namespace, config: Config) -> int:
    from .web import run

    run(config)
    return 0


def _cmd_sync(args: argparse.Namespace, config: Config) -> int:
    from .sync import sync_images

    asyncio.run(sync_images(config, stream=args.stream, facility=args.facility, prune=args.prune))
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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand of the user contract."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="PATH", help="config file (default: $BOOTSERVER_CONFIG, "
                        "else the embedded default)")
    common.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser = argparse.ArgumentParser(prog="bootserver", description="Boot CoreOS on bare metal through iPXE.")
    parser.add_argument("--version", action="version", version=f"bootserver {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("serve", parents=[common], help="run the HTTP server")
    p.set_defaults(func=_cmd_serve)
    p = sub.add_parser("sync-images", parents=[common], help="download artifacts into the cache")
    p.add_argument("--stream", help="only this stream")
    p.add_argument("--facility", help="only the profiles of nodes in this facility; use its mirrors")
    p.add_argument("--prune", action="store_true",
                   help="then remove cached releases no profile references (keeps streams.*.keep_releases)")
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bootserver`` console script. Returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config)
        return args.func(args, config)
    except BootserverError as e:
        print(f"bootserver: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
