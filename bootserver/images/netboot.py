"""The netboot image, for networks without DHCP: ``bootserver iso NODE``, ``GET /iso/<node>.iso``.

A node whose network has no DHCP server (and no PXE) boots a small ISO 9660 image, inserted by its BMC
as virtual media or burnt to a stick; the image brings up the node's boot interface with the node's own
static IPv4 address and chains to the node's signed chain URL, the same boot the server sends on a
chain (docs/design.md, "The boot flow"). Nothing in the image sends a DHCP request unless the node has
no static network, and then the image says so (:attr:`~.network.BootNetwork.dhcp`).

The loaders are Debian's (:mod:`.loaders`): **BIOS**: ISOLINUX boots ``ipxe.lkrn`` with the iPXE
commands on the ``APPEND`` line of the node's ``/node/isolinux.cfg``, which iPXE runs as a script
(:func:`ipxe_commands`); **UEFI**: a standalone GRUB reads the node's ``/node/grub.cfg``
(:func:`grub_cfg`): the static address, then the node's signed GRUB config (``GET /grub/<node>``,
:func:`bootserver.grub.render_grub_config`). ``xorriso -as mkisofs`` writes both El Torito entries,
hybrid (an MBR from ``isohdpfx.bin``, a GPT for the EFI image) so it also boots written to a stick.

Cached (docs/design.md, "Boot images"): the loaders in ``<cache_dir>/iso/loaders-<digest>``, the base
image (loaders, placeholders for the two node files) in ``<cache_dir>/iso/netboot-<digest>``, each
node's region (its two files, :data:`~.base.REGION_FILE_SIZE` bytes each) in ``<cache_dir>/iso/nodes``:
a further node costs no xorriso run and 16 KiB of disk.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config import Config, ResolvedNode
from ..grub import grub_path, grub_quote
from ..ipxe import check_script_word
from ..urls import Urls
from .base import REGION_DIR, UEFI_BOOT, BaseImage, base_image
from .loaders import netboot_arm64_loaders, netboot_loaders
from .network import BootNetwork, boot_network
from .overlay import NodeImage, cached_region

#: How many NICs the image's iPXE looks through for the boot interface's MAC (``net0`` .. ``net7``).
MAX_NICS = 8

#: The node's files in the image's region: its ISOLINUX config (which the fixed ``isolinux/isolinux.cfg``
#: includes) and the config its GRUB reads (loaders.GRUB_EMBEDDED_CFG).
NODE_ISOLINUX, NODE_GRUB = f"{REGION_DIR}/isolinux.cfg", f"{REGION_DIR}/grub.cfg"

#: ``isolinux/isolinux.cfg`` of every netboot image: the node's own config, from the region.
ISOLINUX_INCLUDE = f"INCLUDE /{NODE_ISOLINUX}\n"


def ipxe_commands(boot: BootNetwork, url: str) -> str:
    """The iPXE script of the image's BIOS boot, on one line (ISOLINUX's ``APPEND``; iPXE runs its
    command line as a script, ``src/arch/x86/core/cmdline.c``).

    It picks the NIC whose MAC is ``boot.mac`` (``net0`` .. ``net7``, default ``net0``), then either
    opens it and sets ``ip``, ``netmask``, ``gateway`` and ``dns`` (no DHCP), or runs ``dhcp`` on it
    (:attr:`BootNetwork.dhcp`), then ``chain``\\ s ``url``. Raises
    :class:`~bootserver.ipxe.UnsafeValueError` when ``url`` is not one literal iPXE word.
    """
    check_script_word(url)
    words = ["set", "nic", "net0"]
    if boot.mac:
        for n in range(1, MAX_NICS):
            words += [";", "iseq", f"${{net{n}/mac}}", boot.mac, "&&", "set", "nic", f"net{n}"]
    words.append(";")
    if boot.dhcp:
        words += ["dhcp", "${nic}"]
    else:
        assert boot.address is not None
        words += ["ifopen", "${nic}", "&&", "set", "${nic}/ip", boot.address,
                  "&&", "set", "${nic}/netmask", boot.netmask]
        if boot.gateway:
            words += ["&&", "set", "${nic}/gateway", boot.gateway]
        if boot.dns:
            words += ["&&", "set", "${nic}/dns", boot.dns[0]]
    words += ["&&", "chain", "--autofree", url]
    return " ".join(words)


def grub_cfg(boot: BootNetwork, url: str) -> str:
    """The node's ``/node/grub.cfg`` of the image, read by its UEFI boot (GRUB 2.06 with ``efinet`` and
    ``http``): find the card whose MAC is ``boot.mac`` (``efinet0`` .. ``efinet7``: a probe address
    on each card sets ``$net_probe_mac``; default ``efinet0``), then either give it the static address,
    the route to its subnet, the default route and DNS (``net_add_addr``, ``net_add_route``,
    ``net_add_dns``: no DHCP) or run ``net_bootp`` on it (:attr:`BootNetwork.dhcp`), then ``source``
    ``url`` (the node's signed GRUB config, :func:`~bootserver.grub.grub_path`); when that fails, ``exit``
    to the next boot device. Raises :class:`~bootserver.grub.GrubUnsupported` for a URL that is not
    plain http and :class:`~bootserver.ipxe.UnsafeValueError` for one GRUB would not read literally.
    """
    source = grub_quote(grub_path(url))
    lines = ["# bootserver: the node's boot interface, then its GRUB config", "set bootnic=efinet0"]
    if boot.mac:
        cards = " ".join(f"efinet{n}" for n in range(MAX_NICS))
        lines += [f"for card in {cards}; do",
                  "  if net_add_addr probe $card 0.0.0.0; then",
                  f"    if [ \"$net_probe_mac\" = \"{boot.mac}\" ]; then set bootnic=$card; fi",
                  "    net_del_addr probe",
                  "  else",
                  "    break",
                  "  fi",
                  "done"]
    if boot.dhcp:
        lines.append("net_bootp $bootnic")
    else:
        assert boot.address is not None
        subnet = ipaddress.IPv4Interface(f"{boot.address}/{boot.prefix}").network
        lines += [f"net_add_addr bootserver $bootnic {boot.address}",
                  f"net_add_route bootserver-lan {subnet} bootserver"]
        if boot.gateway:
            lines.append(f"net_add_route bootserver-default 0.0.0.0/0 gw {boot.gateway}")
        lines += [f"net_add_dns {server}" for server in boot.dns[:1]]
    lines += [f"source {source}",
              "echo 'bootserver: the boot config could not be fetched; falling through to the next boot device'",
              "sleep 10", "exit"]
    return "\n".join(lines) + "\n"


def isolinux_cfg(boot: BootNetwork, url: str) -> str:
    """The node's ``/node/isolinux.cfg`` (included by ``isolinux/isolinux.cfg``): boot ``ipxe.lkrn`` at
    once (no prompt) with :func:`ipxe_commands`."""
    return ("DEFAULT bootserver\nPROMPT 0\nTIMEOUT 0\nLABEL bootserver\n"
            "  KERNEL /isolinux/ipxe.lkrn\n"
            f"  APPEND {ipxe_commands(boot, url)}\n")


def netboot_base(cache_dir: Path) -> BaseImage:
    """The netboot base image, built once per loaders (:func:`~.loaders.netboot_loaders`): ISOLINUX,
    ``ipxe.lkrn``, the fixed ``isolinux/isolinux.cfg`` (:data:`ISOLINUX_INCLUDE`), ``efiboot.img`` and the
    region's two placeholders, in ``<cache_dir>/iso/netboot-<digest>``. Raises as
    :func:`~.base.base_image`."""
    loaders = netboot_loaders(cache_dir)
    digest = hashlib.sha256(repr((loaders.name, ISOLINUX_INCLUDE, NODE_ISOLINUX, NODE_GRUB)).encode())

    def populate(tree: Path) -> None:
        (tree / "isolinux").mkdir()
        for f in (loaders / "isolinux").iterdir():
            os.link(f, tree / "isolinux" / f.name)
        (tree / "isolinux" / "isolinux.cfg").write_text(ISOLINUX_INCLUDE)
        os.link(loaders / "efiboot.img", tree / "efiboot.img")

    return base_image(cache_dir / "iso", f"netboot-{digest.hexdigest()[:16]}", populate,
                      (NODE_ISOLINUX, NODE_GRUB), "efiboot.img", "BOOTSERVER")


def netboot_arm64_base(cache_dir: Path) -> BaseImage:
    """The aarch64 netboot base image, UEFI only: ``efiboot.img`` with the arm64 GRUB
    (:func:`~.loaders.netboot_arm64_loaders`) and the region's GRUB placeholder, in
    ``<cache_dir>/iso/netboot-arm64-<digest>``. Raises as :func:`~.base.base_image`."""
    loaders = netboot_arm64_loaders(cache_dir)
    digest = hashlib.sha256(repr((loaders.name, NODE_GRUB)).encode())

    def populate(tree: Path) -> None:
        os.link(loaders / "efiboot.img", tree / "efiboot.img")

    return base_image(cache_dir / "iso", f"netboot-arm64-{digest.hexdigest()[:16]}", populate, (NODE_GRUB,),
                      "efiboot.img", "BOOTSERVER", UEFI_BOOT)


def node_image(config: Config, urls: Urls, resolved: ResolvedNode,
               device: Mapping[str, Any] | None = None) -> NodeImage:
    """The netboot image of a node (as resolved): the base (:func:`netboot_base`) with the node's region, whose
    ``isolinux.cfg`` (:func:`isolinux_cfg`) and ``grub.cfg`` (:func:`grub_cfg`) bring up the node's
    boot network (:func:`~.network.boot_network`) and chain its signed chain URL or GRUB config. A node
    whose profile is aarch64 gets the UEFI-only image (:func:`netboot_arm64_base`): its region is the
    ``grub.cfg`` alone, read by the arm64 GRUB, which sources the node's ``/grub/<node>``.

    The region is kept as ``<cache_dir>/iso/nodes/<node>-<digest>-<exp>.region``, where ``<digest>``
    covers every input but the URLs' expiry (the boot network, the chain and GRUB URLs' base and path,
    the current signing key, the base). It is used while its URLs stay valid for at least half of
    ``server.signing.chain_ttl``, like a device's chain URL, so a BMC reading the image in ranges
    gets the same bytes throughout; a new region replaces the node's older ones. Written whole (temp
    file, rename).

    ``device``: the node's device record (for ``network: provider``). Raises as
    :func:`~.network.boot_network` and :func:`netboot_base`, :class:`~.base.RegionTooSmall`, and
    :class:`~bootserver.grub.GrubUnsupported` / :class:`~bootserver.ipxe.UnsafeValueError` for URLs
    GRUB or iPXE cannot read.
    """
    node = resolved.name
    boot = boot_network(config.source, resolved, device)
    chain, grub = urls.chain(node), urls.grub(node)
    exp, key = urls.signer.state(config.server.signing.chain_ttl)
    if resolved.arch == "aarch64":  # UEFI only, through the arm64 GRUB
        base = netboot_arm64_base(config.cache_dir)
        digest = hashlib.sha256(repr((boot, grub.split("?")[0], hashlib.sha256(key).hexdigest(),
                                      base.name)).encode()).hexdigest()[:16]
        return cached_region(config, urls, resolved, base, digest, exp, lambda: {NODE_GRUB: grub_cfg(boot, grub)})
    base = netboot_base(config.cache_dir)
    digest = hashlib.sha256(repr((boot, chain.split("?")[0], grub.split("?")[0], hashlib.sha256(key).hexdigest(),
                                  base.name)).encode()).hexdigest()[:16]
    return cached_region(config, urls, resolved, base, digest, exp,
                         lambda: {NODE_ISOLINUX: isolinux_cfg(boot, chain), NODE_GRUB: grub_cfg(boot, grub)})
