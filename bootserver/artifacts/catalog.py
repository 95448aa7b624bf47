"""Where each configured stream's metadata comes from, and the releases it offers.

A stream whose ``metadata`` is a file path is read from that file. A stream whose ``metadata`` is a
URL is read from the copy ``sync-images`` keeps in ``cache_dir/streams/<name>.json`` (beside it,
``<name>.source`` names the URL it came from: a copy of another URL than the one configured now, after
a reload or a restart that points the stream elsewhere, is not taken); when there is no such copy it
is fetched from the :class:`~bootserver.artifacts.upstream.Upstream` (retried as artifacts are) and the
copy written. The server re-reads a local file when its mtime changes,
so a ``sync-images`` run is picked up without a restart (it looks at the file at most every
:data:`STAT_REUSE` seconds: under load, requests microseconds apart share one ``stat``).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from ..config import Config
from ..errors import FetchError, MetadataError
from ..files import LinkRefused, open_file, read_file, write_atomic
from ..streams import Release, StreamMetadata, parse_stream
from .cache import ArtifactCache
from .upstream import Upstream

#: Seconds during which a stream's metadata file, once looked at, is not looked at again.
STAT_REUSE = 0.001


class StreamCatalog:
    """Parsed stream metadata per configured stream, loaded lazily and cached by file mtime.

    Not thread-safe; meant for one event loop (the server) or one CLI command. Metadata of URL streams
    is fetched through ``upstream`` only by :meth:`refresh`, or by :meth:`get` when there is no local copy.
    """

    def __init__(self, config: Config, cache: ArtifactCache, upstream: Upstream) -> None:
        self.config = config
        self.cache = cache
        self.upstream = upstream
        #: stream -> (the file read: (st_dev, st_ino, st_mtime_ns, st_size), its metadata, time.monotonic()
        #: of the last look)
        self._cache: dict[str, tuple[tuple[int, int, int, int], StreamMetadata, float]] = {}
        self._files: dict[str, tuple[Path, str, str]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def _local_file(self, stream: str) -> tuple[Path, str, str]:
        """The file to read, the name to use in errors (path, or the URL for a synced copy) and the
        file's path as text (for the cheap ``stat`` of :meth:`cached`)."""
        hit = self._files.get(stream)
        if hit is None:
            path = self.config.metadata_path(stream)
            hit = (path, str(path), str(path)) if path is not None else (
                self.cache.metadata_path(stream), self.config.streams[stream].metadata,
                str(self.cache.metadata_path(stream)))
            self._files[stream] = hit
        return hit

    def _parse(self, stream: str, data: bytes, source: str) -> StreamMetadata:
        sc = self.config.streams[stream]
        return parse_stream(data, name=stream, source=source, architectures=sc.architectures,
                            local=not sc.is_url, private=sc.private)

    def cached(self, stream: str) -> StreamMetadata | None:
        """The stream's metadata if it can be had without the network, else ``None``.

        The file is looked at at most every :data:`STAT_REUSE` seconds, with one ``stat``: while it
        names the file last read (same device, inode, mtime and size) the metadata parsed from it
        stands. Otherwise it is opened (a synced copy without a link below ``cache_dir``) and read from
        that descriptor; the stat only tells "still the file we opened", never what to read.

        Raises :class:`MetadataError` when the local file is malformed.
        """
        hit = self._cache.get(stream)
        looked = time.monotonic()
        if hit is not None:
            if looked - hit[2] < STAT_REUSE:
                return hit[1]
            try:
                st = os.stat(self._local_file(stream)[2])
            except OSError:
                st = None
            if st is not None and (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size) == hit[0]:
                self._cache[stream] = (hit[0], hit[1], looked)
                return hit[1]
        path, source, _ = self._local_file(stream)
        try:
            if self.config.metadata_path(stream) is None:  # the synced copy: no link below cache_dir
                fd = open_file(self.cache.cache_dir, path.relative_to(self.cache.cache_dir))
            else:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except LinkRefused as e:
            self.cache.refused(e)
            return None
        except OSError:
            return None
        with open(fd, "rb") as f:
            st = os.fstat(fd)
            key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
            if hit is not None and hit[0] == key:
                self._cache[stream] = (key, hit[1], looked)
                return hit[1]
            data = f.read()
        if not self._copy_of_configured(stream):
            return None
        meta = self._parse(stream, data, source)
        self._cache[stream] = (key, meta, looked)
        return meta

    def _copy_of_configured(self, stream: str) -> bool:
        """Whether the synced copy of URL stream ``stream`` came from the URL configured now (a copy
        that names no source, from before sources were kept, is taken as it). Read only when the copy
        changed, never on the hot path."""
        sc = self.config.streams[stream]
        if not sc.is_url:
            return True
        try:
            kept = read_file(self.cache.cache_dir, self.cache.metadata_source_path(stream).relative_to(
                self.cache.cache_dir)).decode("utf-8", "replace").strip()
        except LinkRefused as e:
            self.cache.refused(e)
            return False
        except OSError:
            return True
        return kept == sc.metadata

    async def refresh(self, stream: str) -> StreamMetadata:
        """Fetch a URL stream's metadata now, check it, and keep it as the local copy.

        For a file-path stream this just reads the file. Raises :class:`FetchError` or
        :class:`MetadataError`; on either the previous local copy is left untouched.
        """
        sc = self.config.streams[stream]
        if not sc.is_url:
            meta = self.cached(stream)
            if meta is None:
                raise MetadataError(sc.metadata, "", "cannot read stream metadata file")
            return meta
        data = await self.upstream.document(sc.metadata)
        meta = self._parse(stream, data, sc.metadata)
        try:
            write_atomic(self.cache.metadata_source_path(stream), f"{sc.metadata}\n".encode(),
                         root=self.cache.cache_dir)
            write_atomic(self.cache.metadata_path(stream), data, root=self.cache.cache_dir)
        except LinkRefused as e:
            self.cache.refused(e)
            raise FetchError(f"{sc.metadata}: cannot keep a copy in cache_dir: {e.filename} is a link") from None
        self._cache.pop(stream, None)
        return meta

    async def get(self, stream: str) -> StreamMetadata:
        """The stream's metadata: the local copy, or fetched once (however many ask) when missing.

        Raises :class:`FetchError` or :class:`MetadataError` when fetching fails.
        """
        meta = self.cached(stream)
        if meta is not None:
            return meta
        lock = self._locks.setdefault(stream, asyncio.Lock())
        async with lock:
            meta = self.cached(stream)
            if meta is not None:
                return meta
            return await self.refresh(stream)

    async def release(self, stream: str, arch: str) -> Release:
        """The current release of ``stream`` for ``arch``. Raises as :meth:`get`."""
        meta = self.cached(stream)  # the hot path: no coroutine below this one when the copy is local
        return (meta if meta is not None else await self.get(stream)).releases[arch]


