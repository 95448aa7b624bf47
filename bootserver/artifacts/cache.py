"""The artifact cache on disk.

Layout under ``cache_dir``::

    artifacts/<stream>/<arch>/<release>/<file>           published artifact (complete, sha256 checked)
    artifacts/<stream>/<arch>/<release>/.<file>.sha256   its sha256 (hex), written before the rename
    streams/<stream>.json                                the stream metadata last synced for <stream>
    tmp/<sha256>.part                                    a resumable download in progress (never served)
    tmp/<sha256>.size                                    its full size in bytes, once upstream told it
    tmp/<file>.<random>.part                             a download that could not take the resumable name

A file appears under ``artifacts/`` only by an atomic ``rename`` after its bytes were fsynced and their
sha256 matched the stream metadata, so whatever the server finds there is complete and correct; a
crash (even ``kill -9``) leaves at most a file in ``tmp/``. ``tmp/`` lives on the same filesystem so the
rename is atomic.

Every file in ``tmp/`` is held under an exclusive ``flock`` while a process writes it. The next download
of the same artifact (in any process) takes over ``tmp/<sha256>.part`` and resumes from its length; a
file nobody holds a lock on is stale and :meth:`ArtifactCache.clean_tmp` may remove it.

Other processes may *follow* a download they find locked (see :mod:`bootserver.artifacts.readthrough`): they
read the growing ``tmp/<sha256>.part``, learn the full size from ``tmp/<sha256>.size`` (written by the
lock holder when upstream tells it), and know the download ended when the lock is released: published
if the file is now under ``artifacts/`` with its sidecar, else abandoned.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from ..errors import DiskFullError, IntegrityError
from ..files import fsync_dir, write_atomic
from ..streams import SAFE_SEGMENT_RE, Artifact, Release
from .openpgp import SignatureError, StreamVerifier


class PartialBusy(Exception):
    """An exclusive writer found ``tmp/<sha256>.part`` locked: another process is downloading it."""


class AlreadyCached(Exception):
    """An exclusive writer got the lock but the artifact was published meanwhile: nothing to do."""


class ArtifactCache:
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

    def writer(self, release: Release, artifact: Artifact, *, resume: bool = False,
               exclusive: bool = False, verifier: StreamVerifier | None = None) -> ArtifactWriter:
        """A writer that downloads into ``tmp/`` and publishes on :meth:`ArtifactWriter.commit`.

        With ``resume`` it continues ``tmp/<sha256>.part`` when one is left from an earlier run. With
        ``exclusive`` (implies ``resume``) entering it raises :class:`PartialBusy` instead of falling
        back to a private temp file when another process holds that file, and :class:`AlreadyCached`
        when the artifact turns out to be published once the lock is held. ``verifier``: the artifact's
        OpenPGP signature check, fed the same bytes as the sha256 (:class:`ArtifactWriter`).
        """
        return ArtifactWriter(self, self.path(release, artifact), artifact, resume=resume or exclusive,
                              exclusive=exclusive, verifier=verifier)

    def partial_path(self, artifact: Artifact) -> Path:
        """The deterministic name of the artifact's resumable download: ``tmp/<sha256>.part``."""
        return self.tmp / f"{artifact.sha256}.part"

    def size_path(self, artifact: Artifact) -> Path:
        """Where the writer of ``tmp/<sha256>.part`` records the artifact's full size (decimal bytes)."""
        return self.tmp / f"{artifact.sha256}.size"

    def expected_size(self, artifact: Artifact) -> int | None:
        """The full size (bytes) the writer of the artifact's partial recorded, or ``None``."""
        try:
            return int(self.size_path(artifact).read_text())
        except (OSError, ValueError):
            return None

    def partial_state(self, artifact: Artifact) -> str:
        """``busy`` (a process holds the lock on ``tmp/<sha256>.part``: it is being downloaded),
        ``free`` (the file exists and nobody writes it) or ``absent``.

        Probing ``free`` takes the lock for a moment; a writer starting at that very moment falls back
        (or, when exclusive, sees :class:`PartialBusy` and retries)."""
        path = self.partial_path(artifact)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return "absent"
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return "busy"
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                return "absent"
            return "free" if same else "absent"
        finally:
            os.close(fd)

    def clean_tmp(self, keep: Iterable[str] = ()) -> list[Path]:
        """Remove stale files from ``tmp/``; return what was removed.

        A file is stale when no process holds its lock (nobody is writing it). Resumable partials whose
        sha256 is in ``keep`` stay, so the next download resumes them. Never raises for a file that
        vanished meanwhile; other ``OSError`` propagate.
        """
        keep_names = {f"{sha}.part" for sha in keep}
        removed: list[Path] = []
        try:
            entries = list(self.tmp.iterdir())
        except FileNotFoundError:
            return removed
        for entry in entries:
            if entry.name in keep_names:
                continue
            if entry.name.endswith(".size"):
                part = entry.with_name(entry.name[:-len(".size")] + ".part")
                part_fd = _lock(part)
                if part_fd is not None:
                    os.close(part_fd)
                elif part.exists():
                    continue  # the size of a download in progress
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
                continue
            fd = _lock(entry)
            if fd is None:
                continue
            try:
                entry.unlink(missing_ok=True)
                removed.append(entry)
            finally:
                os.close(fd)
        return removed

    def metadata_path(self, stream: str) -> Path:
        """Where the last synced copy of a stream's metadata is kept."""
        return self.cache_dir / "streams" / f"{stream}.json"


def _lock(path: Path, flags: int = os.O_RDWR) -> int | None:
    """Open ``path`` and take an exclusive ``flock`` without waiting.

    Returns the file descriptor, or ``None`` when another process holds the lock or the path no
    longer names the inode we locked (it was renamed or removed meanwhile).
    """
    try:
        fd = os.open(path, flags, 0o600)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_ino != os.stat(path).st_ino:
            raise BlockingIOError
    except (BlockingIOError, FileNotFoundError):
        os.close(fd)
        return None
    return fd



class ArtifactWriter:
    """Write one artifact's bytes while hashing them; publish only complete, correct files.

    Use as a context manager. With ``resume=True`` the writer uses ``tmp/<sha256>.part`` and continues
    from its length (``bytes_written`` starts there, the hash covers the old bytes); when another process
    holds that file it falls back to a fresh uniquely named temp file. The temp file is locked (flock)
    while open.

    Leaving the block without :meth:`commit` removes the temp file, except that a resumable partial is
    kept after a failure other than :class:`IntegrityError` or :class:`DiskFullError` (a dropped
    connection, a cancelled task), so the next download resumes it. ``bytes_written`` counts bytes.
    """

    def __init__(self, cache: ArtifactCache, dest: Path, artifact: Artifact, *, resume: bool = False,
                 exclusive: bool = False, verifier: StreamVerifier | None = None) -> None:
        self.cache = cache
        self.verifier = verifier
        self.dest = dest
        self.artifact = artifact
        self.resume = resume
        self.exclusive = exclusive
        self.resumable = False
        self.bytes_written = 0
        self.resumed_from = 0
        self._expected_size: int | None = None
        self._size_file: Path | None = None
        self._hash = hashlib.sha256()
        self._file: BinaryIO | None = None
        self._tmp: Path | None = None

    @property
    def expected_size(self) -> int | None:
        """The artifact's full size in bytes when known (set by the downloader), for disk-full errors;
        also recorded in ``tmp/<sha256>.size`` for processes following a resumable download."""
        return self._expected_size

    @expected_size.setter
    def expected_size(self, value: int | None) -> None:
        if value is not None and value != self._expected_size and self.resumable:
            size_file = self.cache.size_path(self.artifact)
            tmp = size_file.with_name(f"{size_file.name}.{os.getpid()}")
            try:
                tmp.write_text(str(value))
                os.replace(tmp, size_file)
                self._size_file = size_file
            except OSError:  # followers then learn the size when the file is published
                tmp.unlink(missing_ok=True)
        self._expected_size = value

    def _drop_size_file(self) -> None:
        # The holder of the resumable partial's lock is the only writer of its size file, so it also
        # removes one left by a process killed mid-download, not only the one it wrote itself.
        if self._size_file is not None or self.resumable:
            self.cache.size_path(self.artifact).unlink(missing_ok=True)
            self._size_file = None

    @property
    def path(self) -> Path:
        """The temp file being written (valid inside the ``with`` block, before :meth:`commit`)."""
        assert self._tmp is not None
        return self._tmp

    def __enter__(self) -> ArtifactWriter:
        self.cache.tmp.mkdir(parents=True, exist_ok=True)
        fd = None
        if self.resume:
            part = self.cache.partial_path(self.artifact)
            fd = _lock(part, os.O_RDWR | os.O_CREAT)
            if fd is None and self.exclusive:
                raise PartialBusy(part)
            if fd is not None and self.exclusive and self.dest.is_file() and \
                    self.cache.recorded_sha256(self.dest) == self.artifact.sha256:
                part.unlink(missing_ok=True)  # published meanwhile: what is left here is of no use
                os.close(fd)
                raise AlreadyCached(self.dest)
            if fd is not None:
                self._tmp = part
                self.resumable = True
                with open(fd, "rb", closefd=False) as f:
                    while block := f.read(1 << 20):
                        self._hash.update(block)
                        if self.verifier is not None:
                            self.verifier.update(block)
                        self.bytes_written += len(block)
                self.resumed_from = self.bytes_written
                os.lseek(fd, 0, os.SEEK_END)
        if fd is None:
            fd, tmp = tempfile.mkstemp(dir=self.cache.tmp, prefix=f"{self.artifact.filename}.", suffix=".part")
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._tmp = Path(tmp)
        self._file = os.fdopen(fd, "r+b")
        self._file.seek(0, os.SEEK_END)
        return self

    def write(self, chunk: bytes) -> None:
        """Append ``chunk`` (bytes) to the temp file and the running sha256, and flush it to the OS
        so readers of the temp file see it. Raises :class:`DiskFullError` when the disk is full."""
        assert self._file is not None
        try:
            self._file.write(chunk)
            self._file.flush()
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise self._disk_full(len(chunk)) from None
            raise
        self._hash.update(chunk)
        if self.verifier is not None:
            self.verifier.update(chunk)
        self.bytes_written += len(chunk)

    def _disk_full(self, at_least: int) -> DiskFullError:
        needed = max(at_least, (self.expected_size or 0) - self.bytes_written)
        try:
            free = shutil.disk_usage(self.cache.tmp).free
        except OSError:
            free = 0
        return DiskFullError(self.dest, needed, free)

    def restart(self) -> None:
        """Throw away the bytes written so far (truncate the temp file) and start again from byte 0."""
        assert self._file is not None
        self._file.seek(0)
        self._file.truncate()
        self._hash = hashlib.sha256()
        if self.verifier is not None:
            self.verifier.restart()
        self.bytes_written = 0
        self.resumed_from = 0

    def check(self, url: str) -> None:
        """Raise :class:`IntegrityError` (naming ``url``) unless the bytes so far have the right sha256,
        then, with a ``verifier``, :class:`~bootserver.artifacts.openpgp.SignatureError` unless their
        OpenPGP signature holds (the verdict is given once: later calls repeat it)."""
        actual = self._hash.hexdigest()
        if actual != self.artifact.sha256:
            raise IntegrityError(url, self.artifact.sha256, actual)
        if self.verifier is not None:
            self.verifier.verify()

    def commit(self, url: str) -> Path:
        """Check the sha256, fsync and publish. Returns the published path.

        Raises :class:`IntegrityError` (naming ``url``, the expected and the actual hash) on a mismatch;
        nothing is published then (the temp file stays until the block ends, or :meth:`restart`).
        Raises :class:`DiskFullError` when the fsync or the sidecar write hits a full disk.
        """
        assert self._file is not None and self._tmp is not None
        self.check(url)
        actual = self.artifact.sha256
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            os.chmod(self._tmp, 0o644)
            self.dest.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.cache.sidecar(self.dest), (actual + "\n").encode())
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise self._disk_full(0) from None
            raise
        # The size file goes before the publish: a process killed in between leaves a complete partial
        # (resumed next time), never a published artifact with a stale size file beside it.
        self._drop_size_file()
        os.replace(self._tmp, self.dest)
        fsync_dir(self.dest.parent)
        self._file.close()  # releases the lock only after the rename
        self._tmp = None
        return self.dest

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        keep = (self.resumable and exc is not None
                and not isinstance(exc, (IntegrityError, DiskFullError, SignatureError)) and self.bytes_written > 0)
        if self.verifier is not None:
            self.verifier.close()
        if self._tmp is not None and not keep:
            self._tmp.unlink(missing_ok=True)
        self._drop_size_file()
        self._tmp = None
        if self._file is not None and not self._file.closed:
            self._file.close()
