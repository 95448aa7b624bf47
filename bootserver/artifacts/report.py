"""What the artifact cache holds, for the admin page's cache page (``GET /ui/cache``).

One report from the cache on disk (:mod:`bootserver.artifacts.cache`), the streams' current metadata as the catalog
holds it (no network) and the downloads in flight (:class:`~bootserver.artifacts.readthrough.ReadThrough`, here
or in another process such as ``sync-images``).
"""

from __future__ import annotations

from typing import Any

from ..errors import BootserverError
from ..streams import Release
from .readthrough import ReadThrough


def cache_report(artifacts: ReadThrough) -> dict[str, Any]:
    """What the artifact cache of ``artifacts`` (the server's read-through: its config, cache and catalog)
    holds, for the page (reads ``cache_dir``; no network): ``groups``, one
    per stream/arch/release on disk or named by a stream's current metadata (per stream and arch the
    current release first), each with ``current`` (the release the stream offers now) and its
    ``artifacts`` (``kind``, ``file``,
    ``size`` in bytes or ``None``, ``state``: ``verified`` (published after its sha256 matched, and
    for the current release the metadata's sha256), ``mismatch`` (published under another sha256
    than the current metadata's), ``unverified`` (no sha256 record), ``fetching`` or ``missing``);
    ``downloads`` in progress (``path``, ``done`` and ``total`` bytes, here or in another process
    such as ``sync-images``); ``total`` bytes and ``files`` published; ``read_through``."""
    config, cache, catalog = artifacts.config, artifacts.cache, artifacts.catalog
    current: dict[tuple[str, str, str], Release] = {}
    for stream in config.streams:
        try:
            meta = catalog.cached(stream)
        except BootserverError:
            meta = None
        for arch, rel in (meta.releases.items() if meta is not None else ()):
            current[(stream, arch, rel.version)] = rel
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    total = files = 0
    roots = [r for r in (cache.root, cache.cache_dir / "private") if r.is_dir()]  # private: private releases
    for root in roots:
        for path in sorted(root.glob("*/*/*/*")):
            if path.name.startswith(".") or not path.is_file():
                continue
            if any(p.is_symlink() for p in (path, *list(path.parents)[:4])):  # not served: not listed
                continue
            stream, arch, version = path.relative_to(root).parts[:3]
            size = path.stat().st_size
            total, files = total + size, files + 1
            found = current.get((stream, arch, version))
            kind = next((a.kind for a in found.artifacts if a.filename == path.name), None) if found else None
            recorded = cache.recorded_sha256(path)
            state = "unverified" if recorded is None else "verified"
            if found is not None and kind is not None and recorded is not None and \
                    recorded != getattr(found, kind).sha256:
                state = "mismatch"
            group = groups.setdefault((stream, arch, version), {
                "stream": stream, "arch": arch, "release": version, "current": found is not None, "artifacts": []})
            group["artifacts"].append({"kind": kind, "file": path.name, "size": size, "state": state})
    downloads = [{"path": cache.relpath(rel, art), "done": done, "total": size}
                 for rel, art, done, size in artifacts.downloads()]
    here = {d["path"] for d in downloads}
    for key, rel in sorted(current.items()):
        group = groups.setdefault(key, {"stream": key[0], "arch": key[1], "release": key[2], "current": True,
                                        "artifacts": []})
        have = {a["file"] for a in group["artifacts"]}
        for art in rel.artifacts:
            if art.filename in have:
                continue
            status = artifacts.status(rel, art)
            group["artifacts"].append({"kind": art.kind, "file": art.filename, "size": None, "state": status})
            relpath = cache.relpath(rel, art)
            if status == "fetching" and relpath not in here:  # another process downloads it
                try:
                    done = cache.partial_path(art).stat().st_size
                except OSError:
                    done = 0
                downloads.append({"path": relpath, "done": done, "total": cache.expected_size(art)})
    ordered = sorted(groups.values(), key=lambda g: (g["stream"], g["arch"], not g["current"], g["release"]))
    return {"groups": ordered, "downloads": downloads, "total": total, "files": files,
            "read_through": artifacts.enabled, "cache_dir_label": str(config.cache_dir)}
