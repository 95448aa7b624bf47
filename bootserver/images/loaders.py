"""The node-independent boot loaders of the netboot image, made once from Debian's binaries and cached
in ``<cache_dir>/iso/loaders-<digest>`` (nothing compiled, nothing committed; shared/DESIGN.md
"No-DHCP boot"):

* **BIOS**: ISOLINUX (``isolinux``, ``syslinux-common``) and Debian's ``ipxe.lkrn`` (``ipxe``).
* **UEFI**: a FAT image (``mtools``) holding a standalone GRUB (``grub-mkstandalone``, ``grub-common``
  and ``grub-efi-amd64-bin``) whose built-in config (:data:`GRUB_EMBEDDED_CFG`, the same for every
  node) reads the node's ``/node/grub.cfg`` from the image.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .tools import (
    GRUB_ARM64_MODULES,
    GRUB_EFI_MODULES,
    GRUB_MKSTANDALONE,
    IPXE_LKRN,
    ISOLINUX_BIN,
    LDLINUX_C32,
    MCOPY,
    MFORMAT,
    MMD,
    made_once,
    need,
    run,
)

#: The GRUB modules the image's standalone GRUB carries (``--install-modules``; about 0.7 MB).
GRUB_MODULES = ("efinet", "http", "net", "normal", "echo", "linux", "iso9660", "configfile", "test", "regexp",
                "sleep")

#: The config built into the standalone GRUB, the same for every node: load the network and ISO 9660
#: modules, then read ``/node/grub.cfg`` (the node's, in the image's region) from the device GRUB was
#: loaded from (``$cmdpath`` is ``(cd0)/EFI/BOOT`` when the firmware booted the El Torito EFI entry).
GRUB_EMBEDDED_CFG = """insmod efinet
insmod http
insmod iso9660
regexp --set=1:bootdev '^\\((.*)\\)' "$cmdpath"
source "($bootdev)/node/grub.cfg"
echo "bootserver: no /node/grub.cfg on the boot device ($bootdev)"
sleep 10
exit
"""


#: Per architecture of the image's UEFI boot: GRUB's target, its modules (path, package), and the file
#: name UEFI firmware boots from removable media (UEFI 2.10, section 3.5.1.1).
EFI_TARGETS = {"x86_64": ("x86_64-efi", GRUB_EFI_MODULES, "BOOTX64.EFI"),
               "aarch64": ("arm64-efi", GRUB_ARM64_MODULES, "BOOTAA64.EFI")}


def _efi_boot_image(folder: Path, arch: str = "x86_64") -> None:
    """Write ``folder/efiboot.img``: a FAT image holding ``EFI/BOOT/BOOTX64.EFI`` (``BOOTAA64.EFI`` for
    ``arch`` aarch64), a standalone GRUB (``grub-mkstandalone -O x86_64-efi`` or ``arm64-efi``, only
    :data:`GRUB_MODULES`) whose embedded config is :data:`GRUB_EMBEDDED_CFG`."""
    target, modules, name = EFI_TARGETS[arch]
    mkstandalone = need(GRUB_MKSTANDALONE)
    modules_dir = need(modules)
    mformat, mmd, mcopy = need(MFORMAT), need(MMD), need(MCOPY)
    (folder / "embedded.cfg").write_text(GRUB_EMBEDDED_CFG)
    efi = folder / name
    run([str(mkstandalone), "-O", target, "-d", str(modules_dir), f"--install-modules={' '.join(GRUB_MODULES)}",
         "--modules=", "--locales=", "--fonts=", "--themes=", "-o", str(efi),
         f"boot/grub/grub.cfg={folder / 'embedded.cfg'}"], "grub-mkstandalone")
    img = folder / "efiboot.img"
    # 1440 KiB: BOOTX64.EFI is about 0.7 MB; -C creates the image file
    run([str(mformat), "-C", "-f", "1440", "-i", str(img), "::"], "mformat")
    run([str(mmd), "-i", str(img), "::/EFI", "::/EFI/BOOT"], "mmd")
    run([str(mcopy), "-i", str(img), str(efi), f"::/EFI/BOOT/{name}"], "mcopy")
    efi.unlink()
    (folder / "embedded.cfg").unlink()


def netboot_loaders(cache_dir: Path) -> Path:
    """The netboot image's loaders, made once: a folder ``<cache_dir>/iso/loaders-<digest>`` holding
    ``isolinux/isolinux.bin``, ``isolinux/ldlinux.c32`` and ``isolinux/ipxe.lkrn`` copied from Debian's
    packages, and ``efiboot.img`` (:func:`_efi_boot_image`). ``<digest>``: sha256 over those loaders'
    bytes, GRUB's ``kernel.img`` and the embedded GRUB config, so a package upgrade or a change here
    makes a new folder. Raises :class:`~.tools.IsoToolMissing`, :class:`~bootserver.errors.BootserverError`
    when a tool fails, and ``OSError``."""
    sources = {"isolinux.bin": need(ISOLINUX_BIN), "ldlinux.c32": need(LDLINUX_C32), "ipxe.lkrn": need(IPXE_LKRN)}
    digest = hashlib.sha256()
    blobs = {}
    for name, src in sources.items():
        blobs[name] = src.read_bytes()
        digest.update(name.encode() + b"\0" + blobs[name])
    digest.update((need(GRUB_EFI_MODULES) / "kernel.img").read_bytes())
    digest.update(GRUB_EMBEDDED_CFG.encode() + " ".join(GRUB_MODULES).encode())

    def make(folder: Path) -> None:
        (folder / "isolinux").mkdir()
        for name, data in blobs.items():
            (folder / "isolinux" / name).write_bytes(data)
        _efi_boot_image(folder)

    return made_once(cache_dir / "iso", f"loaders-{digest.hexdigest()[:16]}", make)


def netboot_arm64_loaders(cache_dir: Path) -> Path:
    """The aarch64 netboot image's loader, made once: a folder ``<cache_dir>/iso/loaders-arm64-<digest>``
    holding ``efiboot.img`` with ``EFI/BOOT/BOOTAA64.EFI``, the same standalone GRUB and embedded config
    as the x86_64 UEFI boot, built for ``arm64-efi`` from Debian's ``grub-efi-arm64-bin``. No BIOS boot:
    arm64 machines boot UEFI only. ``<digest>`` covers GRUB's arm64 ``kernel.img``, the embedded config and
    the modules. Raises as :func:`netboot_loaders`."""
    digest = hashlib.sha256((need(GRUB_ARM64_MODULES) / "kernel.img").read_bytes())
    digest.update(GRUB_EMBEDDED_CFG.encode() + " ".join(GRUB_MODULES).encode())
    return made_once(cache_dir / "iso", f"loaders-arm64-{digest.hexdigest()[:16]}",
                     lambda folder: _efi_boot_image(folder, "aarch64"))
