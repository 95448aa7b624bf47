"""The config from the command line: ``bootserver check-config`` (check it as a reload would) and
``bootserver reload`` (check it, then have the running server, and ``bootserver dhcp``, read it again)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from ..config import Config, no_machine_boots

if TYPE_CHECKING:
    from .common import Subparsers


def check(args: argparse.Namespace, config: Config) -> int:
    """Check the config as a reload checks it (and the ``dhcp:`` mapping against this machine); one line."""
    from ..reload import check_config, summary
    from ..values import counted

    check_config(config)  # what a reload checks too
    from ..images.netsecure import check_secure_boot_isos

    for stream in check_secure_boot_isos(config):  # the secure_boot nodes' streams whose metadata is at hand
        print(f"bootserver: warning: stream {stream}: its metadata is not at hand (no file, not synced): whether its "
              "release offers the live ISO its secure_boot nodes need is not checked (run sync-images, then "
              "check-config)", file=sys.stderr)
    taken = None
    if config.dhcp is not None:
        from ..dhcp.reservations import check_dhcp, unselectable
        from ..dhcp.rules import secure_boot_unlisted

        taken = check_dhcp(config)  # against this machine's interface: where `bootserver dhcp` runs
        for line in (*unselectable(config, taken), *secure_boot_unlisted(config)):
            print(f"bootserver: warning: {line}", file=sys.stderr)
    warning = no_machine_boots(config)
    if warning is not None:
        print(f"bootserver: warning: {warning}", file=sys.stderr)
    included = len(set(config.origins.values()) - {config.source})
    source, held = summary(config).split(": ", 1)
    print(f"{source}: ok: {held}" + (f" ({counted(included, 'included file')}, include: "
                                     f"{', '.join(config.includes)})" if config.includes else ""))
    if config.dhcp is not None and taken is not None:
        fixed = sum(1 for r in taken if r.ipv4 is not None)
        print(f"{source}: dhcp: {config.dhcp.mode} mode on {config.dhcp.interface}, "
              f"{counted(len(taken), 'reservation')}" + (f" ({fixed} with an address)" if config.dhcp.full else ""))
    return 0


def reload(args: argparse.Namespace, config: Config) -> int:
    """Check the config, reload the running server (:func:`bootserver.reload.reload_server`) and signal
    ``bootserver dhcp`` when it runs; print both outcomes (or, with a ``dhcp:`` mapping, that no engine
    runs): exit 0 reloaded, 2 refused, 1 no outcome within ``--timeout``."""
    from ..reload import check_config, reload_server

    check_config(config)  # an invalid config is refused here, with its file and key; nothing is sent
    sent = time.time()
    pid, status = reload_server(config, args.timeout)
    engine = signal_dhcp(config)
    if status is None:
        print(f"bootserver: sent SIGHUP to bootserver serve (process {pid}); no outcome within {args.timeout:g} s: "
              "see its log", file=sys.stderr)
        return 1
    if status.get("result") != "ok":
        print(f"bootserver: reload refused, the running config stays: {status.get('message')}", file=sys.stderr)
        return 2
    print(f"reloaded {status.get('message')}")
    if engine is None:
        if config.dhcp is not None:  # a dhcp: mapping whose engine is not running here: say so, not silence
            from ..dhcp.engine import not_running

            print(not_running(config))
        return 0
    from ..dhcp.engine import engine_outcome

    code, line = engine_outcome(config, engine, sent, args.timeout)
    print(line if code == 0 else f"bootserver: {line}", file=sys.stdout if code == 0 else sys.stderr)
    return code


def signal_dhcp(config: Config) -> int | None:
    """SIGHUP to a running ``bootserver dhcp`` of this state_dir (its reservations follow the config)."""
    if config.dhcp is None:
        return None
    from ..dhcp.engine import signal_engine

    return signal_engine(config)


def add_reload(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Register ``reload``."""
    p = sub.add_parser("reload", parents=[common], help="make the running server read its config again",
                       description="Check the config as check-config does, then signal the bootserver serve of "
                       "its state_dir (state_dir/serve.pid) to reload it, and wait for the outcome. Same as "
                       "SIGHUP or `systemctl reload bootserver`.")
    p.add_argument("--timeout", type=float, default=15.0, metavar="SECONDS",
                   help="how long to wait for the server's outcome (default 15)")
    p.set_defaults(func=reload)


def add_check(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Register ``check-config``."""
    p = sub.add_parser("check-config", parents=[common], help="check the config and exit")
    p.set_defaults(func=check)
