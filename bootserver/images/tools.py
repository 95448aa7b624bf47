"""The Debian binaries a boot image is made of (path or command, and the package that ships it), and
running them with a time limit and a one-line error (shared/DESIGN.md, "No-DHCP boot")."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..errors import BootserverError
from ..files import LinkRefused, fsync_dir

#: Debian's files the images are made of (path or command, Debian package).
ISOLINUX_BIN = ("/usr/lib/ISOLINUX/isolinux.bin", "isolinux")
ISOHYBRID_MBR = ("/usr/lib/ISOLINUX/isohdpfx.bin", "isolinux")
LDLINUX_C32 = ("/usr/lib/syslinux/modules/bios/ldlinux.c32", "syslinux-common")
IPXE_LKRN = ("/usr/lib/ipxe/ipxe.lkrn", "ipxe")
XORRISO = ("xorriso", "xorriso")
GRUB_MKSTANDALONE = ("grub-mkstandalone", "grub-common")
GRUB_EFI_MODULES = ("/usr/lib/grub/x86_64-efi", "grub-efi-amd64-bin")
#: Debian's arm64 GRUB modules: an arm64 package, installed on any architecture (``Multi-Arch: foreign``).
GRUB_ARM64_MODULES = ("/usr/lib/grub/arm64-efi",
                      "grub-efi-arm64-bin:arm64, after `dpkg --add-architecture arm64 && apt-get update`")
MFORMAT, MMD, MCOPY, MDIR = ("mformat", "mtools"), ("mmd", "mtools"), ("mcopy", "mtools"), ("mdir", "mtools")

#: Seconds one tool run may take before the build is abandoned.
BUILD_TIMEOUT = 60.0


class IsoToolMissing(BootserverError):
    """A Debian binary the image is built from is not installed (exit 1; names the file and package)."""


def need(path_and_package: tuple[str, str]) -> Path:
    """The file or command of ``(path, package)`` (one of the constants above): an absolute path that
    is readable, or a command found on ``PATH``. Raises :class:`IsoToolMissing` naming both."""
    path, package = path_and_package
    if os.path.isabs(path):
        if os.access(path, os.R_OK):
            return Path(path)
    else:
        found = shutil.which(path)
        if found:
            return Path(found)
    raise IsoToolMissing(f"the boot image needs {path} (Debian package {package}), which is not installed")


def run(argv: list[str], what: str) -> str:
    """Run ``argv`` (stdin closed, at most :data:`BUILD_TIMEOUT` seconds) and return its stdout (text).
    Raises :class:`~bootserver.errors.BootserverError` naming ``what`` with the tool's last line of
    output when it exits non-zero, or when it runs too long."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise BootserverError(f"{what} did not finish within {BUILD_TIMEOUT:.0f} s") from None
    if p.returncode != 0:
        last = ((p.stderr or p.stdout).strip().splitlines() or ["no message"])[-1]
        raise BootserverError(f"{what} failed (exit {p.returncode}): {last}")
    return p.stdout


def made_once(root: Path, name: str, make: Callable[[Path], None]) -> Path:
    """The folder ``root/name``, made by ``make(folder)`` when it does not exist yet: ``make`` fills a
    temporary folder beside it, which is then renamed into place, so a reader sees no folder or a whole
    one, and two processes making it at once both end up with one (the first rename wins, the other's
    work is dropped). Raises what ``make`` raises (its temporary folder is removed), ``OSError``, and
    :class:`~bootserver.files.LinkRefused` when ``root`` or the folder is a link."""
    final = root / name
    for place in (root, final):  # a folder of the cache, never one a link points at (files.LinkRefused)
        if place.is_symlink():
            raise LinkRefused(place)
    if final.is_dir():
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}-"))
    try:
        make(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():  # another process made it first: use theirs
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    fsync_dir(root)
    return final
