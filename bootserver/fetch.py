"""Download from upstream with aiohttp's client: small documents in memory, artifacts to the store.

Artifact downloads (:func:`download_artifact`) go through an **upstream chain**: the mirrors of the
facility first, in order, then the artifact's own location from the stream metadata. A mirror URL is
the mirror base followed by the *path* (and query) of the artifact's upstream URL: mirror
``http://m.example/fcos`` and location
``https://builds.coreos.fedoraproject.org/prod/streams/stable/builds/42.1/x86_64/k`` give
``http://m.example/fcos/prod/streams/stable/builds/42.1/x86_64/k`` (see :func:`source_urls`). A source
that answers 404 or another error status, drops the connection, times out, or sends bytes with the wrong
sha256 falls through to the next (a warning on logger ``bootserver.fetch``); the source actually used
is returned, and logged by the caller (``sync-images`` prints it, the server logs it at INFO).

Resume: bytes land in ``cache_dir/tmp/<sha256>.part`` (see :mod:`bootserver.store`), which survives an
interrupted download. The next request sends ``Range: bytes=<length>-``: a ``206`` appends, a ``200``
(the source ignores ``Range``) starts over, and resumed bytes that fail the sha256 are thrown away and
the artifact is fetched again from byte 0.

Retry: when the whole chain fails with a transient error (5xx, 408, 429, a connection reset, a timeout,
a short body) it is tried again with exponential backoff and jitter (``tenacity``), at most
:attr:`RetryPolicy.attempts` times; other 4xx answers fail at once.

Errors: every failure becomes a :class:`~bootserver.errors.FetchError` naming the URL; a wrong sha256
an :class:`~bootserver.errors.IntegrityError`; a full disk a :class:`~bootserver.errors.DiskFullError`.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol, Sequence
from urllib.parse import urlsplit

import aiohttp
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential, wait_random

from . import __version__
from .errors import DiskFullError, FetchError, IntegrityError
from .store import ArtifactStore, ArtifactWriter
from .streams import Artifact, Release

log = logging.getLogger("bootserver.fetch")

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


class TransientFetchError(FetchError):
    """A failure worth retrying: 5xx, 408, 429, a dropped connection, a timeout, a short body."""


#: HTTP statuses that are retried (besides every 5xx).
RETRY_STATUSES = frozenset({408, 429})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently a failing upstream chain is retried.

    ``attempts`` in total (first try included); the wait before attempt *n* grows exponentially from
    ``initial`` seconds, capped at ``maximum`` seconds, plus up to ``jitter`` seconds of random jitter.
    """

    attempts: int = 5
    initial: float = 1.0
    maximum: float = 30.0
    jitter: float = 1.0


#: ``(bytes_done, total_bytes_or_None)`` after every chunk. ``bytes_done`` smaller than before means
#: the download threw bytes away (a restart from that offset).
Progress = Callable[[int, "int | None"], None]


def source_urls(url: str, mirrors: Sequence[str] = ()) -> list[str]:
    """The upstream chain for an artifact at ``url``: each mirror base + ``url``'s path (and query),
    then ``url`` itself. Mirror bases have no trailing ``/`` (the config strips it)."""
    parts = urlsplit(url)
    tail = parts.path + (f"?{parts.query}" if parts.query else "")
    return [m.rstrip("/") + tail for m in mirrors] + [url]


_CONTENT_RANGE_RE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


def _status_error(url: str, resp: aiohttp.ClientResponse) -> FetchError:
    msg = f"{url}: HTTP {resp.status} {resp.reason}"
    if resp.status >= 500 or resp.status in RETRY_STATUSES:
        return TransientFetchError(msg)
    return FetchError(msg)


async def _fetch_from(session: aiohttp.ClientSession, writer: ArtifactWriter, url: str,
                      progress: Progress | None) -> None:
    """One GET of ``url`` into ``writer``, resuming with ``Range`` when it already holds bytes."""
    offset = writer.bytes_written
    headers = {"Range": f"bytes={offset}-"} if offset else {}
    try:
        async with session.get(url, headers=headers) as resp:
            if resp.status == 206 and offset:
                m = _CONTENT_RANGE_RE.match(resp.headers.get("Content-Range", ""))
                if not m or int(m[1]) != offset:
                    writer.restart()
                    if progress:
                        progress(0, None)
                    raise TransientFetchError(f"{url}: unusable Content-Range "
                                              f"{resp.headers.get('Content-Range')!r}; starting over")
                total: int | None = None if m[3] == "*" else int(m[3])
                log.debug("%s: resuming at byte %d", url, offset)
            elif resp.status == 200:
                if offset:
                    log.info("%s: ignores Range; starting over from byte 0", url)
                    writer.restart()
                    if progress:
                        progress(0, None)
                total = resp.content_length
            elif resp.status == 416 and offset:
                writer.restart()
                if progress:
                    progress(0, None)
                raise TransientFetchError(f"{url}: HTTP 416 for a resume at byte {offset}; starting over")
            else:
                raise _status_error(url, resp)
            writer.expected_size = total
            if total is not None:
                needed = total - writer.bytes_written
                free = shutil.disk_usage(writer.store.tmp).free
                if needed > free:
                    raise DiskFullError(writer.dest, needed, free)
            if progress:
                progress(writer.bytes_written, total)
            async for chunk in resp.content.iter_chunked(CHUNK_SIZE):
                writer.write(chunk)
                if progress:
                    progress(writer.bytes_written, total)
            if total is not None and writer.bytes_written != total:
                raise TransientFetchError(f"{url}: short body: {writer.bytes_written} of {total} bytes")
    except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as e:
        raise TransientFetchError(f"{url}: {type(e).__name__}: {e}") from None


async def _try_chain(session: aiohttp.ClientSession, writer: ArtifactWriter, sources: Sequence[str],
                     progress: Progress | None, on_verified: Callable[[], None] | None = None) -> str:
    """Try each source in order until one yields bytes with the right sha256; publish; return it."""
    last = len(sources) - 1
    for i, url in enumerate(sources):
        try:
            await _fetch_from(session, writer, url, progress)
            try:
                writer.check(url)
            except IntegrityError:
                if writer.resumed_from == 0:
                    raise
                log.warning("%s: resumed download fails the sha256; fetching it again from byte 0", url)
                writer.restart()
                if progress:
                    progress(0, None)
                await _fetch_from(session, writer, url, progress)
                writer.check(url)
            if on_verified:
                on_verified()
            await asyncio.to_thread(writer.commit, url)
            return url
        except IntegrityError as e:
            writer.restart()
            if progress:
                progress(0, None)
            if i == last:
                raise
            log.warning("%s; trying the next source", e)
        except FetchError as e:
            if i == last:
                raise
            log.warning("%s; trying the next source", e)
    raise AssertionError("unreachable")


class FetchObserver(Protocol):
    """Told about every upstream artifact download (e.g. :class:`bootserver.metrics.Metrics`)."""

    def fetch_started(self, artifact: Artifact) -> None: ...

    def fetch_finished(self, artifact: Artifact, nbytes: int, seconds: float, ok: bool) -> None: ...


async def download_artifact(session: aiohttp.ClientSession, store: ArtifactStore, release: Release,
                            artifact: Artifact, *, mirrors: Sequence[str] = (),
                            progress: Progress | None = None, retry: RetryPolicy = RetryPolicy(),
                            on_open: Callable[[Path], None] | None = None,
                            on_verified: Callable[[], None] | None = None,
                            observer: FetchObserver | None = None, exclusive: bool = False) -> tuple[int, str]:
    """Download ``artifact`` into the store through the upstream chain, hashing while it streams, and
    publish it only if its sha256 matches. Returns ``(size in bytes, the source URL used)``.

    ``mirrors`` are base URLs tried before the artifact's own location (see the module docstring);
    ``progress(bytes_done, total_or_None)`` is called after every chunk; ``on_open(path)`` once with the
    temp file being written (readers may stream from it); ``on_verified()`` once the complete bytes in it
matched the sha256, before the fsync and the rename that publish them. Raises :class:`FetchError` (network, HTTP
    status, short body, after the retries), :class:`~bootserver.errors.IntegrityError` (sha256
    mismatch from every source) or :class:`~bootserver.errors.DiskFullError`; in every case nothing is
    published. A partial download stays in ``tmp/<sha256>.part`` after a network failure or a
    cancellation, for the next call to resume; it is removed after an integrity or disk-full error.
    ``observer`` is told when the download starts and ends (bytes in the file, seconds, success).

    With ``exclusive``, raises :class:`~bootserver.store.PartialBusy` before any request when another
    process is downloading the artifact (it holds ``tmp/<sha256>.part``), and
    :class:`~bootserver.store.AlreadyCached` when it was published meanwhile; the observer is not told.
    """
    writer = store.writer(release, artifact, resume=True, exclusive=exclusive)
    # hashing a resumed partial (up to ~1 GB) runs off the event loop
    await asyncio.to_thread(writer.__enter__)
    if observer is None:
        return await _download(writer, session, release, artifact, mirrors, progress, retry, on_open, on_verified)
    started = time.monotonic()
    received, last = [0], [0]

    def counting(done: int, total: int | None) -> None:
        # bytes that arrived from upstream, over restarts (a restart reports done=0)
        if done > last[0]:
            received[0] += done - last[0]
        last[0] = done
        if progress:
            progress(done, total)

    observer.fetch_started(artifact)
    ok = False
    try:
        result = await _download(writer, session, release, artifact, mirrors, counting, retry, on_open,
                                 on_verified)
        ok = True
        return result
    finally:
        observer.fetch_finished(artifact, received[0], time.monotonic() - started, ok)


async def _download(writer: ArtifactWriter, session: aiohttp.ClientSession, release: Release,
                    artifact: Artifact, mirrors: Sequence[str], progress: Progress | None, retry: RetryPolicy,
                    on_open: Callable[[Path], None] | None, on_verified: Callable[[], None] | None
                    ) -> tuple[int, str]:
    """Download into the entered ``writer`` (closed here in every case)."""
    sources = source_urls(artifact.url, mirrors)
    try:
        if writer.bytes_written:
            log.debug("%s: found %d bytes of an earlier download in %s", artifact.url, writer.bytes_written,
                      writer.path)
        if on_open:
            on_open(writer.path)
        retrying = AsyncRetrying(
            stop=stop_after_attempt(max(1, retry.attempts)),
            wait=wait_exponential(multiplier=retry.initial, max=retry.maximum) + wait_random(0, retry.jitter),
            retry=retry_if_exception_type(TransientFetchError),
            reraise=True,
            before_sleep=lambda rs: log.warning("%s: attempt %d failed (%s); retrying", artifact.url,
                                                rs.attempt_number, rs.outcome.exception() if rs.outcome else ""),
        )
        async for attempt in retrying:
            with attempt:
                used = await _try_chain(session, writer, sources, progress, on_verified)
        size = writer.bytes_written
    except BaseException as e:
        writer.__exit__(type(e), e, e.__traceback__)
        raise
    writer.__exit__(None, None, None)
    log.debug("%s/%s/%s/%s: fetched %d bytes from %s", release.stream, release.arch, release.version,
             artifact.filename, size, used)
    return size, used
