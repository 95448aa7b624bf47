"""What the server hands a node, from the command line: ``bootserver render`` (its iPXE script, GRUB
config or Ignition stub), ``bootserver url`` (its signed chain URL and ``#!ipxe`` userdata, or its boot
image's URL) and ``bootserver iso`` (its boot image, built by the one builder that also answers
``GET /iso/NODE.iso``: :meth:`bootserver.service.BootService.image`)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import Config
from ..errors import InputError
from ..inventory import inventory
from .common import duration_arg, for_nodes, keyring, node

if TYPE_CHECKING:
    from ..images.overlay import NodeImage
    from .common import Subparsers


def render(args: argparse.Namespace, config: Config) -> int:
    """Print the node's iPXE script, GRUB config or Ignition stub, as the server sends it."""
    from ..runtime import Runtime
    from ..service import BootService

    if args.what != "ignition" and args.ignition_version is not None:
        raise InputError(f"render {args.what}: --version applies to render ignition only")
    config = for_nodes(config, [args.node])
    name = node(inventory(config), args.node).name
    # what a machine asking from an address of that family gets (its base URL, its kargs); nothing recorded
    client = {4: "0.0.0.0", 6: "::", None: None}[args.family]

    async def rendered() -> bytes:
        async with Runtime(config) as runtime:
            svc = BootService(config, runtime)
            if args.what == "ipxe":
                return (await svc.script(name, client=client)).encode()
            if args.what == "grub":
                return (await svc.script(name, grub=True, client=client)).encode()
            return await svc.stub(name, version=args.ignition_version, client=client)

    sys.stdout.buffer.write(asyncio.run(rendered()))
    sys.stdout.flush()
    return 0


def url(args: argparse.Namespace, config: Config) -> int:
    """Print the node's signed chain URL and ``#!ipxe`` userdata (or, ``--iso``, its boot image's URL)."""
    from ..urls import Urls

    config = for_nodes(config, [args.node])
    name = node(inventory(config), args.node).name
    ring = asyncio.run(keyring(config))
    urls = Urls(config, keys=lambda: ring)
    if args.iso:
        chain = urls.iso(name, args.expires)
        print(chain)
    else:
        chain = urls.chain(name, args.expires)
        print(chain)
        print()
        sys.stdout.write(urls.userdata(name, args.expires))
    expires = datetime.fromtimestamp(urls.expiry_of(chain), UTC)
    what = "this URL expires" if args.iso else "these URLs expire"
    print(f"bootserver: {name}: {what} {expires:%Y-%m-%d %H:%M} UTC; `bootserver keys rotate` "
          "revokes them sooner (once its grace ends)", file=sys.stderr)
    return 0


def iso(args: argparse.Namespace, config: Config) -> int:
    """Write the node's boot image to ``--output`` (default ``NODE.iso``): the same bytes as
    ``GET /iso/NODE.iso`` (:meth:`bootserver.service.BootService.image`)."""
    from ..images.network import boot_network
    from ..runtime import Runtime
    from ..service import BootService

    config = for_nodes(config, [args.node])
    resolved = node(inventory(config), args.node)
    name = resolved.name

    async def build() -> tuple[NodeImage, str, float]:
        async with Runtime(config) as runtime:
            if resolved.secure_boot:
                how = f"Secure Boot: the signed shim, GRUB and kernel of stream {resolved.stream}"
            else:  # bad input fails before anything is built; network: provider reads the device record
                device = (await runtime.state.current(name)).device
                how = boot_network(config.source, resolved, device).describe()
            start = time.monotonic()
            return await BootService(config, runtime).image(resolved), how, start

    image, how, start = asyncio.run(build())
    output = Path(args.output or f"{name}.iso")
    try:
        image.write(output)
    except OSError as e:
        raise InputError(f"{output}: cannot write the image: {e.strerror}") from None
    print(f"bootserver: {name}: wrote {output} ({image.size} bytes, {how}, "
          f"ready in {time.monotonic() - start:.2f} s)", file=sys.stderr)
    return 0


def add_render(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Register ``render``."""
    p = sub.add_parser("render", parents=[common], help="print what the server sends a node")
    p.add_argument("what", choices=["ipxe", "grub", "ignition"])
    p.add_argument("node")
    p.add_argument("--version", dest="ignition_version", metavar="X.Y.Z",
                   help="ignition: the stub in this Ignition spec version (3.1.0 up to the profile's "
                   "ignition_version, the default), as a client accepting at most X.Y.Z gets it")
    p.add_argument("--family", type=int, choices=[4, 6],
                   help="as a machine asking over IPv4 or IPv6 gets it: its URLs on that family's "
                   "server.base_url, and over IPv6 a DHCP node's ip=dhcp6 (default: the first base URL)")
    p.set_defaults(func=render)


def add_url(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Register ``url``."""
    p = sub.add_parser("url", parents=[common], help="print a node's chain URL and #!ipxe userdata")
    p.add_argument("node")
    p.add_argument("--iso", action="store_true", help="print the node's signed boot image URL instead "
                   "(/iso/NODE.iso, what a BMC inserts as virtual media)")
    p.add_argument("--expires", type=duration_arg, metavar="DURATION",
                   help="validity, e.g. 24h or 7d (default server.signing.chain_ttl, 3650d); rounded up to the hour")
    p.set_defaults(func=url)


def add_iso(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Register ``iso``."""
    p = sub.add_parser("iso", parents=[common], help="write a node's boot image (ISO 9660) for a network "
                       "without DHCP", description="Write a bootable ISO 9660 image that brings up the node's "
                       "boot interface with its static address from its network (no DHCP) and chains to its "
                       "signed chain URL. A node without a static network gets an image that asks DHCP.")
    p.add_argument("node")
    p.add_argument("--output", "-o", metavar="FILE", help="where to write the image (default NODE.iso)")
    p.set_defaults(func=iso)
