"""The server's secrets and its store's schema: ``bootserver keys rotate`` (the URL signing keys),
``bootserver tls init`` (the private CA and the server certificate), ``bootserver db migrate`` (the
state store's schema and the old device record files)."""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING

from ..config import Config
from .common import duration_arg, opened_store

if TYPE_CHECKING:
    from .common import Subparsers


def grace_arg(value: str) -> int:
    """A ``keys rotate --grace``: a duration, or ``0`` (the previous key stops at once: every URL it
    signed, device chain URLs included, is revoked)."""
    return 0 if value.strip() in ("0", "0s", "0m", "0h", "0d") else duration_arg(value)


def keys_rotate(args: argparse.Namespace, config: Config) -> int:
    """Make a new signing key; the previous one is accepted for ``--grace`` more seconds."""
    grace = config.server.signing.key_grace if args.grace is None else args.grace

    async def rotate() -> str:
        async with opened_store(config) as store:
            ring = await store.rotate_keys(grace)
            return str(ring.path) if ring.path is not None else store.name

    where = asyncio.run(rotate())
    print(f"{where}: new signing key; the previous key is accepted for {grace} more seconds")
    return 0


def tls_init(args: argparse.Namespace, config: Config) -> int:
    """Create the CA and the server certificate in ``state_dir/tls``."""
    from ..tls import init_tls, san_names

    names = san_names([config.server.effective_base_url, config.server.https_base_url], args.name)
    paths = init_tls(config.state_dir / "tls", names, force=args.force)
    print(f"{paths['ca.crt'].parent}: CA and server certificate for {', '.join(names)}")
    return 0


def db_migrate(args: argparse.Namespace, config: Config) -> int:
    """Create or upgrade the state store's schema and move the old device record files in."""
    from ..state.backends import migrate_store

    name, before, after, moved = asyncio.run(migrate_store(config))
    print(f"{name}: schema at version {after}" + (f" (was {before})" if before != after else " (up to date)"))
    print("\n".join(moved) if moved else f"{config.state_dir / 'nodes'}: no device record files, nothing to move")
    return 0


def add_keys(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Register ``keys rotate``."""
    p = sub.add_parser("keys", help="manage the URL signing keys in state_dir")
    ksub = p.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    k = ksub.add_parser("rotate", parents=[common], help="make a new signing key; the old one stays "
                        "valid for a grace period")
    k.add_argument("--grace", type=grace_arg, metavar="DURATION",
                   help="how long the previous key is still accepted (default server.signing.key_grace, 24h); "
                   "0 revokes every URL it signed at once")
    k.set_defaults(func=keys_rotate)


def add_tls(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Register ``tls init``."""
    p = sub.add_parser("tls", help="manage the HTTPS certificate")
    tsub = p.add_subparsers(dest="tls_command", required=True, metavar="ACTION")
    t = tsub.add_parser("init", parents=[common], help="create a CA and a server certificate in state_dir/tls")
    t.add_argument("--name", action="append", default=[], metavar="NAME",
                   help="extra DNS name or IP address for the certificate (repeatable)")
    t.add_argument("--force", action="store_true", help="replace existing files")
    t.set_defaults(func=tls_init)


def add_db(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Register ``db migrate``."""
    p = sub.add_parser("db", help="manage the state store's schema")
    dsub = p.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    d = dsub.add_parser("migrate", parents=[common], help="create or upgrade the state store's schema (the "
                        "sqlite timeline in state_dir, or the state_store database), move the device records "
                        "of state_dir/nodes/*.json into it (once), and exit")
    d.set_defaults(func=db_migrate)
