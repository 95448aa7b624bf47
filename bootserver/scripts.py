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
from .config import Config
from .config.providers import boot_platform, boots_virtual_media
from .errors import DeviceRecordError, MetadataError
from .grub import GrubUnsupported, render_grub_config
from .inventory import NodeContext, node_contexts
from .ipxe import ScriptContext
from .kargs import CommandLineTooLong, build_kargs, check_command_line
from .network import node_kargs
from .signing import KeyEntry, Keyring, Signer
from .streams import Release
from .urls import Urls


def script_context(urls: Urls, resolved: NodeContext, release: Release,
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
    node, profile = resolved.name, resolved.profile
    kernel_url = urls.artifact(node, release, release.kernel)
    kargs = build_kargs(
        arch=profile.arch, mode=profile.mode,
        rootfs_url=urls.artifact(node, release, release.rootfs),
        stub_url=urls.stub(node, stub_ttl), install_dev=profile.install_dev,
        console=profile.console, extra=profile.kargs, platform=boot_platform(urls.config, node),
        network=node_kargs(resolved, None) if network is None else network,
    )
    check_command_line(node, profile.arch, kernel_url, kargs)
    return ScriptContext(
        node=node, profile=resolved.profile_name, stream=release.stream, release=release.version, arch=release.arch,
        mode=profile.mode, kernel_url=kernel_url,
        initramfs_url=urls.artifact(node, release, release.initramfs), kargs=kargs,
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
    for node, resolved in node_contexts(config).items():
        profile = resolved.profile
        try:
            meta = catalog.cached(profile.stream)
            network = node_kargs(resolved, None)
        except (MetadataError, DeviceRecordError):
            meta = None
        release = None if meta is None else meta.releases.get(profile.arch)
        if release is None:
            later.append(node)
            continue
        try:
            ctx = script_context(urls, resolved, release, network)
            if boots_virtual_media(config, node):  # GRUB puts BOOT_IMAGE=<kernel> first: longer
                with contextlib.suppress(GrubUnsupported):  # an https base URL: iso.check_boot_networks
                    render_grub_config(ctx)
        except CommandLineTooLong as e:
            raise CommandLineTooLong(f"{config.source}: {e}") from None
    return later
