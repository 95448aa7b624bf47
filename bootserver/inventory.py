"""From a node (by name or by selector) to what it boots: its profile and its boot script's context.

Pure domain code: no aiohttp web layer. The server and ``bootserver render`` both come through here,
so ``render`` prints exactly what the server sends.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
from collections.abc import Iterable

from .artifacts.cache import ArtifactCache
from .artifacts.catalog import StreamCatalog
from .artifacts.upstream import Upstream
from .config import Config
from .errors import MetadataError, UnknownNodeError
from .ipxe import (
    CommandLineTooLong,
    GrubUnsupported,
    ScriptContext,
    build_kargs,
    check_command_line,
    render_grub_config,
)
from .network import node_kargs
from .providers.base import DeviceRecordError
from .providers.interface import boot_platform, boots_virtual_media
from .signing import KeyEntry, Keyring, Signer
from .streams import Release
from .timeline import NodeState, final_stages, stall_deadline
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
        raise UnknownNodeError(f"no node {name!r} in {config.source}", public=f"no node {name!r}")
    for key, value, finder in (("mac", mac, config.node_by_mac), ("uuid", uuid, config.node_by_uuid),
                               ("hostname", hostname, config.node_by_hostname)):
        if value:
            found = finder(value)
            if found is None:
                raise UnknownNodeError(f"no node with {key} {value} in {config.source}")
            return found
    raise UnknownNodeError("no selector given: use ?mac=, ?uuid= or ?hostname=")


def node_final_stages(config: Config, node: str) -> tuple[str, ...]:
    """The stages where configured node ``node`` has nothing more to do
    (:func:`bootserver.timeline.final_stages` of its profile: ``up`` when it checks in)."""
    profile = config.node_profile(node)
    return final_stages(profile.mode, checkin=profile.checkin)


def stall_deadlines(config: Config, states: Iterable[NodeState]) -> dict[str, float | None]:
    """Each configured node's stall deadline (:func:`bootserver.timeline.stall_deadline`, unix
    seconds; ``None``: it cannot stall now) under ``timeline.stall_after``; nodes not in the config
    (history of a removed node) are left out."""
    limits = config.timeline.stall_limits
    return {st.node: stall_deadline(st, limits, node_final_stages(config, st.node))
            for st in states if st.node in config.nodes}


Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@functools.lru_cache(maxsize=4096)
def cidr_network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """``ip_network(cidr)``, parsed once per distinct string (configs hold validated CIDRs)."""
    return ipaddress.ip_network(cidr)


def address_allowed(config: Config, node: str, addr: Address | None) -> bool:
    """True when ``node`` has no ``addresses`` binding or ``addr`` lies in one of them (an IPv4-mapped
    IPv6 address counts as its IPv4 address; ``None``, an address that cannot be told, never matches)."""
    bound = config.nodes[node].addresses
    if not bound:
        return True
    if addr is None:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:
        addr = addr.ipv4_mapped
    return any(addr in cidr_network(n) for n in bound)


def select_node(config: Config, addr: Address | None, *, mac: str | None = None, uuid: str | None = None,
                hostname: str | None = None) -> str:
    """The node the generic entry (``/boot.ipxe?mac=|uuid=|hostname=``) may hand out to a client at
    ``addr``: the node matching the first selector given, when ``addr`` is in its ``addresses``, or it
    has none and is ``selectable``; otherwise the ``default`` node (matchbox's default group), when
    there is one and ``addr`` is in its ``addresses`` (if any).

    Raises :class:`UnknownNodeError` with the same ``public`` text whether no node matches or a node
    matches but may not be handed out to ``addr`` (docs/design.md, "Identity and trust": the answer must
    not tell which MACs are registered); ``str(err)`` says which, for the server's log.
    """
    given = [(k, v) for k, v in (("mac", mac), ("uuid", uuid), ("hostname", hostname)) if v]
    if given:
        key, value = given[0]
        public = f"no node to boot for {key} {value} from this address"
        try:
            node = find_node(config, **{key: value})
        except UnknownNodeError as e:
            reason = str(e)
        else:
            n = config.nodes[node]
            if address_allowed(config, node, addr) if n.addresses else n.selectable:
                return node
            reason = f"node {node} ({key} {value}) is not selectable from {addr}"
    else:
        public = reason = "no selector given: use ?mac=, ?uuid= or ?hostname="
    fallback = default_node(config)
    if fallback is not None and address_allowed(config, fallback, addr):
        return fallback
    raise UnknownNodeError(reason, public=public)


def default_node(config: Config) -> str | None:
    """The node with ``default: true`` (at most one; see :func:`select_node`), or ``None``."""
    return next((name for name, n in config.nodes.items() if n.default), None)


def script_context(config: Config, urls: Urls, node: str, release: Release,
                   network: tuple[str, ...] | None = None, stub_ttl: int | None = None) -> ScriptContext:
    """Build the boot script context of ``node`` for ``release`` (its profile's stream and arch).
    ``stub_ttl``: how long the stub URL in the kargs is valid (seconds; default ``install_ttl``).

    ``network`` is the node's network kargs (default: :func:`bootserver.network.node_kargs` without a
    device record: right for every node but a ``network: provider`` one, whose record the caller reads).
    Raises ``KeyError`` for an unknown node (use :func:`find_node` first), ``ValueError`` if the
    kernel arguments cannot be built (see :func:`bootserver.ipxe.build_kargs`),
    :class:`~bootserver.ipxe.CommandLineTooLong` when they do not fit the kernel, and
    :class:`~bootserver.providers.base.DeviceRecordError` (503) for a ``network: provider`` node without a
    usable device record.
    """
    n = config.nodes[node]
    profile = config.node_profile(node)
    kernel_url = urls.artifact(node, release, release.kernel)
    kargs = build_kargs(
        arch=profile.arch, mode=profile.mode,
        rootfs_url=urls.artifact(node, release, release.rootfs),
        stub_url=urls.stub(node, stub_ttl), install_dev=profile.install_dev,
        console=profile.console, extra=profile.kargs, platform=boot_platform(config, node),
        network=node_kargs(config, node, None) if network is None else network,
    )
    check_command_line(node, profile.arch, kernel_url, kargs)
    return ScriptContext(
        node=node, profile=n.profile, stream=release.stream, release=release.version, arch=release.arch,
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
    ``BOOT_IMAGE=`` counts too (:func:`~bootserver.ipxe.render_grub_config`). Raises
    :class:`~bootserver.ipxe.CommandLineTooLong` (exit 2) naming the config file and the first node
    whose command line does not fit.
    """
    urls = Urls(config, Signer(Keyring(config.state_dir / "keys.json", [KeyEntry(bytes(32), 0)])))
    catalog = StreamCatalog(config, ArtifactCache(config.cache_dir), Upstream.for_config(config))  # cached() only
    later = []
    for node in config.nodes:
        profile = config.node_profile(node)
        try:
            meta = catalog.cached(profile.stream)
            network = node_kargs(config, node, None)
        except (MetadataError, DeviceRecordError):
            meta = None
        release = None if meta is None else meta.releases.get(profile.arch)
        if release is None:
            later.append(node)
            continue
        try:
            ctx = script_context(config, urls, node, release, network)
            if boots_virtual_media(config, node):  # GRUB puts BOOT_IMAGE=<kernel> first: longer
                with contextlib.suppress(GrubUnsupported):  # an https base URL: iso.check_boot_networks
                    render_grub_config(ctx)
        except CommandLineTooLong as e:
            raise CommandLineTooLong(f"{config.source}: {e}") from None
    return later
