"""``bootserver sync-images``: mirror every profile's live PXE artifacts into the cache (and the live ISO
of a release that ``secure_boot`` nodes boot: their image is made of its signed loaders).

Which releases: the current release of each stream a profile uses, for that profile's architecture
(optionally only one stream, or only the profiles of nodes in one facility). Each artifact is streamed
through the upstream chain (the mirrors of ``--facility``, else of ``server.facility``, then its
stream-metadata location; see :mod:`bootserver.artifacts.upstream`), resuming a partial download left by an earlier
run, hashed while it streams and published only when its sha256 matches (see :mod:`bootserver.artifacts.cache`).
Artifacts already cached with the same sha256 are skipped. An artifact another process is downloading
right now (another ``sync-images``, a ``serve`` read-through) is not downloaded again: the sync follows
that download to its end (:meth:`bootserver.artifacts.readthrough.ReadThrough.fetch`), and takes over if it
stops. A stream whose metadata cannot be had, or an artifact that fails, does not stop the others: each
failure is one line on stderr, and the run ends with :class:`SyncFailed` (exit 1, or 2 when a failure was
bad input such as malformed metadata). ``--prune`` then applies :mod:`bootserver.artifacts.retention`
(only after a run without failures).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TextIO
from urllib.parse import urlsplit

from tqdm import tqdm

from .artifacts.cache import ArtifactCache
from .artifacts.catalog import StreamCatalog
from .artifacts.readthrough import ReadThrough
from .artifacts.retention import prune as prune_cache
from .artifacts.upstream import DownloadHooks, Upstream
from .config import Config
from .errors import BootserverError, InputError
from .inventory import inventory
from .streams import Artifact, Release

#: Artifacts downloaded at the same time.
PARALLEL_DOWNLOADS = 3


class SyncFailed(BootserverError):
    """Some streams' metadata or artifacts could not be had (each named on its own line before); the
    others were synced. Exit 1, or the highest exit code of the failures (2 for malformed metadata)."""

    def __init__(self, failures: list[BootserverError], what: str, others: bool) -> None:
        super().__init__(f"sync-images: {what} failed (each named above)" + ("; the others are synced" if others
                                                                              else ""))
        self.exit_code = max(e.exit_code for e in failures)


@dataclass(frozen=True, slots=True)
class SyncItem:
    """One artifact to have in the cache: ``release`` (stream, arch, version) and ``artifact``."""

    release: Release
    artifact: Artifact


def wanted_targets(config: Config, *, stream: str | None = None, facility: str | None = None
                   ) -> list[tuple[str, str]]:
    """The ``(stream, arch)`` pairs the profiles use, filtered by ``stream`` or ``facility``.

    With ``facility``, only the profiles of nodes in that facility count. Raises :class:`InputError`
    for an unknown stream or facility.
    """
    if stream is not None and stream not in config.streams:
        raise InputError(f"{config.source}: streams: no stream {stream!r}")
    if facility is not None and facility not in config.facilities:
        raise InputError(f"{config.source}: facilities: no facility {facility!r}")
    profiles: Iterable[str] = config.profiles.keys()
    if facility is not None:
        profiles = {n.profile for n in config.nodes.values() if n.facility == facility}
    pairs = sorted({(config.profiles[p].stream, config.profiles[p].arch) for p in profiles})
    return [(s, a) for s, a in pairs if stream is None or s == stream]


class _Bar(DownloadHooks):
    """A tqdm progress bar fed by a download's progress."""

    def __init__(self, bar: tqdm[Any]) -> None:
        self.bar = bar
        self.last = 0

    def progress(self, done: int, total: int | None) -> None:
        if total is not None and self.bar.total != total:
            self.bar.total = total
        self.bar.update(done - self.last)
        self.last = done


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} GB"


async def sync_images(config: Config, *, stream: str | None = None, facility: str | None = None,
                      out: TextIO = sys.stdout, err: TextIO = sys.stderr, prune: bool = False) -> int:
    """Refresh stream metadata and download missing artifacts. Returns the number downloaded.

    With ``prune``, once every download succeeded, remove what :func:`bootserver.artifacts.retention.prune`
    finds unreferenced (one ``pruned <path>`` line each); nothing is pruned after a failure.

    Progress bars (tqdm) when ``out`` is a terminal, else one summary line per artifact. Every stream
    and artifact is tried: a :class:`~bootserver.errors.BootserverError` of one (``FetchError``,
    ``IntegrityError``, ``MetadataError``) is one line on ``err`` (``bootserver: <stream> [<arch>
    <version> <kind>]: <error>``) and the others go on. Raises :class:`SyncFailed` at the end when any
    failed, ``InputError`` for an unknown ``stream`` or ``facility``.
    """
    targets = wanted_targets(config, stream=stream, facility=facility)
    # the artifacts' parts only: sync-images needs neither the state store nor the service
    upstream = Upstream.for_config(config, facility)
    cache = ArtifactCache(config.cache_dir)
    catalog = StreamCatalog(config, cache, upstream)
    artifacts = ReadThrough(config, cache, catalog, upstream)
    tty = out.isatty()
    failures: list[BootserverError] = []

    def failed(label: str, e: BootserverError) -> BootserverError:
        print(f"bootserver: {label}: {e}", file=err, flush=True)
        failures.append(e)
        return e

    streams = sorted({s for s, _ in targets})
    try:
        items: list[SyncItem] = []
        # a secure_boot node's image is made of its release's live ISO (bootserver.images.secureboot)
        secure = {(n.stream, n.arch) for n in inventory(config).values() if n.secure_boot}
        for s in streams:
            try:
                meta = await catalog.refresh(s)
            except BootserverError as e:
                failed(f"{s} metadata", e)
                continue
            for st, arch in targets:
                if st == s:
                    rel = meta.releases[arch]
                    items.extend(SyncItem(rel, a) for a in rel.artifacts)
                    if (st, arch) in secure and rel.live_iso is not None:
                        items.append(SyncItem(rel, rel.live_iso))
        sem = asyncio.Semaphore(PARALLEL_DOWNLOADS)

        async def one(item: SyncItem, position: int) -> bool:
            rel, art = item.release, item.artifact
            label = f"{rel.stream} {rel.arch} {rel.version} {art.kind}"
            if cache.is_cached(rel, art):
                print(f"{label}: already cached ({art.filename})", file=out, flush=True)
                return False
            async with sem:
                bar = _Bar(tqdm(desc=f"{rel.stream} {art.kind}", unit="B", unit_scale=True, file=out,
                                position=position, leave=True)) if tty else None
                started = time.monotonic()
                try:
                    got = await artifacts.fetch(rel, art, hooks=bar)
                except BootserverError as e:
                    raise failed(label, e) from None
                finally:
                    if bar is not None:
                        bar.bar.close()
                secs = max(time.monotonic() - started, 1e-6)
                if not got.fetched:
                    print(f"{label}: already cached ({art.filename})", file=out, flush=True)
                    return False
                if got.source is None:
                    print(f"{label}: downloaded {_human(got.size)} by another process (followed it), "
                          "sha256 ok", file=out, flush=True)
                    return True
                print(f"{label}: downloaded {_human(got.size)} in {secs:.1f}s ({_human(got.size / secs)}/s) "
                      f"from {urlsplit(got.source).netloc}, sha256 ok", file=out, flush=True)
                return True

        results = await asyncio.gather(*(one(it, i) for i, it in enumerate(items)), return_exceptions=True)
    finally:
        await artifacts.close()
        await upstream.close()
    for r in results:
        if isinstance(r, BaseException) and not isinstance(r, BootserverError):
            raise r
    if failures:
        broken = sum(1 for r in results if isinstance(r, BootserverError))
        what = [f"{broken} of {len(items)} artifacts"] if broken else []
        if len(failures) > broken:
            what.append(f"the metadata of {len(failures) - broken} of {len(streams)} streams")
        raise SyncFailed(failures, " and ".join(what), len(items) > broken or len(streams) > len(failures) - broken)
    if prune:
        for path in prune_cache(config, cache, catalog):
            print(f"pruned {path}", file=out, flush=True)
    return sum(1 for r in results if r is True)
