"""Read-through artifact serving: a cache miss is fetched from upstream once, however many ask.

When 200 devices in one facility power on together, the first request for an uncached 1 GB rootfs
must not become 200 downloads. :class:`ReadThrough` keeps a **single-flight registry** of downloads
keyed by the artifact's cache path: the first request for a missing artifact starts one download task
(:meth:`bootserver.artifacts.upstream.Upstream.download`, with the upstream's mirror chain, resume and retries);
every request for the same artifact while it runs gets a :class:`Transfer` that streams the bytes
from the temp file as they arrive.

Guarantees:

* An URL maps to an artifact only through the stream catalog's current metadata: ``stream``, ``arch``,
  ``release`` and ``file`` must name an artifact of the stream's current release, else it is unknown
  (``None``, a 404 in the server). With ``read_through: false`` a miss is always unknown.
* The sha256 is checked before the file is published, and a transfer never sends the last byte of an
  artifact before the check passed (it may send it while the verified file is being fsynced and
  renamed into place: the bytes are right even if publishing then fails). When it fails (or the
  download fails or throws bytes away that a client already received), the transfer raises with the
  reason (a sha256 mismatch says so), and the server aborts the connection, so a client sees an
  incomplete body (short of ``Content-Length``), never a complete-looking wrong one.
* **Across processes** (``serve --workers N``): the download takes the lock on
  ``tmp/<sha256>.part`` (see :mod:`bootserver.artifacts.cache`) before any upstream request. A process that
  finds it locked by another process does not download: it *follows* that download, polling the
  growing file every :data:`FOLLOW_POLL` seconds and the size the writer recorded, and streams it to
  its clients under the same rules. The last byte goes out only once the file is published (renamed
  under ``artifacts/`` with its sha256 sidecar, by a writer that checked the sha256 first). When the
  lock is released without a published file, the followers' clients that already got bytes are
  aborted (short body); if none got any, the follower downloads the artifact itself (resuming).
  So N workers and any number of ``sync-images`` runs (which use :meth:`ReadThrough.fetch`) cause one
  upstream download per artifact.
* A client that goes away does not cancel the download: it runs in its own task, owned by the
  registry, until it finishes; :meth:`ReadThrough.close` cancels what is still running at shutdown
  (the partial stays in ``tmp/`` and the next download resumes it).

This module does not import aiohttp's web layer; the handler in :mod:`bootserver.http.app` stays thin.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from ..config import Config
from ..errors import FetchError, MetadataError
from ..streams import SAFE_SEGMENT_RE, Artifact, Release
from .cache import AlreadyCached, ArtifactCache, PartialBusy, Published
from .catalog import StreamCatalog
from .upstream import CHUNK_SIZE, DownloadHooks, FetchObserver, Upstream

log = logging.getLogger("bootserver.readthrough")

#: Seconds between two looks at a download another process runs (file size, lock, published file).
FOLLOW_POLL = 0.05
#: A transfer that caught up with its download waits until this many more bytes (or the end) can be
#: sent before it sends again, instead of waking (and calling sendfile) for every chunk from upstream.
RANGE_MIN = 256 * 1024


class Fetched(NamedTuple):
    """What :meth:`ReadThrough.fetch` did: the published ``path``, its ``size`` in bytes, the upstream
    ``source`` URL it came from (``None`` when it was cached already or another process downloaded
    it), and whether it was ``fetched`` now (by this process or one it followed)."""

    path: Path
    size: int
    source: str | None
    fetched: bool


class Download(DownloadHooks):
    """One in-flight download of one artifact, shared by every :class:`Transfer` of it; the hooks of
    the upstream download (or of the follower of another process's download) that fills it.

    ``total`` is the size in bytes once upstream told it; ``available`` the bytes in the temp file so
    far; ``finished`` and ``error`` say how it ended; ``source`` the URL it came from (``None`` when
    another process downloaded it); ``listeners`` get every :meth:`progress` call too.
    """

    def __init__(self, release: Release, artifact: Artifact, dest: Path) -> None:
        self.release = release
        self.artifact = artifact
        self.dest = dest
        self.total: int | None = None
        self.available = 0
        self.finished = False
        self.hash_ok = False
        self.error: BaseException | None = None
        self.task: asyncio.Task[Any] | None = None
        self.source: str | None = None
        #: A client's request started or joined it (else the fetch() caller reports how it ended).
        self.for_clients = False
        self.readers: set[Transfer] = set()
        self.listeners: list[DownloadHooks] = []
        self._restart_reason = "download restarted"
        self._fd: int | None = None
        #: The published file's read descriptor, kept by :meth:`finish` (see :meth:`drop_published`).
        self.published: int | None = None
        self._changed = asyncio.Event()
        self._thresholds: list[tuple[int, asyncio.Future[None]]] = []

    @property
    def ok(self) -> bool:
        """True once the artifact is verified and published."""
        return self.finished and self.error is None

    def _notify(self) -> None:
        """A change of state (size known, verified, ended, bytes thrown away): wake every waiter."""
        self._changed.set()
        self._changed = asyncio.Event()
        self._wake(None)

    def _wake(self, sendable: int | None) -> None:
        """Wake the :meth:`wait_bytes` callers whose threshold ``sendable`` reached (all: ``None``)."""
        keep = []
        for threshold, fut in self._thresholds:
            if sendable is None or threshold <= sendable:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((threshold, fut))
        self._thresholds = keep

    async def wait_bytes(self, threshold: int) -> None:
        """Return once :meth:`sendable` reaches ``threshold`` bytes, or at the next change of state."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._thresholds.append((threshold, fut))
        await fut

    def waiter(self) -> asyncio.Event:
        """An event set at the next change (take it *before* checking the state, then await it)."""
        return self._changed

    def opened(self, path: str) -> None:
        """Called by the downloader with the temp file it writes (``/proc/self/fd/N``): keep a read
        descriptor to it."""
        self._set_fd(os.open(path, os.O_RDONLY | os.O_CLOEXEC))

    def _set_fd(self, fd: int) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd = fd

    def reset_readers(self) -> None:
        """Make every reader (none sent a byte yet) re-open the data file: it may be a new one."""
        for r in self.readers:
            if r._fd is not None:
                os.close(r._fd)
                r._fd = None

    def sent_any(self) -> bool:
        """True when some reader already sent bytes of this download."""
        return any(r.pos > 0 for r in self.readers)

    def dup_fd(self) -> int | None:
        """A new read descriptor on the bytes (temp file while running, published file after), with a
        file position of its own (a new open file description, so a sender may read the position
        ``sendfile`` left it at, whatever other readers do)."""
        if self._fd is not None:
            return os.open(f"/proc/self/fd/{self._fd}", os.O_RDONLY)
        if self.ok and self.published is not None:
            return os.open(f"/proc/self/fd/{self.published}", os.O_RDONLY)
        return None

    def restarted(self, reason: str) -> None:
        """Called by the downloader before it throws its bytes away (``reason``: one line)."""
        self._restart_reason = reason
        for listener in self.listeners:
            listener.restarted(reason)

    def progress(self, done: int, total: int | None) -> None:
        """Called by the downloader after every chunk (bytes done, total bytes or ``None``)."""
        for listener in self.listeners:
            listener.progress(done, total)
        if done < self.available:
            for r in self.readers:
                if r.pos > done and r.broken is None:
                    r.broken = FetchError(f"{self._restart_reason}; aborting this transfer after {r.pos} "
                                          f"bytes were sent")
        if total is not None:
            if self.total is not None and total != self.total:
                for r in self.readers:
                    if r.started and r.broken is None:
                        r.broken = FetchError(f"{self.artifact.url}: size changed from {self.total} to "
                                              f"{total} bytes; aborting this transfer")
            changed = self.total != total
            self.total = total
        else:
            changed = False
        shrunk = done < self.available
        self.available = done
        if changed or shrunk:
            self._notify()
        else:
            self._wake(self.sendable())

    def verified(self) -> None:
        """Called by the downloader once all bytes matched the sha256 (before fsync and publish)."""
        self.hash_ok = True
        self._notify()

    def finish(self, error: BaseException | None) -> None:
        """Mark the download ended (``error`` ``None`` when published); wake every reader. The read
        descriptor of a published download is kept (:attr:`published`, the very file renamed into place)
        for readers that start later, until :meth:`drop_published`."""
        self.finished = True
        self.error = error
        if self._fd is not None:
            if error is None and self.published is None:
                self.published = self._fd
            else:
                os.close(self._fd)
            self._fd = None
        self._notify()

    def drop_published(self) -> None:
        """Close the descriptor :meth:`finish` kept, once no reader will start any more."""
        if self.published is not None:
            os.close(self.published)
            self.published = None

    def sendable(self) -> int:
        """How many bytes readers may send now: all once the sha256 matched, else all but the last."""
        if self.ok or (self.hash_ok and not self.finished):
            return self.available
        return max(0, self.available - 1)


class Transfer:
    """One client's view of a :class:`Download`: wait for the size, then iterate the bytes.

    Call :meth:`start`, iterate :meth:`chunks`, and :meth:`close` in every case.
    """

    def __init__(self, download: Download) -> None:
        self.download = download
        self.pos = 0
        self.started = False
        self.broken: BaseException | None = None
        self._fd: int | None = None
        download.readers.add(self)

    @property
    def sha256(self) -> str:
        """The artifact's sha256 (hex), e.g. for an ``ETag``."""
        return self.download.artifact.sha256

    async def start(self) -> int | None:
        """Wait until the size is known (or the download ended); return it in bytes (``None`` when
        upstream sent no length and the download is still running, which cannot happen once it ended).

        Raises the download's error (:class:`FetchError`, :class:`~bootserver.errors.IntegrityError`,
        :class:`~bootserver.errors.DiskFullError`) when it failed before any byte could be sent.
        """
        dl = self.download
        while True:
            ev = dl.waiter()
            if dl.finished and dl.error is not None:
                raise dl.error
            if dl.total is not None or dl.finished:
                break
            await ev.wait()
        self._fd = dl.dup_fd()
        self.started = True
        return dl.available if dl.ok else dl.total

    def fileno(self) -> int:
        """The read descriptor of the bytes (valid after :meth:`start`, until :meth:`close`); the
        offsets :meth:`ranges` yields are offsets in it."""
        if self._fd is None:
            self._fd = self.download.dup_fd()
            if self._fd is None:
                raise FetchError(f"{self.download.artifact.url}: download has no data file")
        return self._fd

    async def ranges(self) -> AsyncIterator[tuple[int, int]]:
        """Yield ``(offset, count)`` byte ranges of :meth:`fileno`, in order and as large as the
        download allows at that moment; the caller sends each before asking for the next (they are
        counted as sent when the next is asked for, or at the end).

        Raises :class:`FetchError` (or the download's own error) when the download failed, or threw
        away bytes this transfer already yielded; the caller must then abort its connection.
        """
        dl = self.download
        while True:
            if self.broken is not None:
                raise self.broken
            if dl.finished and dl.error is not None:
                raise dl.error if isinstance(dl.error, FetchError) else FetchError(
                    f"{dl.artifact.url}: download failed: {dl.error!r}")
            limit = dl.sendable()
            final = dl.ok or (dl.hash_ok and not dl.finished)
            if self.pos < limit and (final or limit - self.pos >= RANGE_MIN):
                self.fileno()
                start, count = self.pos, limit - self.pos
                self.pos = limit
                yield start, count
                continue
            if final:
                return
            await dl.wait_bytes(self.pos + RANGE_MIN)

    async def chunks(self) -> AsyncIterator[bytes]:
        """Yield the artifact's bytes in order (at most :data:`CHUNK_SIZE` each), as the download
        provides them. Raises as :meth:`ranges`."""
        async for offset, count in self.ranges():
            end = offset + count
            while offset < end:
                data = os.pread(self.fileno(), min(CHUNK_SIZE, end - offset), offset)
                if not data:
                    raise FetchError(f"{self.download.artifact.url}: temp file shorter than expected")
                offset += len(data)
                yield data

    def close(self) -> None:
        """Stop following the download (it goes on for the others) and release the file."""
        self.download.readers.discard(self)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self.download.finished and not self.download.readers:
            self.download.drop_published()


class ReadThrough:
    """Cache lookups that fall back to one shared upstream download per artifact.

    Downloads go through ``upstream`` (its mirror chain and retry policy); ``read_through: false``
    turns off the fallback of :meth:`open` (never :meth:`fetch`, which ``sync-images`` uses).
    """

    def __init__(self, config: Config, cache: ArtifactCache, catalog: StreamCatalog,
                 upstream: Upstream, *, downloads: dict[Path, Download] | None = None,
                 observer: FetchObserver | None = None) -> None:
        """``downloads``: the downloads in flight in this process by destination, shared by every config
        a server loads (:attr:`bootserver.runtime.Runtime.downloads`: a reload's new :class:`ReadThrough`
        joins a download the previous config started instead of following it as another process's);
        ``observer`` is told about every upstream download (the server's
        :class:`~bootserver.metrics.Metrics`)."""
        self.config = config
        self.cache = cache
        self.catalog = catalog
        self.upstream = upstream
        self.enabled = config.read_through
        self.observer = observer
        self._inflight: dict[Path, Download] = {} if downloads is None else downloads

    async def resolve(self, segments: tuple[str, ...]) -> tuple[Release, Artifact] | None:
        """The artifact of the current release that URL ``segments`` (stream, arch, release, file)
        name, or ``None``. Raises as :meth:`StreamCatalog.get` when the metadata cannot be had."""
        if len(segments) != 4 or not all(SAFE_SEGMENT_RE.match(s) for s in segments):
            return None
        stream, arch, version, filename = segments
        if stream not in self.config.streams:
            return None
        meta = await self.catalog.get(stream)
        release = meta.releases.get(arch)
        if release is None or release.version != version:
            return None
        artifact = next((a for a in release.artifacts if a.filename == filename), None)
        return None if artifact is None else (release, artifact)

    async def open(self, segments: tuple[str, ...]) -> Published | Transfer | None:
        """What to send for URL ``segments``: a published file opened (:class:`Published`: its descriptor,
        which the caller closes, and its recorded sha256), a :class:`Transfer` of a download in flight
        (started now if needed), or ``None`` (not cached and not a known artifact, or read-through off).
        A private release's artifact (``streams.<name>.private``) is looked for below ``private/`` only,
        and a missing one is fetched whole and checked before it is opened (never streamed while it
        comes: bytes that fail their sha256 are never sent).
        Raises :class:`~bootserver.files.LinkRefused` when a link stands anywhere from ``cache_dir`` to
        the file (nothing is served, fetched or written through it), ``FetchError``/``MetadataError``
        when the stream metadata is needed and cannot be had."""
        stream = self.config.streams.get(segments[0]) if segments else None
        if stream is None or not stream.private:
            found_file = self.cache.open_published(segments)
            if found_file is not None or not self.enabled:
                return found_file
        found = await self.resolve(segments)
        if found is None:
            return None
        release, artifact = found
        dest = self.cache.path(release, artifact)
        dl = self._inflight.get(dest)
        if dl is None:
            opened = self.cache.open_cached(release, artifact)
            if opened is not None or not self.enabled:
                return opened
        if release.private:  # checked whole before a byte goes out: a changed file is never sent
            await self.fetch(release, artifact)
            return self.cache.open_cached(release, artifact)
        if dl is None:
            dl = self._start(release, artifact, dest)
            log.info("%s: not cached; fetching it for waiting clients",
                     self.cache.relpath(release, artifact))
        dl.for_clients = True
        return Transfer(dl)

    def _start(self, release: Release, artifact: Artifact, dest: Path) -> Download:
        dl = Download(release, artifact, dest)
        self._inflight[dest] = dl
        dl.task = asyncio.create_task(self._run(dl), name=f"download {dest.name}")
        return dl

    async def _run(self, dl: Download) -> None:
        error: BaseException | None = None
        rel = self.cache.relpath(dl.release, dl.artifact)
        try:
            while True:
                try:
                    size, dl.source = await self.upstream.download(
                        self.cache, dl.release, dl.artifact, hooks=dl, observer=self.observer, exclusive=True)
                    log.log(logging.INFO if dl.for_clients else logging.DEBUG, "%s: cached %d bytes from %s",
                            rel, size, dl.source)
                    break
                except AlreadyCached:
                    self._adopt_published(dl)
                    break
                except PartialBusy:
                    pass
                if await self._follow(dl):
                    break
                if dl.sent_any():
                    raise FetchError(f"{dl.artifact.url}: the download in another process stopped without "
                                     f"publishing {rel}")
                log.info("%s: the download in another process stopped; fetching it here", rel)
                dl.reset_readers()
        except asyncio.CancelledError:
            error = FetchError(f"{dl.artifact.url}: download cancelled (server shutting down)")
            raise
        except Exception as e:  # every failure goes to the waiting clients, and the log (for clients)
            error = e
            if dl.for_clients:
                log.error("%s: read-through download failed: %s", rel, e)
        finally:
            self._inflight.pop(dl.dest, None)
            dl.finish(error)
            if not dl.readers:
                dl.drop_published()

    def _adopt_published(self, dl: Download) -> None:
        """The artifact is published: make ``dl`` a finished view of the published file (opened without
        following a link; raises ``OSError`` when it is gone or refused)."""
        found = self.cache.open_cached(dl.release, dl.artifact)
        if found is None:
            raise FetchError(f"{self.cache.relpath(dl.release, dl.artifact)}: published, then gone")
        dl._set_fd(found.fd)
        size = os.fstat(found.fd).st_size
        dl.progress(size, size)

    async def _follow(self, dl: Download) -> bool:
        """Stream a download another process runs (it holds ``tmp/<sha256>.part``) into ``dl``.

        Returns True once the artifact is published (every byte then sendable), False when that
        download stopped without publishing. Raises :class:`FetchError` when the published file is
        not the one followed and bytes of the followed one were already sent.
        """
        rel = self.cache.relpath(dl.release, dl.artifact)
        fd = self.cache.open_partial(dl.artifact)
        if fd is None:
            if self.cache.is_cached(dl.release, dl.artifact):
                self._adopt_published(dl)
                return True
            return False
        dl._set_fd(fd)
        log.info("%s: being downloaded by another process; following it", rel)
        while True:
            total = dl.total if dl.total is not None else self.cache.expected_size(dl.artifact)
            size = os.fstat(fd).st_size
            if size != dl.available or total != dl.total:
                dl.progress(size, total)
            published = self.cache.open_cached(dl.release, dl.artifact)
            if published is not None:
                same = os.fstat(published.fd).st_ino == os.fstat(fd).st_ino
                os.close(published.fd)
                if not same:
                    if dl.sent_any():
                        raise FetchError(f"{dl.artifact.url}: {rel} was published from another file than "
                                         "the one being sent")
                    self._adopt_published(dl)
                    return True
                size = os.fstat(fd).st_size
                dl.progress(size, size)
                return True
            state = self.cache.partial_state(dl.artifact)
            if state != "busy":
                if self.cache.is_cached(dl.release, dl.artifact):
                    continue  # published between the two looks
                return False
            await asyncio.sleep(FOLLOW_POLL)

    async def fetch(self, release: Release, artifact: Artifact,
                    hooks: DownloadHooks | None = None) -> Fetched:
        """Have the artifact in the cache, downloading it once: joining a download in flight in this
        process, or following one another process runs (a ``serve`` worker, another ``sync-images``);
        ``hooks`` hear its progress and restarts from now on. The download is shielded: cancelling this
        call does not cancel it. Raises the download's error (:class:`FetchError`,
        :class:`~bootserver.errors.IntegrityError`, :class:`~bootserver.errors.DiskFullError`)."""
        dest = self.cache.path(release, artifact)
        dl = self._inflight.get(dest)
        if dl is None:
            if self.cache.is_cached(release, artifact):
                return Fetched(dest, self.cache.size_of(release, artifact), None, False)
            dl = self._start(release, artifact, dest)
        if hooks is not None:
            dl.listeners.append(hooks)
        assert dl.task is not None
        try:
            await asyncio.shield(dl.task)
        finally:
            if hooks is not None and hooks in dl.listeners:
                dl.listeners.remove(hooks)
        if dl.error is not None:
            raise dl.error
        return Fetched(dest, self.cache.size_of(release, artifact), dl.source, True)

    def status(self, release: Release, artifact: Artifact) -> str:
        """``cached``, ``fetching`` (a download is in flight, here or in another process) or ``missing``."""
        if self.cache.is_cached(release, artifact):
            return "cached"
        if self.cache.path(release, artifact) in self._inflight:
            return "fetching"
        if self.enabled and self.cache.partial_state(artifact) == "busy":
            return "fetching"  # by another process (another worker, or sync-images)
        return "missing"

    def downloads(self) -> list[tuple[Release, Artifact, int, int | None]]:
        """The downloads in flight in this process: ``(release, artifact, bytes so far, total bytes or
        None)``, by artifact path."""
        return [(dl.release, dl.artifact, dl.available, dl.total)
                for _, dl in sorted(self._inflight.items()) if not dl.finished]

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Each artifact of each profile's current release with its :meth:`status`.

        Returns ``(ready, report)``: ready when read-through is on or every artifact is cached. Reads
        only local stream metadata (no network); a stream without it reports its profiles ``missing``.
        """
        items: dict[str, dict[str, Any]] = {}
        for name, prof in sorted(self.config.profiles.items()):
            try:
                meta = self.catalog.cached(prof.stream)
            except MetadataError as e:
                log.warning("readiness: %s", e)
                meta = None
            if meta is None or prof.arch not in meta.releases:
                key = f"{prof.stream}/{prof.arch}"
                entry = items.setdefault(key, {"path": None, "stream": prof.stream, "arch": prof.arch,
                                               "release": None, "kind": None, "status": "missing",
                                               "reason": "no stream metadata yet", "profiles": []})
                entry["profiles"].append(name)
                continue
            release = meta.releases[prof.arch]
            for art in release.artifacts:
                rel = self.cache.relpath(release, art)
                entry = items.setdefault(rel, {"path": rel, "stream": prof.stream, "arch": prof.arch,
                                               "release": release.version, "kind": art.kind,
                                               "status": self.status(release, art), "profiles": []})
                entry["profiles"].append(name)
        listed = list(items.values())
        all_cached = all(i["status"] == "cached" for i in listed)
        ready = self.enabled or all_cached
        return ready, {"ready": ready, "read_through": self.enabled, "artifacts": listed}

    async def close(self) -> None:
        """Cancel the downloads still in flight and wait for them (their partial files stay); those
        already verified are left to publish."""
        await cancel_downloads(self._inflight)


async def cancel_downloads(downloads: Mapping[Path, Download]) -> None:
    """Cancel the ``downloads`` still in flight and wait for them (their partial files stay); those
    already verified are left to publish (they are only fsyncing and renaming)."""
    tasks = []
    for dl in downloads.values():
        if dl.task is not None:
            if not dl.hash_ok:
                dl.task.cancel()
            tasks.append(dl.task)
    await asyncio.gather(*tasks, return_exceptions=True)
