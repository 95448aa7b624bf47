"""``bootserver serve``: the HTTP server, in this process or ``--workers N`` forked ones."""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING

from ..config import Config, check_local_inputs, no_machine_boots
from ..logs import setup_logging

if TYPE_CHECKING:
    from .common import Subparsers


def serve(args: argparse.Namespace, config: Config) -> int:
    """Check the local inputs and the state store, add the store's nodes, then serve until stopped (exit 0)."""
    from ..node_writes import serving_config
    from ..state.backends import prepare_store

    check_local_inputs(config)
    workers = config.server.workers if args.workers is None else args.workers
    # a damaged timeline or an unreachable database stops the server here, with or without --workers
    prepare_store(config)
    # the state store's nodes beside the files' (a file that now names a store node: one line, exit 2)
    config, skipped = serving_config(config)
    for line in skipped:
        logging.getLogger("bootserver.cli").error("%s", line)
    if workers > 1:
        setup_logging(args.log_level, args.log_format, pid=True)
    warning = no_machine_boots(config)
    if warning is not None:
        logging.getLogger("bootserver.cli").warning("%s", warning)
    if workers > 1:
        from ..workers import serve_workers

        return serve_workers(config, workers)
    from ..http.listeners import run

    run(config)
    return 0


def workers_arg(value: str) -> int:
    """``--workers N``: a number of processes from 1 to 256."""
    try:
        n = int(value)
    except ValueError:
        n = 0
    if not 1 <= n <= 256:
        raise argparse.ArgumentTypeError(f"expected a number of processes from 1 to 256, got {value!r}")
    return n


def add(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Register ``serve``."""
    p = sub.add_parser("serve", parents=[common], help="run the HTTP server")
    p.add_argument("--workers", type=workers_arg, metavar="N",
                   help="serve with N worker processes sharing the ports (default server.workers, 1)")
    p.set_defaults(func=serve)
