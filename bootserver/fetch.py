"""Download from upstream with aiohttp's client: small documents in memory, artifacts to the store.

Errors: every network failure, HTTP error status or short body becomes a
:class:`~bootserver.errors.FetchError` naming the URL; a wrong sha256 an
:class:`~bootserver.errors.IntegrityError`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable, Protocol

import aiohttp

from . import __version__
from .errors import FetchError
from .store import ArtifactStore
from .streams import Artifact, Release

#: Read size of artifact downloads (bytes).
CHUNK_SIZE = 1 << 20
USER_AGENT = f"bootserver/{__version__}"


def client_session(*, connect_timeout: float = 30.0, read_timeout: float = 60.0) -> aiohttp.ClientSession:
    """An aiohttp client session for upstream downloads.

    No total timeout (a 1 GB rootfs takes as long as it takes) but ``connect_timeout`` and a per-read
    ``read_timeout`` (seconds) so a stalled upstream fails instead of hanging.
    """
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=read_timeout)
    return aiohttp.ClientSession(timeout=timeout, headers={"User-Agent": USER_AGENT}, trust_env=True)


async def fetch_document(session: aiohttp.ClientSession, url: str, *, limit: int = 16 << 20) -> bytes:
    """GET a small document (stream metadata) into memory; at most ``limit`` bytes.

    Raises :class:`FetchError` on a network error, a non-200 status or a body over ``limit``.
    """
    try:
        async with session.get(url) as resp:
            if resp.status != 200:
                raise FetchError(f"{url}: HTTP {resp.status} {resp.reason}")
            data = bytearray()
            async for chunk in resp.content.iter_chunked(65536):
                data += chunk
                if len(data) > limit:
                    raise FetchError(f"{url}: larger than {limit} bytes")
            return bytes(data)
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        raise FetchError(f"{url}: {type(e).__name__}: {e}") from None


class FetchObserver(Protocol):
    """Told about every upstream artifact download (e.g. :class:`bootserver.metrics.Metrics`)."""

    def fetch_started(self, artifact: Artifact) -> None: ...

    def fetch_finished(self, artifact: Artifact, nbytes: int, seconds: float, ok: bool) -> None: ...


async def download_artifact(session: aiohttp.ClientSession, store: ArtifactStore, release: Release,
                            artifact: Artifact, *, progress: Callable[[int, int | None], None] | None = None,
                            observer: FetchObserver | None = None) -> int:
    """Download ``artifact`` into the store (see :func:`_download`); ``observer`` is told when the
    download starts and when it ends (bytes received, seconds, success). Returns the size in bytes;
    raises as :func:`_download`."""
    if observer is None:
        return await _download(session, store, release, artifact, progress, None)
    counted = [0]
    start = time.monotonic()
    observer.fetch_started(artifact)
    ok = False
    try:
        size = await _download(session, store, release, artifact, progress, counted)
        ok = True
        return size
    finally:
        observer.fetch_finished(artifact, counted[0], time.monotonic() - start, ok)


async def _download(session: aiohttp.ClientSession, store: ArtifactStore, release: Release,
                    artifact: Artifact, progress: Callable[[int, int | None], None] | None,
                    counted: list[int] | None) -> int:
    """Download ``artifact`` into the store, hashing while it streams; publish it only if correct.

    ``progress(bytes_done, total_or_None)`` is called after every chunk. Returns the size in bytes.
    Raises :class:`FetchError` (network, HTTP status, short body) or
    :class:`~bootserver.errors.IntegrityError` (sha256 mismatch); in both cases nothing is published
    and no temp file is left behind.
    """
    url = artifact.url
    try:
        async with session.get(url) as resp:
            if resp.status != 200:
                raise FetchError(f"{url}: HTTP {resp.status} {resp.reason}")
            total = resp.content_length
            with store.writer(release, artifact) as writer:
                async for chunk in resp.content.iter_chunked(CHUNK_SIZE):
                    writer.write(chunk)
                    if counted is not None:
                        counted[0] = writer.bytes_written
                    if progress:
                        progress(writer.bytes_written, total)
                if total is not None and writer.bytes_written != total:
                    raise FetchError(f"{url}: short body: {writer.bytes_written} of {total} bytes")
                writer.commit(url)
                return writer.bytes_written
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        raise FetchError(f"{url}: {type(e).__name__}: {e}") from None
