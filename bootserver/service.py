"""The boot service: the domain operations behind every endpoint and every ``render`` command.

One :class:`BootService` per config holds the artifact store, the stream catalog, the URL builder and
the real-config reader. Handlers and CLI commands call one method each, so the server and
``bootserver render`` can never disagree.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp

from .catalog import StreamCatalog
from .config import Config
from .errors import UnavailableError
from .ignition import RealConfigs, build_stub, encode
from .inventory import find_node, script_context
from .ipxe import render_boot_script
from .readthrough import ReadThrough
from .store import ArtifactStore
from .urls import Urls


class BootService:
    """Domain operations for one loaded :class:`~bootserver.config.Config`."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.store = ArtifactStore(config.cache_dir)
        self.catalog = StreamCatalog(config, self.store)
        #: Artifact lookups with read-through to upstream (see :mod:`bootserver.readthrough`).
        self.artifacts = ReadThrough(config, self.store, self.catalog)
        self.urls = Urls(config)
        self.real_configs = RealConfigs()

    def find_node(self, **selectors: str | None) -> str:
        """See :func:`bootserver.inventory.find_node`. Raises ``UnknownNodeError``."""
        return find_node(self.config, **selectors)

    async def boot_script(self, node: str, session: aiohttp.ClientSession | None = None) -> str:
        """The node's iPXE script (text). ``node`` must be a configured node name.

        Raises :class:`~bootserver.errors.UnavailableError` when the stream's metadata is not loaded
        and cannot be fetched (no ``session``), or ``FetchError``/``MetadataError`` from fetching it.
        """
        profile = self.config.profiles[self.config.nodes[node].profile]
        release = await self.catalog.release(profile.stream, profile.arch, session)
        return render_boot_script(script_context(self.config, self.urls, node, release))

    def real_config(self, node: str) -> bytes | None:
        """The node's real Ignition config bytes, or ``None`` when its profile has none.

        Raises :class:`~bootserver.errors.UnavailableError` when the file cannot be read now.
        """
        path: Path | None = self.config.ignition_path(self.config.nodes[node].profile)
        if path is None:
            return None
        try:
            return self.real_configs.read(path)
        except OSError as e:
            raise UnavailableError(f"node {node}: cannot read Ignition config {path}: {e.strerror}") from None

    def stub(self, node: str) -> bytes:
        """The node's merge-style Ignition stub, as the exact bytes served.

        Raises :class:`~bootserver.errors.UnavailableError` as :meth:`real_config`.
        """
        profile = self.config.profiles[self.config.nodes[node].profile]
        data = self.real_config(node)
        stub = build_stub(
            version=profile.ignition_version,
            hostname=self.config.node_hostname(node),
            config_url=None if data is None else self.urls.real_config(node),
            config_bytes=data,
        )
        return encode(stub)
