"""``bootserver openshift import DIR``: an OpenShift install directory's hosts as nodes
(:mod:`bootserver.openshift_import`; the mapping is :mod:`bootserver.openshift`, docs/openshift.md)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import Config
from .common import opened_store

if TYPE_CHECKING:
    from .common import Subparsers


def import_dir(args: argparse.Namespace, config: Config) -> int:
    """Import the install directory: one line per node (created, updated, unchanged), then the reloads'
    outcome; each warning and each refusal on standard error, one line each."""
    from ..openshift import ClusterRefused
    from ..openshift_import import Imported, describe, import_cluster, import_to_store, read_install_dir

    install = read_install_dir(Path(args.dir), None if args.stream_json is None else Path(args.stream_json),
                               args.mode)
    options: dict[str, Any] = {"install_dev": args.install_dev, "bootstrap_mac": args.bootstrap_mac,
                               "bootstrap_bmc": args.bootstrap_bmc, "console": args.console,
                               "reload_timeout": args.timeout}

    async def to_store() -> Imported:
        async with opened_store(config) as store:
            return await import_to_store(config, store, install, Path(args.output), **options)

    try:
        if args.nodes_to_store:
            done = asyncio.run(to_store())
        else:
            done = import_cluster(config, install, Path(args.output), **options)
    except ClusterRefused as e:
        for line in e.problems:
            print(f"bootserver: {line}", file=sys.stderr)
        print(f"bootserver: {len(e.problems)} refused; nothing written", file=sys.stderr)
        return e.exit_code
    for line in done.warnings:
        print(f"bootserver: warning: {line}", file=sys.stderr)
    for line in describe(done):
        print(line)
    return 0


def add(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Register ``openshift`` and its action ``import``."""
    p = sub.add_parser("openshift", parents=[common], help="import an OpenShift install directory's hosts as nodes",
                       description="'import DIR --output FILE': read install-config.yaml and/or agent-config.yaml, "
                       "the role .ign files and rhcos.json of an openshift-install directory and write the "
                       "cluster's stream, profiles and nodes into FILE (which the config's include: must read), "
                       "then reload the running server (docs/openshift.md).")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    a = actions.add_parser("import", parents=[common], help="write the cluster's stream, profiles and nodes")
    a.add_argument("dir", metavar="DIR", help="the install directory")
    a.add_argument("--output", required=True, metavar="FILE", help="the file to write (the config's include: "
                   "must read it); BMC passwords go into FILE-without-suffix.passwords/, mode 0600")
    a.add_argument("--mode", choices=("upi", "agent"), help="upi: the role .ign files and rhcos.json; agent: "
                   "the agent's PXE files of `openshift-install agent create pxe-files` (DIR/boot-artifacts/), "
                   "served to the hosts' MACs alone (default: agent when DIR holds boot-artifacts/)")
    a.add_argument("--stream-json", metavar="FILE", help="the release's stream metadata (default DIR/rhcos.json, "
                   "from `openshift-install coreos print-stream-json`)")
    a.add_argument("--install-dev", metavar="DEVICE", help="the install device of hosts whose rootDeviceHints "
                   "name none (each is named in a warning: everything on it is wiped)")
    a.add_argument("--bootstrap-mac", metavar="MAC", help="the bootstrap machine's MAC (node bootstrap, "
                   "DIR/bootstrap.ign)")
    a.add_argument("--bootstrap-bmc", metavar="URL", help="the bootstrap machine's BMC (ipmi://, redfish://...)")
    a.add_argument("--console", metavar="KARG", help="the machines' serial console as a kernel argument "
                   "(console=ttyS1,115200n8), written as the profiles' console (default none)")
    a.add_argument("--nodes-to-store", action="store_true", help="put the nodes into the state store (their BMC "
                   "passwords sealed, as the fleet API keeps them); FILE keeps the stream and profiles")
    a.add_argument("--timeout", type=float, default=15.0, metavar="SECONDS",
                   help="how long to wait for the server's reload (default 15)")
    a.set_defaults(func=import_dir)
