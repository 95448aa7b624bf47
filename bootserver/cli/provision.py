"""Driving the providers: ``bootserver provision``, ``deprovision`` and ``devices``, each with the options
the providers declare (:func:`bootserver.providers.base.option`), added to their parsers here and handed
to :mod:`bootserver.provision` as one typed options object per provider."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..config import Config
from ..errors import InputError
from ..inventory import inventory
from .common import for_nodes, node, say

if TYPE_CHECKING:
    from .common import Subparsers


def provision(args: argparse.Namespace, config: Config) -> int:
    """Make each node boot from this server with its provider, then follow it to ``up``."""
    from .. import provision as provisioning

    config = for_nodes(config, list(args.nodes))
    nodes = [node(inventory(config), n) for n in dict.fromkeys(args.nodes)]
    if not args.timeout > 0:
        raise InputError(f"--timeout: must be a positive number of seconds, got {args.timeout:g}")
    base = config.server.effective_base_url
    host = urlsplit(base).hostname or ""
    if host == "localhost" or host.startswith("127.") or host == "::1":
        print(f"bootserver: warning: devices cannot reach the chain URL {base}/ipxe/{nodes[0].name}: "
              f"set server.base_url in {config.source}", file=sys.stderr)
    try:
        lines = provisioning.provision(config, provider_options(args), nodes, wait=not args.no_wait,
                                       policy=provisioning.WaitPolicy(timeout=args.timeout), say=say)
    except provisioning.DeviceFailed as e:
        print("\n".join(e.lines))
        raise
    print("\n".join(lines))
    return 0


def deprovision(args: argparse.Namespace, config: Config) -> int:
    """Undo ``provision`` for each node."""
    from .. import provision as provisioning

    config = for_nodes(config, list(args.nodes))
    nodes = [node(inventory(config), n) for n in dict.fromkeys(args.nodes)]
    print("\n".join(provisioning.deprovision(config, provider_options(args), nodes, say=say)))
    return 0


def devices(args: argparse.Namespace, config: Config) -> int:
    """List the devices of every provider in use, with their stage."""
    from .. import provision as provisioning

    lines = provisioning.devices(config, provider_options(args))
    if lines:
        print("\n".join(lines))
    return 0


def add_provider_options(command: str, parser: argparse.ArgumentParser) -> None:
    """Add to ``parser`` the options of ``command`` that the providers declare (the fields of their
    ``options_type``, :func:`bootserver.providers.base.option`): one group per options type, titled by
    the providers that share it (the BMC family's ``deprovision --grace``: Redfish and IPMI)."""
    from dataclasses import fields

    from ..providers.base import OPTION_KEY
    from ..providers.interface import provider_classes

    titles: dict[type[Any], list[str]] = {}
    for cls in provider_classes():
        titles.setdefault(cls.options_type, []).append(cls.options_title)
    for options_type, title in titles.items():
        specs = [(f.name, f.metadata[OPTION_KEY]) for f in fields(options_type)
                 if OPTION_KEY in f.metadata and command in f.metadata[OPTION_KEY].commands]
        if not specs:
            continue
        group = parser.add_argument_group(", ".join(title))
        exclusive: dict[str, Any] = {}
        for name, spec in specs:
            target: Any = group
            if spec.exclusive or spec.negatable:
                key = spec.exclusive or name
                if key not in exclusive:
                    exclusive[key] = group.add_mutually_exclusive_group()
                target = exclusive[key]
            kwargs: dict[str, Any] = {"dest": name, "help": spec.help}
            if spec.negatable:  # --x / --no-x, not both
                target.add_argument(*spec.flags, action="store_true", default=argparse.SUPPRESS, **kwargs)
                target.add_argument(*(f"--no-{flag[2:]}" for flag in spec.flags), dest=name,
                                    action="store_false", default=argparse.SUPPRESS)
                continue
            if spec.repeatable:
                kwargs["action"] = "append"
            if spec.metavar:
                kwargs["metavar"] = spec.metavar
            if spec.choices:
                kwargs["choices"] = list(spec.choices)
            if spec.parse:
                kwargs["type"] = spec.parse
            # not given: the attribute stays unset and the options dataclass applies its default
            target.add_argument(*spec.flags, default=argparse.SUPPRESS, **kwargs)


def provider_options(args: argparse.Namespace) -> dict[str, Any]:
    """Each provider's typed options (its ``options_type``) from a parsed command line: provider
    name -> options object; an option the command does not take, or that was not given, has its
    default. Built once per command, passed to :mod:`bootserver.provision`."""
    from dataclasses import fields

    from ..providers.base import OPTION_KEY
    from ..providers.interface import provider_classes

    out: dict[str, Any] = {}
    for cls in provider_classes():
        given = {}
        for f in fields(cls.options_type):
            if OPTION_KEY in f.metadata and hasattr(args, f.name):
                value = getattr(args, f.name)
                given[f.name] = tuple(value) if f.metadata[OPTION_KEY].repeatable else value
        out[cls.name] = cls.options_type(**given)
    return out


def add(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Register ``provision``, ``deprovision`` and ``devices``."""
    p = sub.add_parser("provision", parents=[common],
                       help="make each node boot from this server with its provider, and follow its install",
                       description="Each node's provider (profiles.<p>.provider / nodes.<n>.provider: equinix, "
                       "redfish, ipmi) makes it boot from this server; then the node timeline is followed until "
                       "the node is up (its system checked in; with checkin: false, installed in install mode "
                       "or running in live mode).")
    p.add_argument("nodes", nargs="+", metavar="NODE")
    p.add_argument("--no-wait", action="store_true", help="return once the devices are set up")
    p.add_argument("--timeout", type=float, default=1800.0, metavar="SECONDS",
                   help="give up waiting for up (or installed/running) after SECONDS (default 1800)")
    p.set_defaults(func=provision)
    add_provider_options("provision", p)
    p = sub.add_parser("deprovision", parents=[common], help="undo provision: delete the device or power it off")
    p.add_argument("nodes", nargs="+", metavar="NODE")
    p.set_defaults(func=deprovision)
    add_provider_options("deprovision", p)
    p = sub.add_parser("devices", parents=[common], help="list the devices bootserver manages, with their stage")
    p.set_defaults(func=devices)
    add_provider_options("devices", p)
