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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..artifacts.cache import ArtifactCache
from ..artifacts.catalog import StreamCatalog
from ..artifacts.readthrough import ReadThrough
from ..artifacts.upstream import Upstream
from ..config import Config
from ..errors import ConfigError, MetadataError
from ..files import write_atomic, write_changed
from ..grub import grub_kargs, grub_path, grub_quote
from ..inventory import inventory
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
#: The folder of the nodes' own configs below :data:`SET_DIR` in a TFTP root.
NODES_DIR = "nodes"


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
            "if insmod http; then\n"
            f'  source {entry}"$net_default_mac"\n'
            "fi\n"
            f'source "($root)/{SET_DIR}/{NODES_DIR}/$net_default_mac.cfg"\n'
            "echo 'bootserver: no boot config for this machine; falling through to the next boot device'\n"
            "sleep 10\n"
            "exit\n")


def node_tftp_cfg(node: str, stream: str, release: str, kargs: Sequence[str]) -> str:
    """Node ``node``'s own GRUB config in a TFTP root (``secureboot/nodes/<mac>.cfg``), for a vendor GRUB
    without ``http``: its release's kernel and initramfs from the TFTP root (:func:`release_dir`),
    ``kargs`` (each one quoted GRUB word; ``initrd=main`` left out: GRUB's ``initrd`` loads it). Raises
    :class:`~bootserver.ipxe.UnsafeValueError` for a karg GRUB would not read literally."""
    words = " ".join(grub_quote(k) for k in grub_kargs(kargs))
    where = f"($root)/{release_dir(stream, release)}"
    return (f"# bootserver: node {node}, Secure Boot over TFTP: the release's signed kernel with the node's kargs\n"
            f"echo 'bootserver: booting node {node}'\n"
            f"linux {where}/vmlinuz {words}\n"
            f"initrd {where}/initrd.img\n"
            "boot\n")


def release_dir(stream: str, release: str) -> str:
    """Where a release's kernel (``vmlinuz``) and initramfs (``initrd.img``) are in a TFTP root."""
    return f"{SET_DIR}/{stream}/{release}"


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
    for node in inventory(config).values():
        if node.secure_boot and node.arch == "x86_64" and node.stream not in out:
            out.append(node.stream)
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


def check_secure_boot_isos(config: Config) -> list[str]:
    """``check-config``'s look at the ``secure_boot`` nodes: raises :class:`~bootserver.errors.ConfigError`
    naming the node's ``secure_boot`` key (the node's, else its profile's) when its stream's current
    x86_64 release has no live ISO, the only source of the signed loaders (:func:`loader_set`). Needs the
    stream metadata without the network (a file, or synced): the streams whose metadata is not at hand are
    returned, left to ``loaders``, ``iso`` and the engine."""
    catalog = StreamCatalog(config, ArtifactCache(config.cache_dir), Upstream.for_config(config))  # cached() only
    later: list[str] = []
    for name, node in inventory(config).items():
        if not (node.secure_boot and node.arch == "x86_64"):
            continue
        try:
            meta = catalog.cached(node.stream)
        except MetadataError:
            meta = None
        release = None if meta is None else meta.releases.get("x86_64")
        if release is None:
            later.append(node.stream)
        elif release.live_iso is None:
            raise ConfigError(config.source, node.secure_boot_key, f"node {name} boots under Secure Boot, but stream "
                              f"{node.stream}'s release {release.version} offers no live ISO (metal.formats.iso.disk), "
                              "the only source of its signed shim and GRUB")
    return list(dict.fromkeys(later))


@dataclass(frozen=True)
class TftpNode:
    """A ``secure_boot`` node's boot in a TFTP root: its MAC (the config's name), stream, release, the
    cached kernel and initramfs files, and its kargs."""

    node: str
    mac: str
    stream: str
    release: str
    kernel: Path
    initramfs: Path
    kargs: tuple[str, ...]


def write_secureboot_loaders(dest: Path, sets: dict[str, Path], base_url: str,
                             nodes: Sequence[TftpNode] = ()) -> list[Path]:
    """Write the network loader sets into the TFTP root ``dest``: for each stream of ``sets`` (stream
    name -> its extracted loaders folder), ``secureboot/<stream>/`` with :data:`NET_LOADERS` and the
    generic :data:`GRUB_CFG`; :data:`DEBIAN_GRUB_CFG` at the root; for each of ``nodes`` its
    ``secureboot/nodes/<mac>.cfg`` (:func:`node_tftp_cfg`) and its release's kernel and initramfs
    (:func:`release_dir`). Each file whole (temp file, rename), and only when it changed
    (:func:`~bootserver.files.write_changed`: the engine writes the sets at every reload). Returns the
    files of the sets, written or already in place. Raises as
    :func:`generic_grub_cfg` and :func:`node_tftp_cfg`, and ``OSError``."""
    cfg = generic_grub_cfg(base_url).encode()
    written = []
    for n in nodes:
        folder = dest / release_dir(n.stream, n.release)
        folder.mkdir(parents=True, exist_ok=True)
        for name, src in (("vmlinuz", n.kernel), ("initrd.img", n.initramfs)):
            if not (folder / name).is_file() or (folder / name).stat().st_size != src.stat().st_size:
                write_atomic(folder / name, src.read_bytes())
            written.append(folder / name)
        own = dest / SET_DIR / NODES_DIR / f"{n.mac}.cfg"
        own.parent.mkdir(parents=True, exist_ok=True)
        write_changed(own, node_tftp_cfg(n.node, n.stream, n.release, n.kargs).encode())
        written.append(own)
    for stream, loaders in sets.items():
        folder = dest / SET_DIR / stream
        folder.mkdir(parents=True, exist_ok=True)
        for name in NET_LOADERS:
            found = loader_file(loaders, name)
            if found is not None:
                write_changed(folder / name, found.read_bytes())
                written.append(folder / name)
        write_changed(folder / GRUB_CFG, cfg)
        written.append(folder / GRUB_CFG)
    if sets:
        (dest / DEBIAN_GRUB_CFG).parent.mkdir(parents=True, exist_ok=True)
        write_changed(dest / DEBIAN_GRUB_CFG, cfg)
        written.append(dest / DEBIAN_GRUB_CFG)
    return written


__all__ = ["DEBIAN_GRUB_CFG", "GRUB_CFG", "NET_LOADERS", "NODES_DIR", "SET_DIR", "TftpNode", "check_secure_boot_isos",
           "generic_grub_cfg",
           "loader_file", "loader_set", "node_tftp_cfg", "release_dir", "secure_boot_streams",
           "write_secureboot_loaders"]
