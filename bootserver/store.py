"""The artifact cache on disk.

Layout under ``cache_dir``::

    artifacts/<stream>/<arch>/<release>/<file>           published artifact (complete, sha256 checked)
    artifacts/<stream>/<arch>/<release>/.<file>.sha256   its sha256 (hex), written before the rename
    streams/<stream>.json                                the stream metadata last synced for <stream>
    tmp/                                                 downloads in progress (never served)

A file appears under ``artifacts/`` only by an atomic ``rename`` after its bytes were fsynced and their
sha256 matched the stream metadata, so whatever the server finds there is complete and correct; a
crash leaves at most a file in ``tmp/``. ``tmp/`` lives on the same filesystem so the rename is atomic.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import BinaryIO

from .errors import IntegrityError
from .streams import SAFE_SEGMENT_RE, Artifact, Release


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one, never a part.

    Temp file in the same folder, fsync, rename, fsync of the folder. Raises ``OSError``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


class ArtifactStore:
    """The cache of live PXE artifacts under ``cache_dir`` (see the module docstring for the layout)."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = Path(cache_dir)
        self.root = self.cache_dir / "artifacts"
        self.tmp = self.cache_dir / "tmp"

    def relpath(self, release: Release, artifact: Artifact) -> str:
        """The artifact's path below ``artifacts/`` (also its URL path below ``/artifacts/``)."""
        return f"{release.stream}/{release.arch}/{release.version}/{artifact.filename}"

    def path(self, release: Release, artifact: Artifact) -> Path:
        """Where the published artifact lives (it may not exist yet)."""
        return self.root / self.relpath(release, artifact)

    def lookup(self, segments: tuple[str, ...]) -> Path | None:
        """Map URL segments ``(stream, arch, release, file)`` to a published file, or ``None``.

        Every segment must be a plain name (no ``..``, no leading ``.``, no ``/``), and the result must
        be a regular file inside ``artifacts/`` after resolving symlinks, so nothing outside the cache
        can be reached.
        """
        if len(segments) != 4 or not all(SAFE_SEGMENT_RE.match(s) for s in segments):
            return None
        candidate = self.root.joinpath(*segments)
        try:
            resolved = candidate.resolve(strict=True)
        except (OSError, RuntimeError):
            return None
        root = self.root.resolve()
        if root not in resolved.parents or not resolved.is_file():
            return None
        return candidate

    @staticmethod
    def sidecar(path: Path) -> Path:
        """The file holding the sha256 of the published artifact at ``path``."""
        return path.with_name(f".{path.name}.sha256")

    def recorded_sha256(self, path: Path) -> str | None:
        """The sha256 recorded when ``path`` was published, or ``None`` if none was recorded."""
        try:
            return self.sidecar(path).read_text().strip() or None
        except OSError:
            return None

    def is_cached(self, release: Release, artifact: Artifact) -> bool:
        """True when the artifact is published and was verified against the same sha256."""
        path = self.path(release, artifact)
        return path.is_file() and self.recorded_sha256(path) == artifact.sha256

    def writer(self, release: Release, artifact: Artifact) -> "ArtifactWriter":
        """A writer that downloads into ``tmp/`` and publishes on :meth:`ArtifactWriter.commit`."""
        return ArtifactWriter(self, self.path(release, artifact), artifact)

    def metadata_path(self, stream: str) -> Path:
        """Where the last synced copy of a stream's metadata is kept."""
        return self.cache_dir / "streams" / f"{stream}.json"


class ArtifactWriter:
    """Write one artifact's bytes while hashing them; publish only complete, correct files.

    Use as a context manager: leaving the block without :meth:`commit` (an exception, a cancelled
    download) removes the temp file. ``bytes_written`` counts bytes so far.
    """

    def __init__(self, store: ArtifactStore, dest: Path, artifact: Artifact) -> None:
        self.store = store
        self.dest = dest
        self.artifact = artifact
        self.bytes_written = 0
        self._hash = hashlib.sha256()
        self._file: BinaryIO | None = None
        self._tmp: Path | None = None

    def __enter__(self) -> "ArtifactWriter":
        self.store.tmp.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.store.tmp, prefix=f"{self.artifact.filename}.", suffix=".part")
        self._tmp = Path(tmp)
        self._file = os.fdopen(fd, "wb")
        return self

    def write(self, chunk: bytes) -> None:
        """Append ``chunk`` (bytes) to the temp file and the running sha256."""
        assert self._file is not None
        self._file.write(chunk)
        self._hash.update(chunk)
        self.bytes_written += len(chunk)

    def commit(self, url: str) -> Path:
        """Check the sha256, fsync and publish. Returns the published path.

        Raises :class:`IntegrityError` (naming ``url``, the expected and the actual hash) on a mismatch;
        the temp file is then removed and nothing is published.
        """
        assert self._file is not None and self._tmp is not None
        actual = self._hash.hexdigest()
        if actual != self.artifact.sha256:
            raise IntegrityError(url, self.artifact.sha256, actual)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.chmod(self._tmp, 0o644)
        self.dest.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.store.sidecar(self.dest), (actual + "\n").encode())
        os.replace(self._tmp, self.dest)
        _fsync_dir(self.dest.parent)
        self._tmp = None
        return self.dest

    def __exit__(self, *exc: object) -> None:
        if self._file is not None and not self._file.closed:
            self._file.close()
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)
            self._tmp = None
