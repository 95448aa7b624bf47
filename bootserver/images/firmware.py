"""Boot loaders a machine's firmware loads over TFTP or HTTP before it can reach bootserver: the
standalone arm64 GRUB (``GET /loaders/grubaa64.efi``, ``bootserver loaders DIR``).

Debian ships no arm64 iPXE, so an arm64 UEFI machine (DHCP client architecture 11) boots GRUB instead:
Debian's ``grub-efi-arm64-bin`` (an arm64 package, installed on any architecture after ``dpkg
--add-architecture arm64``: it is ``Multi-Arch: foreign`` data) and ``grub-mkstandalone`` (``grub-common``)
make one EFI binary with ``efinet`` and ``http`` built in (shared/DESIGN.md, "arm64"). Its built-in
config (:func:`embedded_config`) is the same for every node: it takes the address the firmware's DHCP
gave (``net_bootp`` when GRUB has none), then ``source``\\ s ``/boot.grub?mac=$net_default_mac`` from
the server, the GRUB form of the generic entry: the node whose MAC GRUB booted from, its kernel,
initramfs and kernel arguments (:func:`bootserver.grub.render_grub_config`), with the same boot-once
rule and timeline events as an iPXE boot. Nothing is compiled and nothing committed: the binary is built
once per GRUB package and server base URL, and cached (:func:`arm64_grub`).

``bootserver loaders DIR`` writes it into a TFTP root, beside Debian's iPXE builds for x86_64
(``ipxe.efi``, ``undionly.kpxe``) that the DHCP examples of docs/on-premises.md chain to.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from ..files import write_changed
from ..grub import grub_path, grub_quote
from .tools import GRUB_ARM64_MODULES, GRUB_MKSTANDALONE, IsoToolMissing, made_once, need, run

log = logging.getLogger(__name__)

#: The file name of the arm64 GRUB, on the server (``/loaders/<name>``) and in a TFTP root.
ARM64_GRUB = "grubaa64.efi"

#: Debian's x86_64 iPXE builds ``bootserver loaders`` copies beside it (file name -> path, package). The
#: UEFI one is iPXE on the firmware's own network driver (``snponly.efi``, served as ``ipxe.efi``): its
#: ``exit`` (boot-once's answer) hands the NIC back and returns to the firmware, which then boots the disk;
#: the full ``ipxe.efi`` loaded over PXE hangs in its ``exit`` under OVMF (tests/e2e, the playground).
IPXE_LOADERS = {"ipxe.efi": ("/usr/lib/ipxe/snponly.efi", "ipxe"),
                "undionly.kpxe": ("/usr/lib/ipxe/undionly.kpxe", "ipxe")}

#: The modules built into the arm64 GRUB (``--install-modules``; about 0.7 MB): with ``smbios``,
#: ``regexp`` and ``cat`` for the discovery script (:func:`bootserver.grub.render_grub_discovery`; in
#: normal mode ``cat`` is ``cat.mod``'s, not ``minicmd``'s).
GRUB_MODULES = ("efinet", "http", "net", "normal", "echo", "linux", "configfile", "test", "sleep", "tftp",
                "minicmd", "smbios", "regexp", "cat")

#: The modules loaded before the built-in config runs: ``efinet`` at start-up configures the card the
#: firmware booted GRUB from with the firmware's DHCP answer (``$net_default_mac``, ``$net_default_ip``);
#: loaded later (``insmod``) it would not, and every boot would ask DHCP again.
PRELOADED = ("efinet",)


def embedded_config(base_url: str) -> str:
    """The config built into the arm64 GRUB for a server whose base URL is ``base_url``: ``efinet`` and
    ``http``; DHCP only when the firmware handed GRUB no address (``$net_default_mac`` unset); then
    ``source`` the server's ``/boot.grub?mac=<the MAC GRUB booted from>``; when that fails, a line on
    the console and ``exit`` to the firmware's next boot option. Raises
    :class:`~bootserver.grub.GrubUnsupported` when ``base_url`` is not plain http (GRUB's ``http``
    module has no TLS) and :class:`~bootserver.ipxe.UnsafeValueError` for one GRUB would not read
    literally."""
    entry = grub_quote(grub_path(f"{base_url}/boot.grub") + "?mac=")
    return (
        "insmod efinet\n"
        "insmod http\n"
        'if [ -z "$net_default_mac" ]; then net_bootp; fi\n'
        f'source {entry}"$net_default_mac"\n'
        "echo 'bootserver: no boot config for this machine; falling through to the next boot device'\n"
        "sleep 10\n"
        "exit\n")


def arm64_grub(cache_dir: Path, base_url: str) -> Path:
    """The arm64 GRUB for ``base_url``, built once: ``<cache_dir>/loaders/grubaa64-<digest>/grubaa64.efi``
    where ``<digest>`` covers GRUB's arm64 ``kernel.img``, the modules and :func:`embedded_config` (a
    GRUB upgrade or another base URL makes a new folder), made whole or not at all
    (:func:`~bootserver.images.tools.made_once`). Raises :class:`~bootserver.images.tools.IsoToolMissing`
    naming a missing package, ``BootserverError`` when grub-mkstandalone fails, ``GrubUnsupported`` as
    :func:`embedded_config`, and ``OSError``."""
    config = embedded_config(base_url)
    mkstandalone, modules = need(GRUB_MKSTANDALONE), need(GRUB_ARM64_MODULES)
    digest = hashlib.sha256((modules / "kernel.img").read_bytes())
    digest.update(config.encode() + b"\0" + " ".join(GRUB_MODULES + PRELOADED).encode())

    def build(folder: Path) -> None:
        (folder / "embedded.cfg").write_text(config)
        run([str(mkstandalone), "-O", "arm64-efi", "-d", str(modules),
             f"--install-modules={' '.join(GRUB_MODULES)}", f"--modules={' '.join(PRELOADED)}",
             "--locales=", "--fonts=", "--themes=", "-o", str(folder / ARM64_GRUB),
             f"boot/grub/grub.cfg={folder / 'embedded.cfg'}"], "grub-mkstandalone -O arm64-efi")
        (folder / "embedded.cfg").unlink()

    return made_once(cache_dir / "loaders", f"grubaa64-{digest.hexdigest()[:16]}", build) / ARM64_GRUB


def write_loaders(dest: Path, cache_dir: Path, base_url: str, *, need_arm64: bool = True) -> list[Path]:
    """``bootserver loaders DIR``: write the arm64 GRUB (:func:`arm64_grub`) and Debian's x86_64 iPXE
    builds (:data:`IPXE_LOADERS`) into the folder ``dest`` (created if missing), each file whole
    (temp file, rename) and only when it changed (:func:`~bootserver.files.write_changed`). Without
    ``need_arm64`` (no profile is aarch64) a missing arm64 GRUB package is skipped with a warning.
    Returns the files, written or already in place. Raises as :func:`arm64_grub`; a missing iPXE
    build is :class:`~bootserver.images.tools.IsoToolMissing`."""
    sources: dict[str, Path] = {}
    try:
        sources[ARM64_GRUB] = arm64_grub(cache_dir, base_url)
    except IsoToolMissing as e:
        if need_arm64:
            raise
        log.warning("%s; no profile is aarch64, so %s is left out", e, ARM64_GRUB)
    for name, wanted in IPXE_LOADERS.items():
        sources[name] = need(wanted)
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for name, src in sources.items():
        write_changed(dest / name, src.read_bytes())  # the DHCP engine writes them at each start
        written.append(dest / name)
    return written


__all__ = ["ARM64_GRUB", "arm64_grub", "embedded_config", "write_loaders"]
