"""The one place that builds the URLs bootserver hands out.

Layout (relative to ``server.base_url``, or for artifacts to the node's facility ``base_url``)::

    /ipxe/<node>                                   the node's iPXE script (its chain URL)
    /boot.ipxe?mac=<mac>                           generic entry, node chosen by selector
    /ignition/<node>                               the node's merge-style Ignition stub
    /ignition/<node>/config                        the node's real Ignition config, byte for byte
    /artifacts/<stream>/<arch>/<release>/<file>    a cached live PXE artifact
"""

from __future__ import annotations

from urllib.parse import quote

from .config import Config
from .streams import Artifact, Release


class Urls:
    """Build absolute URLs for a config. Node and stream names are checked plain names already."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.base = config.server.effective_base_url

    def chain(self, node: str) -> str:
        """The node's chain URL: what Equinix's iPXE fetches (``ipxe_script_url``)."""
        return f"{self.base}/ipxe/{quote(node)}"

    def userdata(self, node: str) -> str:
        """The ``#!ipxe`` userdata that chains to the node's script (for ``userdata`` instead of a URL)."""
        return f"#!ipxe\nchain --autofree {self.chain(node)}\n"

    def stub(self, node: str) -> str:
        """The node's merge-style Ignition stub."""
        return f"{self.base}/ignition/{quote(node)}"

    def real_config(self, node: str) -> str:
        """The node's real Ignition config, which the stub merges."""
        return f"{self.base}/ignition/{quote(node)}/config"

    def artifact_base(self, node: str) -> str:
        """Base URL for a node's artifacts: its facility's ``base_url`` when set, else ours."""
        facility = self.config.nodes[node].facility
        if facility is not None:
            fb = self.config.facilities[facility].base_url
            if fb:
                return fb
        return self.base

    def artifact(self, node: str, release: Release, artifact: Artifact) -> str:
        """Where the node fetches one artifact of ``release``."""
        path = "/".join(quote(s) for s in (release.stream, release.arch, release.version, artifact.filename))
        return f"{self.artifact_base(node)}/artifacts/{path}"
