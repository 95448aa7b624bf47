"""``bootserver dhcp``: the DHCP and TFTP engine (dnsmasq) of the ``dhcp:`` mapping, or its configuration."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING

from ..config import Config

if TYPE_CHECKING:
    from .common import Subparsers


def dhcp(args: argparse.Namespace, config: Config) -> int:
    """Run the engine in the foreground (:func:`bootserver.dhcp.engine.run_engine`), or ``--print`` its
    configuration."""
    from ..dhcp.engine import print_config, run_engine

    if args.print is not None:
        sys.stdout.write(print_config(config, args.print))
        return 0
    return asyncio.run(run_engine(config))


def add(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Register ``dhcp``."""
    p = sub.add_parser("dhcp", parents=[common], help="run the DHCP and TFTP engine (dnsmasq) of the dhcp: "
                       "mapping in the foreground, or print its configuration")
    p.add_argument("--print", nargs="?", const="dnsmasq", choices=("dnsmasq", "kea", "kea6"), default=None,
                   help="print the configuration and exit: dnsmasq options (the default), kea: Kea's Dhcp4 JSON "
                   "for kea-dhcp4, kea6: Kea's Dhcp6 JSON for kea-dhcp6 (with dhcp.ipv6)")
    p.set_defaults(func=dhcp)
