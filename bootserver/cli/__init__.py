"""The ``bootserver`` command line (argparse): one module per command group.

:mod:`~bootserver.cli.serve` (``serve``), :mod:`~bootserver.cli.images` (``sync-images``, ``loaders``),
:mod:`~bootserver.cli.render` (``render``, ``url``, ``iso``), :mod:`~bootserver.cli.dhcp` (``dhcp``),
:mod:`~bootserver.cli.keys` (``keys rotate``, ``tls init``, ``db migrate``), :mod:`~bootserver.cli.reload`
(``reload``, ``check-config``), :mod:`~bootserver.cli.provision` (``provision``, ``deprovision``,
``devices`` and the providers' options), :mod:`~bootserver.cli.nodes` (``nodes`` and its actions),
:mod:`~bootserver.cli.tokens` (``tokens create|list|revoke``, ``audit``: the fleet API's),
:mod:`~bootserver.cli.openshift` (``openshift import``);
:mod:`~bootserver.cli.common` holds what they share (the global options, the state store opened for one
command).

Every subcommand takes the global options ``--config PATH`` (fallback ``$BOOTSERVER_CONFIG``, then the
embedded default), ``--log-level`` and ``--log-format``, before or after the subcommand's name.
Exit status: 0 ok, 1 runtime failure, 2 bad usage or bad input; errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .. import __version__
from ..config import load_config
from ..errors import BootserverError
from ..logs import setup_logging
from . import dhcp, images, keys, nodes, openshift, provision, reload, render, serve, tokens
from .common import LOG_LEVELS, common_parser
from .provision import provider_options


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand of the user contract (each command's ``func`` takes
    the parsed arguments and the loaded config and returns the exit status)."""
    common = common_parser()
    parser = argparse.ArgumentParser(prog="bootserver", description="Boot CoreOS on bare metal through iPXE.",
                                     epilog="The global options work before or after COMMAND; one given "
                                     "after it wins.")
    parser.add_argument("--version", action="version", version=f"bootserver {__version__}")
    # also before the subcommand (`bootserver --config x.yaml check-config`); one given after it wins
    parser.add_argument("--config", dest="config_before", metavar="PATH", help="config file (default: "
                        "$BOOTSERVER_CONFIG, else the embedded default)")
    parser.add_argument("--log-level", dest="log_level_before", choices=LOG_LEVELS, help="(default info)")
    parser.add_argument("--log-format", dest="log_format_before", choices=["text", "json"],
                        help="log lines as text or as one JSON object per line (default text)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # in the order of `bootserver --help`
    serve.add(sub, common)
    images.add_sync(sub, common)
    render.add_render(sub, common)
    render.add_url(sub, common)
    render.add_iso(sub, common)
    images.add_loaders(sub, common)
    dhcp.add(sub, common)
    keys.add_keys(sub, common)
    keys.add_tls(sub, common)
    reload.add_reload(sub, common)
    reload.add_check(sub, common)
    provision.add(sub, common)
    nodes.add(sub, common)
    tokens.add_tokens(sub, common)
    tokens.add_audit(sub, common)
    openshift.add(sub, common)
    keys.add_db(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bootserver`` console script. Returns the exit status."""
    args = build_parser().parse_args(argv)
    # a global option given after COMMAND wins over the same one before it
    for name, default in (("config", None), ("log_level", "info"), ("log_format", "text")):
        if getattr(args, name, None) is None:
            setattr(args, name, getattr(args, f"{name}_before") or default)
    setup_logging(args.log_level, args.log_format)
    try:
        config = load_config(args.config)
        rc: int = args.func(args, config)
        sys.stdout.flush()  # here, where a closed pipe can still be caught
        return rc
    except BootserverError as e:
        print(f"bootserver: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `bootserver url NODE | head -1`: the reader went away; no traceback, and no second
        # error when Python flushes stdout at exit (the pattern of the Python docs, "Note on SIGPIPE")
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command killed by a closed pipe


__all__ = ["build_parser", "main", "provider_options"]
