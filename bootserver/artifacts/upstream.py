"""The upstream: where stream metadata and artifacts come from (:class:`Upstream`, one per service,
owning the aiohttp client session, the mirror chain and the retry policy). Small documents land in
memory, artifacts in the cache.

Artifact downloads (:meth:`Upstream.download`) go through an **upstream chain**: the mirrors of the
facility first, in order, then the artifact's own location from the stream metadata. A mirror URL is
the mirror base followed by the *path* (and query) of the artifact's upstream URL: mirror
``http://m.example/fcos`` and location
``https://builds.coreos.fedoraproject.org/prod/streams/stable/builds/42.1/x86_64/k`` give
``http://m.example/fcos/prod/streams/stable/builds/42.1/x86_64/k`` (see :func:`source_urls`). A source
that answers 404 or another error status, drops the connection, times out, or sends bytes with the wrong
sha256 falls through to the next (a warning on logger ``bootserver.fetch``); the source actually used
is returned, and logged by the caller (``sync-images`` prints it, the server logs it at INFO).

Resume: bytes land in ``cache_dir/tmp/<sha256>.part`` (see :mod:`bootserver.artifacts.cache`), which survives an
interrupted download. The next request sends ``Range: bytes=<length>-``: a ``206`` appends, a ``200``
(the source ignores ``Range``) starts over, and resumed bytes that fail the sha256 are thrown away and
the artifact is fetched again from byte 0.

Retry: one policy (:class:`RetryPolicy`, ``tenacity``) for stream metadata and artifacts. When a GET of
a document, or an artifact's whole chain, fails with a transient error (5xx, 408, 429, a connection
reset, a timeout, a body short of its ``Content-Length``) it is tried again with exponential backoff and
jitter, at most :attr:`RetryPolicy.attempts` times; other 4xx answers fail at once. The read timeout
(config ``upstream.read_timeout``) bounds each wait for bytes, so a hung upstream costs at most
``attempts`` x ``read_timeout`` seconds plus the backoff.

Errors: every failure becomes a :class:`~bootserver.errors.FetchError` naming the URL; a wrong sha256
an :class:`~bootserver.errors.IntegrityError`; a full disk a :class:`~bootserver.errors.DiskFullError`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import unquote, urlsplit

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential, wait_random

from .. import __version__
from ..errors import DiskFullError, FetchError, IntegrityError
from ..files import open_file
from ..streams import Artifact, Release
from .cache import ArtifactCache, ArtifactWriter
from .openpgp import SignatureError, SignaturePolicy, StreamVerifier, default_keyring

if TYPE_CHECKING:
    import aiohttp

    from ..config import Config

log = logging.getLogger("bootserver.fetch")

#: Read size of artifact downloads (bytes).
CHUNK_SIZE = 1 << 20
USER_AGENT = f"bootserver/{__version__}"


def client_session(*, connect_timeout: float = 30.0, read_timeout: float = 60.0) -> aiohttp.ClientSession:
    """An aiohttp client session for upstream downloads.

    No total timeout (a 1 GB rootfs takes as long as it takes) but ``connect_timeout`` and a per-read
    ``read_timeout`` (seconds) so a stalled upstream fails instead of hanging.
    """
    import aiohttp  # on first use: a command that downloads nothing (check-config) starts without it

    timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=read_timeout)
    return aiohttp.ClientSession(timeout=timeout, headers={"User-Agent": USER_AGENT}, trust_env=True)


def _client_error() -> type[Exception]:
    """``aiohttp.ClientError`` (aiohttp is loaded by then: a session exists)."""
    import aiohttp

    return aiohttp.ClientError


async def _get_document(session: aiohttp.ClientSession, url: str, limit: int) -> bytes:
    """One GET of a small document into memory. Raises :class:`TransientFetchError` (5xx, 408, 429,
    network error, timeout, a body short of its ``Content-Length``) or :class:`FetchError`."""
    try:
        async with session.get(url) as resp:
            if resp.status != 200:
                raise _status_error(url, resp)
            data = bytearray()
            async for chunk in resp.content.iter_chunked(65536):
                data += chunk
                if len(data) > limit:
                    raise FetchError(f"{url}: larger than {limit} bytes")
            return bytes(data)
    except (TimeoutError, _client_error(), ConnectionError) as e:
        raise TransientFetchError(f"{url}: {type(e).__name__}: {e}") from None


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


def source_urls(url: str, mirrors: Sequence[str] = ()) -> list[str]:
    """The upstream chain for an artifact at ``url``: each mirror base + ``url``'s path (and query),
    then ``url`` itself. Mirror bases have no trailing ``/`` (the config strips it). A ``file://`` URL
    (a local release's file) is its own only source."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        return [url]
    tail = parts.path + (f"?{parts.query}" if parts.query else "")
    return [m.rstrip("/") + tail for m in mirrors] + [url]


_CONTENT_RANGE_RE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


def _status_error(url: str, resp: aiohttp.ClientResponse) -> FetchError:
    msg = f"{url}: HTTP {resp.status} {resp.reason}"
    if resp.status >= 500 or resp.status in RETRY_STATUSES:
        return TransientFetchError(msg)
    return FetchError(msg)


async def _read_local(writer: ArtifactWriter, url: str, hooks: DownloadHooks) -> None:
    """Copy the file of a ``file:///path`` URL into ``writer`` (from where it stands when it already holds
    bytes), in :data:`CHUNK_SIZE` reads off the event loop, no more than the file's size when opened. The
    file is what was opened, never a link in its place nor a fifo or device (:func:`~bootserver.files.open_file`: a
    less trusted user may write the folder between the import and this read). Raises
    :class:`FetchError` naming the URL when the file cannot be read (not retried)."""
    try:
        path = Path(unquote(urlsplit(url).path))
        fd = await asyncio.to_thread(open_file, path.parent, path.name)
    except OSError as e:
        raise FetchError(f"{url}: cannot read: {e.strerror}") from None
    with open(fd, "rb") as f:
        total = os.fstat(fd).st_size
        if writer.bytes_written > total:
            _restart(writer, hooks, f"{url}: shorter than the bytes kept; starting over")
        f.seek(writer.bytes_written)
        writer.expected_size = total
        hooks.progress(writer.bytes_written, total)
        while writer.bytes_written < total and (
                chunk := await asyncio.to_thread(f.read, min(CHUNK_SIZE, total - writer.bytes_written))):
            writer.write(chunk)
            hooks.progress(writer.bytes_written, total)


async def _fetch_from(session: aiohttp.ClientSession, writer: ArtifactWriter, url: str,
                      hooks: DownloadHooks) -> None:
    """One GET of ``url`` into ``writer``, resuming with ``Range`` when it already holds bytes (a
    ``file://`` URL: :func:`_read_local`)."""
    if url.startswith("file://"):
        await _read_local(writer, url, hooks)
        return
    offset = writer.bytes_written
    headers = {"Range": f"bytes={offset}-"} if offset else {}
    try:
        async with session.get(url, headers=headers) as resp:
            if resp.status == 206 and offset:
                m = _CONTENT_RANGE_RE.match(resp.headers.get("Content-Range", ""))
                if not m or int(m[1]) != offset:
                    reason = (f"{url}: unusable Content-Range {resp.headers.get('Content-Range')!r}; "
                              "starting over")
                    _restart(writer, hooks, reason)
                    raise TransientFetchError(reason)
                total: int | None = None if m[3] == "*" else int(m[3])
                log.debug("%s: resuming at byte %d", url, offset)
            elif resp.status == 200:
                if offset:
                    log.info("%s: ignores Range; starting over from byte 0", url)
                    _restart(writer, hooks, f"{url}: ignores Range; starting over from byte 0")
                total = resp.content_length
            elif resp.status == 416 and offset:
                reason = f"{url}: HTTP 416 for a resume at byte {offset}; starting over"
                _restart(writer, hooks, reason)
                raise TransientFetchError(reason)
            else:
                raise _status_error(url, resp)
            writer.expected_size = total
            if total is not None:
                needed = total - writer.bytes_written
                free = shutil.disk_usage(writer.cache.tmp).free
                if needed > free:
                    raise DiskFullError(writer.dest, needed, free)
            hooks.progress(writer.bytes_written, total)
            async for chunk in resp.content.iter_chunked(CHUNK_SIZE):
                writer.write(chunk)
                hooks.progress(writer.bytes_written, total)
            if total is not None and writer.bytes_written != total:
                raise TransientFetchError(f"{url}: short body: {writer.bytes_written} of {total} bytes")
    except (TimeoutError, _client_error(), ConnectionError) as e:
        raise TransientFetchError(f"{url}: {type(e).__name__}: {e}") from None


class DownloadHooks:
    """What a download tells its caller while it runs; every method does nothing here (subclass it).

    Called in this order: :meth:`opened` once, :meth:`progress` after every chunk, :meth:`restarted`
    each time bytes already written are thrown away (followed by ``progress(0, None)``), :meth:`verified`
    once the complete bytes matched the sha256 (before the fsync and the rename that publish them).
    """

    def opened(self, path: str) -> None:
        """The temp file being written (readers may stream from it): ``path`` opens that very file
        (``/proc/self/fd/N``, :attr:`~bootserver.artifacts.cache.ArtifactWriter.reader_path`)."""

    def progress(self, done: int, total: int | None) -> None:
        """``done`` bytes in the temp file of ``total`` (bytes, ``None`` while unknown)."""

    def restarted(self, reason: str) -> None:
        """The bytes written so far are being thrown away, for ``reason`` (one line: a sha256 mismatch
        from a source, an upstream that ignored ``Range``, ...)."""

    def verified(self) -> None:
        """The complete bytes matched the sha256."""


def _restart(writer: ArtifactWriter, hooks: DownloadHooks, reason: str) -> None:
    hooks.restarted(reason)
    writer.restart()
    hooks.progress(0, None)


async def _try_chain(session: aiohttp.ClientSession, writer: ArtifactWriter, sources: Sequence[str],
                     hooks: DownloadHooks) -> str:
    """Try each source in order until one yields bytes with the right sha256; publish; return it."""
    last = len(sources) - 1
    for i, url in enumerate(sources):
        try:
            await _fetch_from(session, writer, url, hooks)
            try:
                writer.check(url)
            except IntegrityError as e:
                if writer.resumed_from == 0:
                    raise
                log.warning("%s: resumed download fails the sha256; fetching it again from byte 0", url)
                _restart(writer, hooks, f"{e} (resumed bytes); fetching it again from byte 0")
                await _fetch_from(session, writer, url, hooks)
                writer.check(url)
            hooks.verified()
            await asyncio.to_thread(writer.commit, url)
            return url
        except IntegrityError as e:
            _restart(writer, hooks, str(e))
            if i == last:
                raise
            log.warning("%s; trying the next source", e)
        except SignatureError:  # the bytes matched their sha256: another source gives the same verdict
            raise
        except FetchError as e:
            if i == last:
                raise
            log.warning("%s; trying the next source", e)
    raise AssertionError("unreachable")


class FetchObserver(Protocol):
    """Told about every upstream artifact download (e.g. :class:`bootserver.metrics.Metrics`)."""

    def fetch_started(self, artifact: Artifact) -> None: ...

    def fetch_finished(self, artifact: Artifact, nbytes: int, seconds: float, ok: bool) -> None: ...


class _Counting(DownloadHooks):
    """Passes everything on to ``inner`` and counts the bytes that arrived from upstream over restarts."""

    def __init__(self, inner: DownloadHooks) -> None:
        self.inner = inner
        self.received = 0
        self._last = 0

    def opened(self, path: str) -> None:
        self.inner.opened(path)

    def progress(self, done: int, total: int | None) -> None:
        if done > self._last:
            self.received += done - self._last
        self._last = done
        self.inner.progress(done, total)

    def restarted(self, reason: str) -> None:
        self.inner.restarted(reason)

    def verified(self) -> None:
        self.inner.verified()


class Upstream:
    """Where artifacts and stream metadata come from, and how patiently: one aiohttp client session,
    the mirror chain, one retry policy for documents and artifacts alike, and the timeouts.

    ``mirrors`` are base URLs tried before an artifact's own location (see the module docstring);
    ``retry`` applies to every GET of stream metadata and every artifact's chain (a public attribute:
    tests set a faster one); ``connect_timeout`` and ``read_timeout`` are seconds (the read timeout
    bounds each wait for bytes, not the whole transfer: config key ``upstream.read_timeout``).

    The session is opened on first use, in the running event loop, and closed by :meth:`close` (or
    ``async with``). An :class:`Upstream` nobody uses opens nothing.
    """

    def __init__(self, *, mirrors: Sequence[str] = (), retry: RetryPolicy = RetryPolicy(),
                 connect_timeout: float = 30.0, read_timeout: float = 60.0,
                 signatures: SignaturePolicy | None = None) -> None:
        self.mirrors = tuple(mirrors)
        #: which artifacts have their OpenPGP signature checked, with which keys (``None``: none)
        self.signatures = signatures
        self.retry = retry
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def for_config(cls, config: Config, facility: str | None = None) -> Upstream:
        """The upstream of ``config``: the mirrors of ``facility`` (default ``server.facility``),
        ``upstream.read_timeout``, and the signature checks (``upstream.signature_keys``, each stream's
        ``verify_signatures``)."""
        return cls(mirrors=config.mirrors(facility), read_timeout=config.upstream.read_timeout,
                   signatures=cls.signature_policy(config))

    @staticmethod
    def signature_policy(config: Config) -> SignaturePolicy:
        """Which artifacts of ``config``'s streams have their OpenPGP signature checked, against which
        keyring (``upstream.signature_keys``, relative to the config's folder, else Fedora's shipped keys)."""
        keys = config.upstream.signature_keys
        return SignaturePolicy(config.base_dir / keys if keys else default_keyring(),
                               {name: s.verify_signatures for name, s in config.streams.items()})

    @property
    def session(self) -> aiohttp.ClientSession:
        """The client session (opened now if needed; call from a coroutine)."""
        if self._session is None or self._session.closed:
            self._session = client_session(connect_timeout=self.connect_timeout,
                                           read_timeout=self.read_timeout)
        return self._session

    async def close(self) -> None:
        """Close the session if one was opened (it reopens on next use)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> Upstream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _retrying(self, what: str) -> AsyncRetrying:
        """The one retry policy: transient failures only, exponential backoff with jitter."""
        retry = self.retry
        return AsyncRetrying(
            stop=stop_after_attempt(max(1, retry.attempts)),
            wait=wait_exponential(multiplier=retry.initial, max=retry.maximum) + wait_random(0, retry.jitter),
            retry=retry_if_exception_type(TransientFetchError),
            reraise=True,
            before_sleep=lambda rs: log.warning(
                "%s: attempt %d failed (%s); retrying", what, rs.attempt_number,
                rs.outcome.exception() if rs.outcome else ""),
        )

    async def document(self, url: str, *, limit: int = 16 << 20) -> bytes:
        """GET a small document (stream metadata) into memory; at most ``limit`` bytes, retried as
        artifacts are (5xx, 408, 429, a dropped connection, a timeout, a body short of its
        ``Content-Length``).

        Raises :class:`FetchError` naming ``url`` (after the retries, or at once for another 4xx or a
        body over ``limit``).
        """
        async for attempt in self._retrying(url):
            with attempt:
                return await _get_document(self.session, url, limit)
        raise AssertionError("unreachable")

    async def download(self, cache: ArtifactCache, release: Release, artifact: Artifact, *,
                       hooks: DownloadHooks | None = None, observer: FetchObserver | None = None,
                       exclusive: bool = False) -> tuple[int, str]:
        """Download ``artifact`` into the cache through the upstream chain, hashing while it streams,
        and publish it only if its sha256 matches. Returns ``(size in bytes, the source URL used)``.

        ``hooks`` hear of the temp file, progress, restarts and the sha256 match (see
        :class:`DownloadHooks`). Raises :class:`FetchError` (network, HTTP status, short body, after the
        retries), :class:`~bootserver.errors.IntegrityError` (sha256 mismatch from every source) or
        :class:`~bootserver.errors.DiskFullError`; in every case nothing is published. A partial
        download stays in ``tmp/<sha256>.part`` after a network failure or a cancellation, for the next
        call to resume; it is removed after an integrity or disk-full error. ``observer`` is told when
        the download starts and ends (bytes received, seconds, success).

        With ``exclusive``, raises :class:`~bootserver.artifacts.cache.PartialBusy` before any request when another
        process is downloading the artifact (it holds ``tmp/<sha256>.part``), and
        :class:`~bootserver.artifacts.cache.AlreadyCached` when it was published meanwhile; the observer is not told.
        """
        verifier = await self._verifier(release, artifact)
        writer = cache.writer(release, artifact, resume=True, exclusive=exclusive, verifier=verifier)
        # hashing a resumed partial (up to ~1 GB) runs off the event loop
        await asyncio.to_thread(writer.__enter__)
        hooks = hooks or DownloadHooks()
        if observer is None:
            return await self._download(writer, release, artifact, hooks)
        started = time.monotonic()
        counting = _Counting(hooks)
        observer.fetch_started(artifact)
        ok = False
        try:
            result = await self._download(writer, release, artifact, counting)
            ok = True
            return result
        finally:
            observer.fetch_finished(artifact, counting.received, time.monotonic() - started, ok)

    async def _verifier(self, release: Release, artifact: Artifact) -> StreamVerifier | None:
        """The OpenPGP check of ``artifact`` (its signature fetched now, with the retry policy), or
        ``None`` when it is checked by sha256 only (:meth:`SignaturePolicy.keys_for`). Raises
        :class:`SignatureError` when the signature cannot be had (missing upstream)."""
        keys = self.signatures.keys_for(release, artifact) if self.signatures is not None else None
        if keys is None or artifact.signature is None:
            return None
        what = f"{release.stream} {release.version} {artifact.filename}"
        try:
            signature = await self.document(artifact.signature, limit=1 << 20)
        except FetchError as e:
            raise SignatureError(f"{what}: its OpenPGP signature cannot be fetched ({e}); nothing is published "
                                 "without it") from None
        return StreamVerifier(what, signature, keys)

    async def _download(self, writer: ArtifactWriter, release: Release, artifact: Artifact,
                        hooks: DownloadHooks) -> tuple[int, str]:
        """Download into the entered ``writer`` (closed here in every case)."""
        sources = source_urls(artifact.url, self.mirrors)
        try:
            if writer.bytes_written:
                log.debug("%s: found %d bytes of an earlier download in %s", artifact.url,
                          writer.bytes_written, writer.path)
            hooks.opened(writer.reader_path)
            async for attempt in self._retrying(artifact.url):
                with attempt:
                    used = await _try_chain(self.session, writer, sources, hooks)
            size = writer.bytes_written
        except BaseException as e:
            writer.__exit__(type(e), e, e.__traceback__)
            raise
        writer.__exit__(None, None, None)
        log.debug("%s/%s/%s/%s: fetched %d bytes from %s", release.stream, release.arch, release.version,
                  artifact.filename, size, used)
        return size, used
