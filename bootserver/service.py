"""The boot service: the domain operations behind every endpoint and every ``render`` command.

One :class:`BootService` per config holds the upstream (session, mirrors, retry policy), the artifact
store, the stream catalog, the URL builder and the real-config reader. Handlers and CLI commands call one method each, so the server and
``bootserver render`` can never disagree.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any, Mapping

from .butane import ButaneError
from .catalog import StreamCatalog
from .config import IGNITION_VERSIONS, Config
from .errors import UnavailableError
from .fetch import Upstream
from .ignition import NotAcceptableError, RealConfigs, build_stub, encode, negotiate_version, stub_versions
from .inventory import find_node, script_context
from .ipxe import render_boot_script, render_localboot_script
from .network import node_kargs
from .readthrough import ReadThrough
from .store import ArtifactStore
from .streams import ARTIFACT_KINDS
from .timeline import INSTALLED_STAGES, GroupCommit, Record, Timeline
from .signing import Signer
from .urls import Urls


class BootService:
    """Domain operations for one loaded :class:`~bootserver.config.Config`."""

    def __init__(self, config: Config, signer: Signer | None = None, upstream: Upstream | None = None) -> None:
        """``signer`` signs per-node URLs (default: the keys file in ``state_dir`` and the wall clock);
        ``upstream`` is where metadata and artifacts come from (default: :meth:`Upstream.for_config`,
        the mirrors of ``server.facility``). Call :meth:`close` when done (it closes the upstream)."""
        self.config = config
        #: Where stream metadata and artifacts come from (see :mod:`bootserver.fetch`).
        self.upstream = Upstream.for_config(config) if upstream is None else upstream
        self.store = ArtifactStore(config.cache_dir)
        self.catalog = StreamCatalog(config, self.store, self.upstream)
        #: Artifact lookups with read-through to upstream (see :mod:`bootserver.readthrough`).
        self.artifacts = ReadThrough(config, self.store, self.catalog, self.upstream)
        self.urls = Urls(config, signer)
        self.real_configs = RealConfigs()
        self.timeline = Timeline(config.state_dir, config.timeline.keep_events)
        #: Timeline writes of the server (group commit on one writer thread).
        self.writes = GroupCommit(self.timeline)
        # Rendered answers, reused while what they depend on is unchanged (see _script and stub):
        # node -> (release, signing state, script) and (node, spec version) -> (real config's hash,
        # signing state, CA, stub).
        self._scripts: dict[str, tuple[Any, tuple[int, bytes], tuple[str, ...], str]] = {}
        self._stubs: dict[tuple[str, str], tuple[Any, tuple[int, bytes], bytes | None, bytes]] = {}

    def find_node(self, **selectors: str | None) -> str:
        """See :func:`bootserver.inventory.find_node`. Raises ``UnknownNodeError``."""
        return find_node(self.config, **selectors)

    async def close(self) -> None:
        """Cancel read-through downloads still running (their partials stay) and close the upstream."""
        await self.artifacts.close()
        await self.upstream.close()

    async def boot_script(self, node: str) -> str:
        """The node's iPXE script (text). ``node`` must be a configured node name.

        Raises :class:`~bootserver.errors.UnavailableError` when the timeline cannot be read, or
        ``FetchError``/``MetadataError`` when the stream's metadata must be fetched and cannot be.
        """
        return (await self._script(node, await self.stage(node)))[1]

    async def stage(self, node: str) -> str:
        """The node's timeline stage (one indexed row, read on the event loop: see
        :class:`~bootserver.timeline.Timeline`).

        Raises :class:`UnavailableError` (HTTP 503) when the timeline cannot be read: without it the
        server cannot tell an installed node from a new one, and guessing could reinstall a node.
        """
        try:
            return self.timeline.stage(node)
        except (sqlite3.Error, OSError) as e:
            raise UnavailableError(f"node timeline {self.timeline.path}: {e}") from None

    async def _script(self, node: str, stage: str) -> tuple[str, str, dict[str, Any]]:
        """``(event, script, detail)``: the boot-disk script when boot-once applies, else the boot script."""
        profile = self.config.profiles[self.config.nodes[node].profile]
        if profile.boots_once and stage in INSTALLED_STAGES:
            return "localboot", render_localboot_script(node, stage), {"stage": stage}
        release = await self.catalog.release(profile.stream, profile.arch)
        # The script changes only with the release, with the stub URL's signature (its expiry is
        # rounded up to the hour, and the key may rotate) and with the network (a provider's device
        # record may change): render once per change, not per request.
        signing = self.urls.signer.state(self.config.server.signing.install_ttl)
        network = node_kargs(self.config, node)
        hit = self._scripts.get(node)
        if hit is not None and hit[0] is release and hit[1] == signing and hit[2] == network:
            script = hit[3]
        else:
            script = render_boot_script(script_context(self.config, self.urls, node, release, network))
            self._scripts[node] = (release, signing, network, script)
        return "script", script, {"mode": profile.mode, "release": release.version}

    def mode(self, node: str) -> str:
        """The node's profile mode (``install`` or ``live``)."""
        return self.config.profiles[self.config.nodes[node].profile].mode

    async def record(self, node: str, event: str, *, ip: str | None = None,
                     detail: Mapping[str, Any] | None = None, at: float | None = None) -> str:
        """Record a timeline event (at unix time ``at`` in seconds, default now) through the group
        commit writer (off the event loop); returns the node's new stage once committed.

        Raises :class:`UnavailableError` (HTTP 503) when ``state_dir`` cannot be written: a stub or
        config served without its event would defeat boot-once, so the client is asked to retry
        (iPXE's script retries, Ignition retries 5xx answers).
        """
        profile = self.config.profiles[self.config.nodes[node].profile]
        record = Record(node, event, profile.mode, time.time() if at is None else at, ip, detail,
                        real_config=profile.ignition is not None)
        try:
            return await self.writes.record(record)
        except (sqlite3.Error, OSError) as e:
            raise UnavailableError(f"node timeline {self.timeline.path}: {e}") from None

    async def serve_script(self, node: str, client: str | None) -> str:
        """What the server answers a node's script request from address ``client``: the boot script,
        or with boot-once the boot-disk script once the node is installed; records ``script`` or
        ``localboot`` in the timeline. Raises as :meth:`boot_script`.
        """
        stage = await self.stage(node)
        event, script, detail = await self._script(node, stage)
        await self.record(node, event, ip=client, detail=detail)
        return script

    async def serve_stub(self, node: str, client: str | None, accept: str | None = None) -> bytes:
        """:meth:`stub` in the spec version negotiated with the client's ``Accept`` header (see
        :func:`~bootserver.ignition.negotiate_version`; ``None``: the profile's version), recording
        ``stub`` in the timeline. Raises :class:`~bootserver.ignition.NotAcceptableError` (HTTP 406,
        nothing recorded) when the client accepts no version the profile allows, else as :meth:`stub`.
        """
        profile = self.config.profiles[self.config.nodes[node].profile]
        version = negotiate_version(accept, profile.ignition_version, IGNITION_VERSIONS)
        data = self.stub(node, version)
        await self.record(node, "stub", ip=client)
        return data

    async def serve_real_config(self, node: str, client: str | None) -> bytes | None:
        """:meth:`real_config`, recording ``config`` when there is one. Raises as :meth:`real_config`."""
        data = self.real_config(node)
        if data is not None:
            await self.record(node, "config", ip=client)
        return data

    def artifact_kind(self, segments: tuple[str, ...]) -> str:
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

    def real_config(self, node: str) -> bytes | None:
        """The node's real Ignition config bytes, or ``None`` when its profile has none.

        Raises :class:`~bootserver.errors.UnavailableError` when the file cannot be read (or, for a
        Butane config, translated) now.
        """
        pinned = self._real_config_pinned(node)
        return None if pinned is None else pinned[0]

    def _real_config_pinned(self, node: str) -> tuple[bytes, str] | None:
        """``(bytes, sha512 hash)`` of the node's real config, or ``None``. Raises as :meth:`real_config`."""
        path: Path | None = self.config.ignition_path(self.config.nodes[node].profile)
        if path is None:
            return None
        try:
            return self.real_configs.read_pinned(path)
        except OSError as e:
            raise UnavailableError(f"node {node}: cannot read Ignition config {path}: {e.strerror}") from None
        except ButaneError as e:  # the Butane file was edited into one butane refuses: 503 until fixed
            raise UnavailableError(f"node {node}: {e}") from None

    def ca_pem(self) -> bytes | None:
        """The CA certificate (PEM) embedded into stubs when ``server.tls`` is set, else ``None``.

        Raises :class:`~bootserver.errors.UnavailableError` when the CA file cannot be read.
        """
        if self.config.server.tls is None:
            return None
        ca = self.config.tls_files()[2]
        try:
            return ca.read_bytes()
        except OSError as e:
            raise UnavailableError(f"server.tls.ca: cannot read {ca}: {e.strerror}") from None

    def stub(self, node: str, version: str | None = None) -> bytes:
        """The node's merge-style Ignition stub in spec ``version`` (default: the profile's
        ``ignition_version``), as the exact bytes served.

        Its merge URL is signed with an expiry rounded up to the hour, so ``render ignition`` and the
        server print the same bytes within the same hour (same clock, same code path).

        Raises :class:`~bootserver.ignition.NotAcceptableError` when ``version`` is not a stub version
        (3.1.0 or newer) up to the profile's ``ignition_version``;
        :class:`~bootserver.errors.UnavailableError` as :meth:`real_config`.
        """
        profile = self.config.profiles[self.config.nodes[node].profile]
        if version is None:
            version = profile.ignition_version
        elif version not in stub_versions(profile.ignition_version, IGNITION_VERSIONS):
            raise NotAcceptableError(
                f"node {node}: Ignition spec {version} is not one its stub can be written in: profile "
                f"{self.config.nodes[node].profile} allows 3.1.0 to {profile.ignition_version} "
                f"(profiles.{self.config.nodes[node].profile}.ignition_version)")
        pinned = self._real_config_pinned(node)
        ca_pem = self.ca_pem()
        signing = self.urls.signer.state(self.config.server.signing.install_ttl)
        config_hash = None if pinned is None else pinned[1]
        hit = self._stubs.get((node, version))
        if hit is not None and hit[0] == config_hash and hit[1] == signing and hit[2] == ca_pem:
            return hit[3]
        stub = encode(build_stub(
            version=version,
            hostname=self.config.node_hostname(node),
            config_url=None if pinned is None else self.urls.real_config(node),
            config_hash=config_hash,
            ca_pem=ca_pem,
        ))
        self._stubs[(node, version)] = (config_hash, signing, ca_pem, stub)
        return stub
