"""Secure Boot over the network: the release's own signed shim and GRUB as a network loader set, for
``secure_boot`` nodes whose firmware loads its boot program over PXE (TFTP) or UEFI HTTP Boot.

Nothing of ours is signed (docs/design.md, "Secure Boot"): the firmware checks the vendor's **shim**
(Microsoft's UEFI CA), shim checks the vendor's **GRUB** and, through GRUB, the release's **kernel**.
The loaders are the ones of the release's live ISO (:func:`~.secureboot.vendor_loaders`, extracted
once per ISO), under the names a netbooted shim expects: shim as ``bootx64.efi``, which loads
``grubx64.efi`` from the folder (TFTP) or URL (HTTP) it was itself loaded from, and MokManager
``mmx64.efi`` beside it.

The vendor's GRUB then reads a config that is the same for every node (:func:`generic_grub_cfg`): it
``source``\\ s ``/boot.grub?mac=$net_default_mac`` from this server over HTTP, the GRUB form of the
generic entry (:func:`bootserver.grub.render_grub_config`: the node whose MAC GRUB booted from, its
kernel and initramfs fetched by GRUB's ``http`` and checked through shim, its kernel arguments, the
boot-once rule). That config is placed wherever the vendors' network GRUBs look for one:

* next to the loader (Fedora's and Red Hat's network GRUB: its prefix is the folder it was loaded
  from; per MAC first, ``grub.cfg-01-<mac>``, then ``grub.cfg``): ``secureboot/<stream>/grub.cfg``;
* ``/grub/grub.cfg`` of the TFTP root or the HTTP server (Debian's ``grubnetx64.efi.signed``, whose
  built-in prefix is ``/grub`` on the server it was loaded from; it has ``http`` built in).

Served over HTTP at ``/loaders/secureboot/<stream>/<file>`` and ``/grub/grub.cfg``
(:mod:`bootserver.http.app`), and written into a TFTP root by ``bootserver loaders DIR``
(:func:`write_secureboot_loaders`). GRUB's ``http`` fetches IPv4 or host-name URLs only, so the generic
config names the server's IPv4 base URL (:meth:`~bootserver.config.ServerConfig.base_url_for`).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from ..artifacts.catalog import StreamCatalog
from ..artifacts.readthrough import ReadThrough
from ..config import Config
from ..files import write_atomic
from ..grub import grub_path, grub_quote
from .secureboot import GRUB, MOKMANAGER, SHIM, SecureBootUnsupported, vendor_loaders

#: The network names of the vendor's loaders (the name served -> the name in the live ISO's
#: ``EFI/BOOT``, :func:`~.secureboot.vendor_loaders`): what the firmware loads (shim), what shim
#: loads from beside it (GRUB), and MokManager, which shim starts on a key enrollment.
NET_LOADERS = {"bootx64.efi": SHIM, "grubx64.efi": GRUB, "mmx64.efi": MOKMANAGER}

#: The generic GRUB config's name next to the loaders, and where Debian's network GRUB looks for it.
GRUB_CFG = "grub.cfg"
DEBIAN_GRUB_CFG = "grub/grub.cfg"

#: The folder of one stream's network loader set, below a TFTP root or ``/loaders`` on the server.
SET_DIR = "secureboot"


def generic_grub_cfg(base_url: str) -> str:
    """The GRUB config of the network loader set for a server whose IPv4 base URL is ``base_url``: GRUB
    sources the node's boot by the MAC it booted from (``/boot.grub?mac=$net_default_mac``); when that
    finds nothing, a line on the console and ``exit`` to the firmware's next boot option. Raises
    :class:`~bootserver.grub.GrubUnsupported` when ``base_url`` is not plain http of an IPv4 address or
    name (GRUB's ``http`` module) and :class:`~bootserver.ipxe.UnsafeValueError` for a URL GRUB would not
    read literally."""
    entry = grub_quote(grub_path(f"{base_url}/boot.grub") + "?mac=")
    return ("# bootserver: Secure Boot over the network; the node's boot comes by the MAC GRUB booted from\n"
            "set timeout=0\n"
            "insmod http\n"
            f'source {entry}"$net_default_mac"\n'
            "echo 'bootserver: no boot config for this machine; falling through to the next boot device'\n"
            "sleep 10\n"
            "exit\n")


def loader_file(loaders: Path, name: str) -> Path | None:
    """The file of the network loader set served as ``name`` (:data:`NET_LOADERS`) in the extracted
    ``loaders`` folder, ``None`` when the set has no such file (an unknown name, or no MokManager in the
    release's ISO)."""
    inside = NET_LOADERS.get(name)
    if inside is None:
        return None
    copied = json.loads((loaders / "vendor.json").read_text())["loaders"]
    return loaders / inside if inside in copied else None


def secure_boot_streams(config: Config) -> list[str]:
    """The streams a network loader set is made for: those of the x86_64 ``secure_boot`` nodes, in
    config order (a set is made of the stream's release's live ISO, fetched on first use)."""
    out: list[str] = []
    for node in config.nodes:
        profile = config.node_profile(node)
        if config.node_secure_boot(node) and profile.arch == "x86_64" and profile.stream not in out:
            out.append(profile.stream)
    return out


async def loader_set(config: Config, catalog: StreamCatalog, artifacts: ReadThrough, stream: str) -> Path:
    """The extracted network loader set of ``stream``'s current x86_64 release: its live ISO fetched
    through the cache (sha256-checked, once however many ask), then its signed loaders extracted once
    (:func:`~.secureboot.vendor_loaders`, in a worker thread). Raises :class:`SecureBootUnsupported`
    when ``stream`` is not one of :func:`secure_boot_streams` or its release has no live ISO, and as
    :func:`~.secureboot.vendor_loaders` and the fetch (``FetchError``, ``IntegrityError``)."""
    if stream not in secure_boot_streams(config):
        raise SecureBootUnsupported(f"stream {stream}: no x86_64 secure_boot node boots from it",
                                    public="no Secure Boot loaders here")
    release = await catalog.release(stream, "x86_64")
    if release.live_iso is None:
        raise SecureBootUnsupported(f"stream {stream} (release {release.version}) offers no live ISO "
                                    "(metal.formats.iso.disk) to take the signed loaders from",
                                    public="no Secure Boot loaders here")
    iso = await artifacts.fetch(release, release.live_iso)
    return await asyncio.to_thread(vendor_loaders, iso.path, release.live_iso.sha256, config.cache_dir)


def write_secureboot_loaders(dest: Path, sets: dict[str, Path], base_url: str) -> list[Path]:
    """Write the network loader sets into the TFTP root ``dest``: for each stream of ``sets`` (stream
    name -> its extracted loaders folder), ``secureboot/<stream>/`` with :data:`NET_LOADERS` and the
    generic :data:`GRUB_CFG`; and :data:`DEBIAN_GRUB_CFG` at the root. Each file whole (temp file,
    rename). Returns the files written. Raises as :func:`generic_grub_cfg`, and ``OSError``."""
    cfg = generic_grub_cfg(base_url).encode()
    written = []
    for stream, loaders in sets.items():
        folder = dest / SET_DIR / stream
        folder.mkdir(parents=True, exist_ok=True)
        for name in NET_LOADERS:
            src = loader_file(loaders, name)
            if src is not None:
                write_atomic(folder / name, src.read_bytes())
                written.append(folder / name)
        write_atomic(folder / GRUB_CFG, cfg)
        written.append(folder / GRUB_CFG)
    if sets:
        (dest / DEBIAN_GRUB_CFG).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(dest / DEBIAN_GRUB_CFG, cfg)
        written.append(dest / DEBIAN_GRUB_CFG)
    return written


__all__ = ["DEBIAN_GRUB_CFG", "GRUB_CFG", "NET_LOADERS", "SET_DIR", "generic_grub_cfg", "loader_file",
           "loader_set", "secure_boot_streams", "write_secureboot_loaders"]
