"""``bootserver sync-images`` (the artifacts into the cache) and ``bootserver loaders`` (a TFTP root's
boot loaders)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import Config

if TYPE_CHECKING:
    from .common import Subparsers


def sync(args: argparse.Namespace, config: Config) -> int:
    """Download the profiles' artifacts into the cache (:func:`bootserver.sync.sync_images`)."""
    from ..sync import sync_images

    asyncio.run(sync_images(config, stream=args.stream, facility=args.facility, prune=args.prune))
    return 0


def loaders(args: argparse.Namespace, config: Config) -> int:
    """Write the TFTP root's loaders into ``args.dir``, one path per line."""
    from ..images.firmware import write_loaders

    arm64 = any(profile.arch == "aarch64" for profile in config.profiles.values())
    for path in write_loaders(Path(args.dir), config.cache_dir, config.server.effective_base_url, need_arm64=arm64):
        print(path)
    return 0


def add_sync(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Register ``sync-images``."""
    p = sub.add_parser("sync-images", parents=[common], help="download artifacts into the cache")
    p.add_argument("--stream", help="only this stream")
    p.add_argument("--facility", help="only the profiles of nodes in this facility; use its mirrors")
    p.add_argument("--prune", action="store_true",
                   help="then remove cached releases no profile references (keeps streams.*.keep_releases)")
    p.set_defaults(func=sync)


def add_loaders(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Register ``loaders``."""
    p = sub.add_parser("loaders", parents=[common], help="write the boot loaders of a TFTP root into a folder",
                       description="Write into DIR what a DHCP server's TFTP root hands machines' firmware: the "
                       "standalone arm64 GRUB (grubaa64.efi, client architecture 11), which sources this "
                       "server's /boot.grub?mac=..., and Debian's iPXE for x86_64 (ipxe.efi, undionly.kpxe). "
                       "One path per line on stdout.")
    p.add_argument("dir", metavar="DIR")
    p.set_defaults(func=loaders)
