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
    """Write the TFTP root's loaders into ``args.dir``, one path per line: the arm64 GRUB and Debian's iPXE
    builds (:func:`bootserver.images.firmware.write_loaders`), and for ``secure_boot`` nodes their streams'
    signed shim and GRUB, the generic GRUB config and each node's own config with its release's kernel and
    initramfs (:func:`bootserver.images.netsecure.write_secureboot_loaders`)."""
    from ..images.firmware import write_loaders
    from ..images.netsecure import TftpNode, loader_set, secure_boot_streams, write_secureboot_loaders

    arm64 = any(profile.arch == "aarch64" for profile in config.profiles.values())
    base = config.server.base_url_for(4)  # GRUB's http fetches IPv4 and names only
    for path in write_loaders(Path(args.dir), config.cache_dir, base, need_arm64=arm64):
        print(path)
    streams = secure_boot_streams(config)
    if streams:  # the signed shim and GRUB of each secure_boot stream's release, from its live ISO
        from ..runtime import Runtime
        from ..service import BootService

        async def fetch() -> tuple[dict[str, Path], list[TftpNode]]:
            async with Runtime(config) as runtime:
                svc = BootService(config, runtime)
                sets = {s: await loader_set(config, svc.desk.catalog, svc.desk.artifacts, s) for s in streams}
                nodes = []  # each secure_boot node's own config, for a vendor GRUB without http
                for node in svc.inventory.values():
                    if node.stream in streams and node.secure_boot:
                        release, (_, kernel, initramfs), kargs = await svc.secure_boot_parts(node)
                        nodes += [TftpNode(node.name, mac, release.stream, release.version, kernel, initramfs,
                                           kargs) for mac in node.mac]
                return sets, nodes

        sets, nodes = asyncio.run(fetch())
        for path in write_secureboot_loaders(Path(args.dir), sets, base, nodes):
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
