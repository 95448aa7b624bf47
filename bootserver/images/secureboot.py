"""The Secure Boot image: a node's image whose UEFI boot is its vendor's own signed chain (docs/design.md,
"Secure Boot").

Nothing of ours is signed, and nothing needs to be: what we add is data. The firmware (Microsoft's UEFI
CA in its db) checks the release's **shim**; shim checks the vendor's **GRUB** and, through GRUB, the
release's **kernel** against the vendor's certificate built into it; the kernel and initramfs come from
the release. GRUB reads a config (the node's: kernel arguments, no network) and the kernel fetches the
rootfs itself (``coreos.live.rootfs_url``). The signed loaders come from the release's live ISO
(stream metadata ``metal.formats.iso.disk``, fetched through the cache and sha256-checked like every
artifact): ``images/efiboot.img`` holds ``EFI/BOOT/BOOTX64.EFI`` (shim), ``grubx64.efi`` and, where
present, ``mmx64.efi`` (MokManager); they are extracted once per ISO (:func:`vendor_loaders`). A shim
trusts only its own vendor's certificate, so shim, GRUB and kernel always come from one release.

The image (:func:`secureboot_base`, once per release; a node's region, :func:`secureboot_region`):

* ``images/efiboot.img``: a FAT image with the vendor's loaders in ``EFI/BOOT`` (the UEFI El Torito entry);
* ``images/pxeboot/vmlinuz`` and ``initrd.img``: the release's kernel and initramfs, as in CoreOS's ISO;
* the vendor GRUB's config where the live ISO keeps its own (``EFI/fedora/grub.cfg`` for FCOS,
  ``EFI/redhat/grub.cfg`` for RHCOS, ``boot/grub/grub.cfg`` for Debian's CD GRUB, which finds its
  root by ``.disk/info``): ``source /node/grub.cfg``, the node's, in the region;
* ISOLINUX (Debian's, unsigned: BIOS has no Secure Boot), whose ``isolinux.cfg`` includes the node's
  ``/node/isolinux.cfg``: the same kernel, initramfs and kernel arguments;
* ``/node/grub.cfg`` and ``/node/isolinux.cfg``: the region (:mod:`.base`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from ..config import Config, ResolvedNode
from ..errors import BootserverError, InputError
from ..grub import grub_kargs, grub_quote
from ..streams import Release
from ..urls import Urls
from .base import REGION_DIR, BaseImage, base_image
from .overlay import NodeImage, cached_region
from .tools import ISOLINUX_BIN, LDLINUX_C32, MCOPY, MDIR, MFORMAT, MMD, XORRISO, made_once, need, run

#: The loaders taken from the live ISO's ``images/efiboot.img`` (``EFI/BOOT/<name>``): shim and GRUB
#: must be there, MokManager is copied when present.
SHIM, GRUB, MOKMANAGER = "BOOTX64.EFI", "grubx64.efi", "mmx64.efi"

#: Where the vendors' GRUBs look for their config on the ISO 9660 tree, most specific first: the live
#: ISO's own config at one of these says where ours goes.
GRUB_CONFIG_PLACES = ("EFI/fedora/grub.cfg", "EFI/redhat/grub.cfg", "EFI/centos/grub.cfg", "boot/grub/grub.cfg",
                      "EFI/BOOT/grub.cfg")

#: The kernel and initramfs on the image, where CoreOS's live ISO keeps them.
KERNEL, INITRAMFS = "images/pxeboot/vmlinuz", "images/pxeboot/initrd.img"

#: The node's files in the region: the config the vendor's GRUB sources, and ISOLINUX's.
NODE_GRUB, NODE_ISOLINUX = f"{REGION_DIR}/grub.cfg", f"{REGION_DIR}/isolinux.cfg"

#: The vendor GRUB's config on every Secure Boot image: the node's, from the region (``$root`` is the
#: device GRUB found its prefix on: the image).
VENDOR_GRUB_CFG = f"set timeout=0\nsource /{NODE_GRUB}\n"

#: ``isolinux/isolinux.cfg`` of every Secure Boot image: the node's own config, from the region.
ISOLINUX_INCLUDE = f"INCLUDE /{NODE_ISOLINUX}\n"


#: Kernel arguments that carry a signed URL: their query (expiry, signature) is left out of the region's
#: cache key, as the image's URLs are reused while valid (:func:`~.overlay.cached_region`).
SIGNED_KARGS = ("coreos.inst.ignition_url=", "ignition.config.url=")


class SecureBootUnsupported(InputError):
    """A ``secure_boot`` node's image cannot be made from its release (exit 2; names the node and the
    stream): the stream offers no live ISO, or the architecture has no such image yet."""


class VendorImageError(BootserverError):
    """The release's live ISO does not hold what a Secure Boot image is made of (exit 1; names the ISO
    file and what is missing): an upstream problem, not the config's."""


def _listing(iso: Path) -> set[str]:
    """The files of the ISO 9660 image ``iso`` (paths without the leading ``/``)."""
    out = run([str(need(XORRISO)), "-indev", str(iso), "-find", "/", "-type", "f"], "xorriso -find")
    return {line.strip().strip("'").lstrip("/") for line in out.splitlines() if line.strip().startswith("'")}


def vendor_loaders(iso: Path, sha256: str, cache_dir: Path) -> Path:
    """The signed loaders of the live ISO ``iso`` (whose sha256 is ``sha256``), extracted once into
    ``<cache_dir>/iso/vendor-<sha256[:16]>``: :data:`SHIM`, :data:`GRUB` and :data:`MOKMANAGER` (when
    the ISO has it) from ``images/efiboot.img`` (``xorriso -osirrox``, ``mcopy``), and ``vendor.json``
    naming where the ISO keeps its GRUB config (:data:`GRUB_CONFIG_PLACES`) and the loaders copied.
    Raises :class:`VendorImageError` when the ISO has no ``images/efiboot.img``, no shim or GRUB in it,
    or no GRUB config at a known place; :class:`~.tools.IsoToolMissing`, and ``OSError``."""
    xorriso, mcopy, mdir = need(XORRISO), need(MCOPY), need(MDIR)

    def make(folder: Path) -> None:
        files = _listing(iso)
        if "images/efiboot.img" not in files:
            raise VendorImageError(f"{iso}: the live ISO has no images/efiboot.img (its UEFI boot loaders)")
        place = next((p for p in GRUB_CONFIG_PLACES if p in files), None)
        if place is None:
            raise VendorImageError(f"{iso}: the live ISO has no GRUB config at {', '.join(GRUB_CONFIG_PLACES)}: "
                                   "where its GRUB looks for one is unknown")
        efiboot = folder / "efiboot.img"
        run([str(xorriso), "-osirrox", "on", "-indev", str(iso), "-extract", "/images/efiboot.img", str(efiboot)],
            "xorriso -extract")
        listed = run([str(mdir), "-b", "-i", str(efiboot), "::/EFI/BOOT"], "mdir").split()
        names = {Path(p).name.lower(): Path(p).name for p in listed}
        copied = []
        for name in (SHIM, GRUB, MOKMANAGER):
            if name.lower() not in names:
                if name == MOKMANAGER:
                    continue
                raise VendorImageError(f"{iso}: images/efiboot.img has no EFI/BOOT/{name}")
            run([str(mcopy), "-n", "-i", str(efiboot), f"::/EFI/BOOT/{names[name.lower()]}", str(folder / name)],
                "mcopy")
            copied.append(name)
        efiboot.unlink()
        (folder / "vendor.json").write_text(json.dumps({"grub_config": place, "loaders": copied}))

    return made_once(cache_dir / "iso", f"vendor-{sha256[:16]}", make)


def _efi_image(loaders: Path, names: Sequence[str], dest: Path) -> None:
    """Write ``dest``: a FAT image holding ``EFI/BOOT/<name>`` for each of ``names`` from ``loaders``,
    sized to them (plus 1 MiB)."""
    mformat, mmd, mcopy = need(MFORMAT), need(MMD), need(MCOPY)
    total = sum((loaders / n).stat().st_size for n in names) + (1 << 20)
    sectors = -(-total // (1 << 20)) * 2048  # whole MiB, in 512-byte sectors
    with open(dest, "wb") as f:
        f.truncate(sectors * 512)
    run([str(mformat), "-i", str(dest), "-T", str(sectors), "-h", "64", "-s", "32", "::"], "mformat")
    run([str(mmd), "-i", str(dest), "::/EFI", "::/EFI/BOOT"], "mmd")
    for name in names:
        run([str(mcopy), "-i", str(dest), str(loaders / name), f"::/EFI/BOOT/{name}"], "mcopy")


def _link_or_copy(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)


def secureboot_base(cache_dir: Path, loaders: Path, kernel: Path, initramfs: Path, label: str) -> BaseImage:
    """The Secure Boot base image of one release, built once in ``<cache_dir>/iso/secureboot-<digest>``
    (the digest covers the vendor's loaders folder, the kernel's and initramfs's cached files (their
    sidecar-checked names and sizes), Debian's ISOLINUX and this layout): the vendor's loaders
    (``loaders``, :func:`vendor_loaders`) in ``images/efiboot.img``, the release's ``kernel`` and
    ``initramfs`` (cached artifact files, linked) at :data:`KERNEL` and :data:`INITRAMFS`, the vendor
    GRUB's config at its place (:data:`VENDOR_GRUB_CFG`), ``.disk/info`` (``label``), ISOLINUX, and the
    region's placeholders. Raises as :func:`~.base.base_image`."""
    meta = json.loads((loaders / "vendor.json").read_text())
    isolinux = {"isolinux.bin": need(ISOLINUX_BIN), "ldlinux.c32": need(LDLINUX_C32)}
    digest = hashlib.sha256(repr((loaders.name, str(kernel), kernel.stat().st_size, str(initramfs),
                                  initramfs.stat().st_size, VENDOR_GRUB_CFG, ISOLINUX_INCLUDE, label)).encode())
    for name, src in isolinux.items():
        digest.update(name.encode() + b"\0" + src.read_bytes())

    def populate(tree: Path) -> None:
        (tree / "images").mkdir()
        _efi_image(loaders, meta["loaders"], tree / "images" / "efiboot.img")
        _link_or_copy(kernel, tree / KERNEL)
        _link_or_copy(initramfs, tree / INITRAMFS)
        (tree / "isolinux").mkdir()
        for name, src in isolinux.items():
            shutil.copyfile(src, tree / "isolinux" / name)
        (tree / "isolinux" / "isolinux.cfg").write_text(ISOLINUX_INCLUDE)
        grub_cfg = tree / meta["grub_config"]
        grub_cfg.parent.mkdir(parents=True, exist_ok=True)
        grub_cfg.write_text(VENDOR_GRUB_CFG)
        (tree / ".disk").mkdir()
        (tree / ".disk" / "info").write_text(f"{label}\n")

    return base_image(cache_dir / "iso", f"secureboot-{digest.hexdigest()[:16]}", populate,
                      (NODE_GRUB, NODE_ISOLINUX), "images/efiboot.img", "BOOTSERVER-SB")


def grub_cfg(node: str, kargs: Sequence[str]) -> str:
    """The node's ``/node/grub.cfg``, read by the vendor's GRUB: boot :data:`KERNEL` with ``kargs``
    (each one quoted GRUB word: ``&`` and ``$`` are GRUB metacharacters) and :data:`INITRAMFS`, at
    once; GRUB checks the kernel through shim. Raises :class:`~bootserver.ipxe.UnsafeValueError` for
    a karg GRUB would not read literally."""
    words = " ".join(grub_quote(k) for k in kargs)
    return (f"# bootserver: node {node}, Secure Boot: the release's signed kernel with the node's kargs\n"
            "set timeout=0\n"
            f"echo 'bootserver: booting node {node}'\n"
            f"linux /{KERNEL} {words}\n"
            f"initrd /{INITRAMFS}\n"
            "boot\n")


def isolinux_cfg(kargs: Sequence[str]) -> str:
    """The node's ``/node/isolinux.cfg``: boot :data:`KERNEL` and :data:`INITRAMFS` at once with
    ``kargs`` on the ``APPEND`` line (ISOLINUX takes it literally and adds ``initrd=`` at its end)."""
    return ("DEFAULT bootserver\nPROMPT 0\nTIMEOUT 0\nLABEL bootserver\n"
            f"  KERNEL /{KERNEL}\n  INITRD /{INITRAMFS}\n  APPEND {' '.join(kargs)}\n")


def secureboot_region(node: str, kargs: Sequence[str]) -> dict[str, str]:
    """The texts of node ``node``'s region (:data:`NODE_GRUB`, :data:`NODE_ISOLINUX`) for ``kargs``."""
    return {NODE_GRUB: grub_cfg(node, kargs), NODE_ISOLINUX: isolinux_cfg(kargs)}


def check_secure_boot(node: str, release: Release) -> None:
    """Raise :class:`SecureBootUnsupported` naming ``node`` and the stream when ``release`` cannot give
    a Secure Boot image: no live ISO in its stream metadata (``metal.formats.iso.disk``), or not
    x86_64 (the image's BIOS boot is ISOLINUX, and only x86_64 shims are looked for)."""
    if release.live_iso is None:
        raise SecureBootUnsupported(
            f"node {node}: secure_boot is set, but stream {release.stream} ({release.arch}, release "
            f"{release.version}) offers no live ISO (metal.formats.iso.disk) to take the signed loaders from")
    if release.arch != "x86_64":
        raise SecureBootUnsupported(f"node {node}: secure_boot images are x86_64 only; stream {release.stream} "
                                    f"is {release.arch} for this node")


def secureboot_image(config: Config, urls: Urls, resolved: ResolvedNode, release: Release, iso: Path,
                     kernel: Path, initramfs: Path, kargs: Sequence[str]) -> NodeImage:
    """The Secure Boot image of a node (as resolved): the base of ``release`` (:func:`secureboot_base` from the
    vendor's loaders of the cached live ISO ``iso`` and the cached ``kernel`` and ``initramfs``) with
    the node's region (:func:`secureboot_region`) for ``kargs`` (the node's kernel arguments as its
    iPXE script carries them, the stub URL signed for ``chain_ttl``; ``initrd=main`` is left out: GRUB's
    ``initrd`` and ISOLINUX's ``INITRD`` load the initramfs). The region is cached as the netboot
    image's (:func:`~.overlay.cached_region`). Raises :class:`SecureBootUnsupported`,
    :class:`VendorImageError`, :class:`~.base.RegionTooSmall`, as :func:`~.base.base_image`, and
    :class:`~bootserver.ipxe.UnsafeValueError` for a karg GRUB would not read literally."""
    node = resolved.name
    check_secure_boot(node, release)
    assert release.live_iso is not None
    loaders = vendor_loaders(iso, release.live_iso.sha256, config.cache_dir)
    base = secureboot_base(config.cache_dir, loaders, kernel, initramfs,
                           f"bootserver {release.stream} {release.arch} {release.version}")
    kargs = grub_kargs(kargs)
    exp, key = urls.signer.state(config.server.signing.chain_ttl)
    stable = tuple(k.split("?", 1)[0] if k.startswith(SIGNED_KARGS) else k for k in kargs)
    digest = hashlib.sha256(repr((stable, hashlib.sha256(key).hexdigest(), base.name)).encode()).hexdigest()[:16]
    return cached_region(config, urls, resolved, base, digest, exp, lambda: secureboot_region(node, kargs))
