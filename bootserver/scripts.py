"""What a node boots: its boot script's context (:class:`~bootserver.ipxe.ScriptContext`: kernel,
initramfs and kargs from the config, the URL builder, the release and the node's network), which both
the iPXE script (:mod:`bootserver.ipxe`) and its GRUB form (:mod:`bootserver.grub`) render; and
``check-config``'s look at every node's kernel command line.

Pure domain code: no aiohttp web layer. The server and ``bootserver render`` both come through here,
so ``render`` prints exactly what the server sends.
"""

from __future__ import annotations

import contextlib

from .artifacts.cache import ArtifactCache
from .artifacts.catalog import StreamCatalog
from .artifacts.upstream import Upstream
from .config import Config, ResolvedNode
from .errors import DeviceRecordError, MetadataError
from .grub import GrubUnsupported, render_grub_config
from .inventory import inventory
from .ipxe import ScriptContext
from .kargs import CommandLineTooLong, build_kargs, check_command_line
from .network import node_kargs
from .signing import KeyEntry, Keyring, Signer
from .streams import Release
from .urls import Urls


def script_context(urls: Urls, resolved: ResolvedNode, release: Release,
                   network: tuple[str, ...] | None = None, stub_ttl: int | None = None) -> ScriptContext:
    """Build the boot script context of the node as resolved for ``release`` (its profile's stream and
    arch), its URLs from ``urls`` (which reads the loaded config). ``stub_ttl``: how long the stub URL
    in the kargs is valid (seconds; default ``install_ttl``).

    ``network`` is the node's network kargs (default: :func:`bootserver.network.node_kargs` without a
    device record: right for every node but a ``network: provider`` one, whose record the caller reads).
    Raises ``ValueError`` if the kernel arguments cannot be built (see :func:`bootserver.kargs.build_kargs`),
    :class:`~bootserver.kargs.CommandLineTooLong` when they do not fit the kernel, and
    :class:`~bootserver.errors.DeviceRecordError` (503) for a ``network: provider`` node without a
    usable device record.
    """
    node = resolved.name
    kernel_url = urls.artifact(resolved, release, release.kernel)
    kargs = build_kargs(
        arch=resolved.arch, mode=resolved.mode,
        rootfs_url=urls.artifact(resolved, release, release.rootfs),
        stub_url=urls.stub(node, stub_ttl), install_dev=resolved.install_dev,
        console=resolved.console, extra=resolved.kargs, platform=resolved.platform,
        network=() if resolved.mode == "agent" else node_kargs(resolved, None) if network is None else network,
    )
    check_command_line(node, resolved.arch, kernel_url, kargs)
    return ScriptContext(
        node=node, profile=resolved.profile, stream=release.stream, release=release.version, arch=release.arch,
        mode=resolved.mode, kernel_url=kernel_url,
        initramfs_url=urls.artifact(resolved, release, release.initramfs), kargs=kargs,
    )


def check_command_lines(config: Config) -> list[str]:
    """``check-config``'s look at every node's kernel command line, built as the server would build it
    (with a throwaway signing key: a signature has the same length under every key).

    Needs the release: a node whose stream metadata is not at hand without the network (not synced
    yet), or whose network is ``network: provider`` (its device record is in the state store, which
    ``check-config`` does not open), is left to ``render`` and the server, and returned. A node that
    boots its image (``redfish.boot_source: virtual-media``) is also checked in GRUB's form, whose
    ``BOOT_IMAGE=`` counts too (:func:`~bootserver.grub.render_grub_config`). Raises
    :class:`~bootserver.kargs.CommandLineTooLong` (exit 2) naming the config file and the first node
    whose command line does not fit.
    """
    urls = Urls(config, Signer(Keyring(config.state_dir / "keys.json", [KeyEntry(bytes(32), 0)])))
    catalog = StreamCatalog(config, ArtifactCache(config.cache_dir), Upstream.for_config(config))  # cached() only
    later = []
    for node, resolved in inventory(config).items():
        try:
            meta = catalog.cached(resolved.stream)
            network = node_kargs(resolved, None)
        except (MetadataError, DeviceRecordError):
            meta = None
        release = None if meta is None else meta.releases.get(resolved.arch)
        if release is None:
            later.append(node)
            continue
        try:
            ctx = script_context(urls, resolved, release, network)
            if resolved.boots_image:  # GRUB puts BOOT_IMAGE=<kernel> first: longer
                with contextlib.suppress(GrubUnsupported):  # an https base URL: iso.check_boot_networks
                    render_grub_config(ctx)
        except CommandLineTooLong as e:
            raise CommandLineTooLong(f"{config.source}: {e}") from None
    return later
