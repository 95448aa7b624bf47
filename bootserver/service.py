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
from .store import ArtifactStore
from .signing import Signer
from .urls import Urls


class BootService:
    """Domain operations for one loaded :class:`~bootserver.config.Config`."""

    def __init__(self, config: Config, signer: Signer | None = None) -> None:
        """``signer`` signs per-node URLs (default: the keys file in ``state_dir`` and the wall clock)."""
        self.config = config
        self.store = ArtifactStore(config.cache_dir)
        self.catalog = StreamCatalog(config, self.store)
        self.urls = Urls(config, signer)
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

    def stub(self, node: str) -> bytes:
        """The node's merge-style Ignition stub, as the exact bytes served.

        Its merge URL is signed with an expiry rounded up to the hour, so ``render ignition`` and the
        server print the same bytes within the same hour (same clock, same code path).

        Raises :class:`~bootserver.errors.UnavailableError` as :meth:`real_config`.
        """
        profile = self.config.profiles[self.config.nodes[node].profile]
        data = self.real_config(node)
        stub = build_stub(
            version=profile.ignition_version,
            hostname=self.config.node_hostname(node),
            config_url=None if data is None else self.urls.real_config(node),
            config_bytes=data,
            ca_pem=self.ca_pem(),
        )
        return encode(stub)
