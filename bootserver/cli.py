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


def _duration_arg(value: str) -> int:
    from .signing import parse_duration

    try:
        return parse_duration(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _cmd_url(args: argparse.Namespace, config: Config) -> int:
    from .urls import Urls

    urls = Urls(config)
    node = _node(config, args.node)
    print(urls.chain(node, args.expires))
    print()
    sys.stdout.write(urls.userdata(node, args.expires))
    return 0


def _cmd_keys_rotate(args: argparse.Namespace, config: Config) -> int:
    from .signing import Keyring

    grace = config.server.signing.key_grace if args.grace is None else args.grace
    ring = Keyring.load_or_create(config.state_dir).rotate(grace)
    print(f"{ring.path}: new signing key; the previous key is accepted for {grace} more seconds")
    return 0


def _cmd_tls_init(args: argparse.Namespace, config: Config) -> int:
    from .tls import init_tls, san_names

    names = san_names([config.server.effective_base_url, config.server.https_base_url], args.name)
    paths = init_tls(config.state_dir / "tls", names, force=args.force)
    print(f"{paths['ca.crt'].parent}: CA and server certificate for {', '.join(names)}")
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
    p.add_argument("--facility", help="only the profiles of nodes in this facility")
    p.set_defaults(func=_cmd_sync)
    p = sub.add_parser("render", parents=[common], help="print what the server sends a node")
    p.add_argument("what", choices=["ipxe", "ignition"])
    p.add_argument("node")
    p.set_defaults(func=_cmd_render)
    p = sub.add_parser("url", parents=[common], help="print a node's chain URL and #!ipxe userdata")
    p.add_argument("node")
    p.add_argument("--expires", type=_duration_arg, metavar="DURATION",
                   help="validity, e.g. 24h or 7d (default server.signing.chain_ttl, 7d); rounded up to the hour")
    p.set_defaults(func=_cmd_url)
    p = sub.add_parser("keys", help="manage the URL signing keys in state_dir")
    ksub = p.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    k = ksub.add_parser("rotate", parents=[common], help="make a new signing key; the old one stays "
                        "valid for a grace period")
    k.add_argument("--grace", type=_duration_arg, metavar="DURATION",
                   help="how long the previous key is still accepted (default server.signing.key_grace, 24h)")
    k.set_defaults(func=_cmd_keys_rotate)
    p = sub.add_parser("tls", help="manage the HTTPS certificate")
    tsub = p.add_subparsers(dest="tls_command", required=True, metavar="ACTION")
    t = tsub.add_parser("init", parents=[common], help="create a CA and a server certificate in state_dir/tls")
    t.add_argument("--name", action="append", default=[], metavar="NAME",
                   help="extra DNS name or IP address for the certificate (repeatable)")
    t.add_argument("--force", action="store_true", help="replace existing files")
    t.set_defaults(func=_cmd_tls_init)
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
