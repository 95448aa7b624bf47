"""The artifact desk: the files a machine fetches for one loaded config (artifacts from the cache with
read-through, the arm64 GRUB loader), who fetched them (attribution to a node, its timeline events) and
what the cache holds (readiness, the cache page). One :class:`ArtifactDesk` per config, over the
:class:`~bootserver.runtime.Runtime`'s cache, upstream and downloads in flight (shared across reloads).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .artifacts.cache import Published
from .artifacts.catalog import StreamCatalog
from .artifacts.readthrough import ReadThrough, Transfer
from .artifacts.report import cache_report
from .config import Config, ResolvedNode
from .errors import UnavailableError
from .files import LinkRefused
from .images.firmware import IPXE_LOADERS, arm64_grub
from .images.netsecure import GRUB_CFG, generic_grub_cfg, loader_file, loader_set, secure_boot_streams
from .images.tools import need
from .runtime import Runtime
from .streams import ARTIFACT_KINDS
from .timeline import artifact_event

log = logging.getLogger("bootserver.service")


class ArtifactDesk:
    """Artifacts and loaders for ``config`` (its streams, ``read_through``, its nodes resolved as
    ``nodes``), through ``runtime``'s cache, upstream and downloads in flight."""

    def __init__(self, config: Config, runtime: Runtime, nodes: Mapping[str, ResolvedNode]) -> None:
        self.config = config
        self.runtime = runtime
        self.nodes = nodes
        #: The configured streams' metadata (see :mod:`bootserver.artifacts.catalog`).
        self.catalog = StreamCatalog(config, runtime.cache, runtime.upstream)
        #: Artifact lookups with read-through to upstream (see :mod:`bootserver.artifacts.readthrough`).
        self.artifacts = ReadThrough(config, runtime.cache, self.catalog, runtime.upstream,
                                     downloads=runtime.downloads, observer=runtime.metrics)

    async def open(self, segments: tuple[str, ...]) -> Published | Transfer | None:
        """The artifact at URL segments ``(stream, arch, release, file)``: the cached file opened
        (:class:`~bootserver.artifacts.cache.Published`; the caller closes its descriptor), a
        :class:`~bootserver.artifacts.readthrough.Transfer` of it (read-through), or ``None`` (not served:
        see :meth:`missing`; also when a link stands anywhere from ``cache_dir`` to it, which the cache
        logged). Raises as :meth:`ReadThrough.open` otherwise."""
        try:
            return await self.artifacts.open(segments)
        except LinkRefused:
            return None

    def missing(self) -> str:
        """Why :meth:`open` found nothing, in public words."""
        return "not a known artifact" if self.artifacts.enabled else "not in cache"

    async def requested(self, segments: tuple[str, ...], client: str | None,
                        signed: ResolvedNode | None = None) -> tuple[str, ResolvedNode | None]:
        """``(kind, node)`` of an artifact request from address ``client``: its kind (see :meth:`kind`)
        and the node it is attributed to, as resolved (docs/design.md; ``None`` when none; ``signed``, the
        node a private artifact's URL was signed for, when given), after recording ``<kind>-requested`` for
        it. Never raises: artifacts are served whatever happens to the timeline (a failure is logged)."""
        kind = self.kind(segments)
        if not client and signed is None:
            return kind, None
        try:
            node = signed.name if signed is not None else await self.runtime.state.attribute(client or "")
            resolved = None if node is None else self.nodes.get(node)
            if resolved is None:
                return kind, None
            if kind != "other":
                await self.runtime.record(resolved, f"{kind}-requested", ip=client)
            return kind, resolved
        except (UnavailableError, OSError) as e:
            log.error("artifact %s: not recorded in the node timeline: %s", "/".join(segments), e)
            return kind, None

    def answered(self, resolved: ResolvedNode, kind: str, client: str | None, *, status: int, nbytes: int,
                 complete: bool) -> None:
        """Record how an attributed artifact answer ended, once its last byte went out (or the
        connection broke): :func:`~bootserver.timeline.artifact_event` (``<kind>-completed``,
        ``-partial``, ``-unchanged`` or ``-failed``) with the body ``nbytes`` sent and the ``status``.
        The write runs in the background (:meth:`Runtime.drain` waits for it); call on the event loop."""
        if kind not in ARTIFACT_KINDS:
            return
        event = artifact_event(kind, status, complete)
        self.runtime.spawn(self.runtime.record(resolved, event, ip=client,
                                               detail={"bytes": nbytes, "status": status}, at=time.time()))

    def kind(self, segments: tuple[str, ...]) -> str:
        """``kernel``, ``initramfs`` or ``rootfs`` when the artifact URL segments ``(stream, arch,
        release, file)`` name an artifact of a stream's current release (from its metadata), else
        ``other``. Never raises."""
        try:
            stream, arch, version, filename = segments
            meta = self.catalog.cached(stream) if stream in self.config.streams else None
            rel = None if meta is None else meta.releases.get(arch)
        except Exception:  # malformed metadata or segments: only a label is at stake
            return "other"
        if rel is not None and rel.version == version:
            for kind in ARTIFACT_KINDS:
                if getattr(rel, kind).filename == filename:
                    return kind
        return "other"

    async def arm64_grub(self) -> Path:
        """The standalone arm64 GRUB for this config's IPv4 base URL (GRUB's ``http`` has no IPv6;
        :func:`bootserver.images.firmware.arm64_grub`: built once, cached in ``cache_dir/loaders``), built
        in a worker thread (grub-mkstandalone, about 0.2 s). Raises as that function."""
        return await asyncio.to_thread(arm64_grub, self.config.cache_dir, self.config.server.base_url_for(4))

    async def loader(self, route: str, params: Mapping[str, str]) -> Path | str | None:
        """A boot loader route's answer (``route`` names it, ``params`` its URL's parts): the arm64 GRUB's
        file, Debian's ``ipxe.efi`` (:class:`~bootserver.images.tools.IsoToolMissing` when not installed),
        a Secure Boot loader set's file (:func:`~bootserver.images.netsecure.loader_set`, the stream's live
        ISO fetched on first use) or its GRUB config (text); ``None`` for a stream no ``secure_boot`` node
        boots from, or a file the set has not. Raises as those functions."""
        if route == "loader_arm64":
            return await self.arm64_grub()
        if route == "loader_ipxe":
            return need(IPXE_LOADERS["ipxe.efi"])
        if route == "grub_cfg" or params.get("file") == GRUB_CFG:
            return generic_grub_cfg(self.config.server.base_url_for(4))
        if params.get("stream") not in secure_boot_streams(self.config):
            return None
        return loader_file(await loader_set(self.config, self.catalog, self.artifacts, params["stream"]),
                           params["file"])

    def report(self) -> dict[str, Any]:
        """What the artifact cache holds, for the live page's cache page
        (:func:`bootserver.artifacts.report.cache_report`; reads ``cache_dir``, no network)."""
        return cache_report(self.artifacts)

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """``(ready, report)`` of the artifacts for ``GET /readyz``: every profile's stream metadata loaded
        and every artifact it names cached or read-through on (:meth:`ReadThrough.readiness`). A stream
        whose metadata is missing gets a background load (:meth:`bootserver.runtime.MetadataLoads.soon`),
        so a probe that keeps asking sees the server become ready as soon as the metadata can be had.
        Never blocks on the network."""
        ready, report = self.artifacts.readiness()
        waiting = sorted({i["stream"] for i in report["artifacts"] if i["release"] is None})
        loads = self.runtime.metadata
        for item in report["artifacts"]:
            if item["release"] is None and loads.failure(self.catalog, item["stream"]) is not None:
                item["reason"] = "stream metadata could not be loaded; the server log has the details"
        for stream in waiting:
            loads.soon(self.catalog, stream)
        if waiting:
            ready = False
            report = {**report, "ready": False}
        return ready, report
