"""From a node (by name or by selector) to what it boots: its boot script's context.

Pure domain code: no aiohttp web layer. The server and ``bootserver render`` both come through here,
so ``render`` prints exactly what the server sends.
"""

from __future__ import annotations

from .config import Config
from .errors import UnknownNodeError
from .ipxe import ScriptContext, build_kargs
from .providers.base import boot_platform
from .streams import Release
from .urls import Urls


def find_node(config: Config, *, name: str | None = None, mac: str | None = None,
              uuid: str | None = None, hostname: str | None = None) -> str:
    """Return the name of the node matching the first selector given (name, mac, uuid, hostname).

    MACs match in any case with ``:`` or ``-``. Raises :class:`UnknownNodeError` with a reason a
    person can act on.
    """
    if name is not None:
        if name in config.nodes:
            return name
        raise UnknownNodeError(f"no node {name!r} in {config.source}")
    for key, value, finder in (("mac", mac, config.node_by_mac), ("uuid", uuid, config.node_by_uuid),
                               ("hostname", hostname, config.node_by_hostname)):
        if value:
            found = finder(value)
            if found is None:
                raise UnknownNodeError(f"no node with {key} {value} in {config.source}")
            return found
    raise UnknownNodeError("no selector given: use ?mac=, ?uuid= or ?hostname=")


def script_context(config: Config, urls: Urls, node: str, release: Release) -> ScriptContext:
    """Build the boot script context of ``node`` for ``release`` (its profile's stream and arch).

    Raises ``KeyError`` for an unknown node (use :func:`find_node` first) and ``ValueError`` if the
    kernel arguments cannot be built (see :func:`bootserver.ipxe.build_kargs`).
    """
    n = config.nodes[node]
    profile = config.profiles[n.profile]
    kargs = build_kargs(
        arch=profile.arch, mode=profile.mode,
        rootfs_url=urls.artifact(node, release, release.rootfs),
        stub_url=urls.stub(node), install_dev=profile.install_dev,
        console=profile.console, extra=profile.kargs, platform=boot_platform(config, node),
    )
    return ScriptContext(
        node=node, profile=n.profile, stream=release.stream, release=release.version, arch=release.arch,
        mode=profile.mode, kernel_url=urls.artifact(node, release, release.kernel),
        initramfs_url=urls.artifact(node, release, release.initramfs), kargs=kargs,
    )
