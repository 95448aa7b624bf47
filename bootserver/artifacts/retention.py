"""Retention of the artifact cache: ``bootserver sync-images --prune``.

Per stream and architecture under ``cache_dir/artifacts/``, prune keeps

* the release each profile of that stream and architecture currently references (from the local
  stream metadata), and
* the newest ``streams.<name>.keep_releases`` releases (default 2), newest by publish time (the latest
  mtime of the release's ``.<file>.sha256`` records, written when an artifact is published),

and removes every other release folder; below ``cache_dir/private/`` (private streams' releases, which
hold secrets) only the current releases stay. A stream or architecture no profile uses any more is removed
whole (with its then empty folders); one whose metadata cannot be read locally is left alone (prune
never guesses). Files left in
``tmp/`` by interrupted downloads are removed unless they are the resumable partial of a currently
referenced artifact, or some process is still writing them (it holds their lock).

Removal is rename-then-delete: the release folder is first renamed into ``tmp/`` (atomic, same
filesystem), so the server never sees a half-deleted release, then deleted. Limits: a request that
already opened a file keeps reading it to the end (POSIX keeps an unlinked file's data until the last
descriptor closes); a request that arrives after the rename gets a 404, or, for a currently referenced
release (never pruned), the file. So prune never breaks a transfer in progress, but a node holding an
iPXE script for a release older than the newest ``keep_releases`` ones can find it gone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import uuid
from pathlib import Path

from ..config import Config
from ..errors import MetadataError
from ..files import LinkRefused
from .cache import ArtifactCache
from .catalog import StreamCatalog

log = logging.getLogger("bootserver.retention")


def publish_time(release_dir: Path) -> float:
    """When a release folder's newest artifact was published (seconds since the epoch): the latest
    mtime of its ``.<file>.sha256`` records, else the folder's own mtime."""
    times = [p.stat().st_mtime for p in release_dir.glob(".*.sha256") if p.is_file()]
    return max(times) if times else release_dir.stat().st_mtime


def prune(config: Config, cache: ArtifactCache, catalog: StreamCatalog) -> list[str]:
    """Remove cached releases no profile references beyond the newest ``keep_releases`` per stream
    and architecture, and stale temp files. Returns what was removed (paths relative to ``cache_dir``).

    Raises ``OSError`` when a removal fails for another reason than the file being gone already.
    """
    used: dict[tuple[str, str], set[str] | None] = {}
    wanted_sha: set[str] = set()
    for prof in config.profiles.values():
        key: tuple[str, str] = (prof.stream, prof.arch)
        try:
            meta = catalog.cached(prof.stream)
        except MetadataError as e:
            log.warning("prune: %s; leaving stream %s alone", e, prof.stream)
            meta = None
        if meta is None or prof.arch not in meta.releases:
            used[key] = None  # unknown: keep everything of this stream/arch
            continue
        release = meta.releases[prof.arch]
        versions = used.setdefault(key, set())
        if versions is not None:  # None: an unknown release of this stream/arch keeps everything
            versions.add(release.version)
        wanted_sha.update(a.sha256 for a in release.artifacts)
    removed: list[str] = []
    for root in (cache.root, cache.cache_dir / "private"):
        if root.is_dir() and not _linked(cache, root):
            removed += _prune_root(config, cache, root, used)
    for path in cache.clean_tmp(keep=wanted_sha):
        removed.append(str(path.relative_to(cache.cache_dir)))
    return removed


def _prune_root(config: Config, cache: ArtifactCache, root: Path, used: dict[tuple[str, str], set[str] | None]
                ) -> list[str]:
    """:func:`prune` below ``root`` (``artifacts/``, or ``private/``, where only the current releases stay:
    a superseded private release holds secrets nobody boots any more). ``used``: (stream, arch) -> the
    releases referenced now (``None``: unknown, keep everything)."""
    removed = []
    private = root.name == "private"
    for stream_dir in sorted(p for p in root.iterdir() if _real_dir(cache, p)):
        for arch_dir in sorted(p for p in stream_dir.iterdir() if _real_dir(cache, p)):
            key = (stream_dir.name, arch_dir.name)
            if key in used and used[key] is None:
                continue
            current = used.get(key) or set()
            releases = sorted((p for p in arch_dir.iterdir() if _real_dir(cache, p)), key=publish_time,
                              reverse=True)
            keep = set(current)
            if key in used and stream_dir.name in config.streams and not private:
                keep.update(p.name for p in releases[:config.streams[stream_dir.name].keep_releases])
            for rel_dir in releases:
                if rel_dir.name not in keep:
                    _remove(cache, rel_dir)
                    removed.append(str(rel_dir.relative_to(cache.cache_dir)))
            if key not in used:
                _rmdir_if_empty(arch_dir)
        if not any(k[0] == stream_dir.name for k in used):
            _rmdir_if_empty(stream_dir)
    return removed


def _linked(cache: ArtifactCache, path: Path) -> bool:
    """Whether ``path`` is a link (logged once as the cache logs every link it finds): prune never walks
    into, renames or deletes what a link in the cache points at."""
    if path.is_symlink():
        cache.refused(LinkRefused(path))
        return True
    return False


def _real_dir(cache: ArtifactCache, path: Path) -> bool:
    return not _linked(cache, path) and path.is_dir()


def _remove(cache: ArtifactCache, path: Path) -> None:
    """Rename ``path`` into ``tmp/`` (atomic), then delete it."""
    cache.tmp.mkdir(parents=True, exist_ok=True)
    doomed = cache.tmp / f"prune-{uuid.uuid4().hex}"
    os.rename(path, doomed)
    log.info("prune: removing %s", path)
    shutil.rmtree(doomed)


def _rmdir_if_empty(path: Path) -> None:
    """Remove a folder of a stream or architecture no profile uses, when nothing is left in it."""
    with contextlib.suppress(OSError):
        path.rmdir()
