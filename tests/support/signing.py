"""Signed per-node URLs in tests: a fixed key and clock (:func:`fixed_signer`), the one :func:`signed`
helper, and a test client that signs per-node paths as a device would have them (:class:`SigningClient`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bootserver.http.app import SERVICE
from bootserver.signing import KeyEntry, Keyring, Signer, sign

#: A fixed signing key and clock (2026-01-01T00:00:00Z, unix seconds) for deterministic signed URLs.
FIXED_KEY = bytes(range(32))
FIXED_NOW = 1_767_225_600


def fixed_signer(now: float = FIXED_NOW, key: bytes = FIXED_KEY) -> Signer:
    """A :class:`bootserver.signing.Signer` with a fixed key and a fixed clock (unix seconds)."""
    return Signer(Keyring(Path("/nonexistent/keys.json"), [KeyEntry(key, 0)]), now=lambda: now)


def relative(url: str) -> str:
    """Path and query of an absolute URL (for the aiohttp test client)."""
    parts = urlsplit(url)
    return parts.path + ("?" + parts.query if parts.query else "")


def signed(path: str, node: str | None = None, exp: int = FIXED_NOW + 3600, key: bytes = FIXED_KEY) -> str:
    """``path`` with the query a device is handed: expiry ``exp`` (unix seconds; default an hour after
    :data:`FIXED_NOW`) and the signature of ``node`` (default: the node the path names, its second
    segment: ``/ipxe/N``, ``/iso/N.iso``) with ``key`` (default :data:`FIXED_KEY`)."""
    if node is None:
        node = path.split("/")[2].removesuffix(".iso")
    return f"{path}?exp={exp}&sig={sign(key, node, path, exp)}"


class SigningClient:
    """Wrap an aiohttp test client so per-node paths (``/ipxe/N``, ``/ignition/N``, ``/ignition/N/config``)
    are sent with a valid signature from the app's own URL builder, as a device would have them."""

    _NODE_PATH = re.compile(r"^/(ipxe|ignition)/([^/?]+)(/config)?$")

    def __init__(self, client: Any) -> None:
        self.client = client

    def sign(self, path: str) -> str:
        m = self._NODE_PATH.match(path)
        if not m:
            return path
        urls = self.client.app[SERVICE].urls
        node = m.group(2)
        url = urls.chain(node) if m.group(1) == "ipxe" else (urls.real_config(node) if m.group(3) else urls.stub(node))
        return relative(url)

    async def get(self, path: str, **kwargs: Any) -> Any:
        return await self.client.get(self.sign(path), **kwargs)

    async def head(self, path: str, **kwargs: Any) -> Any:
        return await self.client.head(self.sign(path), **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)
