"""The artifact cache on disk.

Layout under ``cache_dir``::

    artifacts/<stream>/<arch>/<release>/<file>           published artifact (complete, sha256 checked)
    artifacts/<stream>/<arch>/<release>/.<file>.sha256   its sha256 (hex), written before the rename
    private/<stream>/<arch>/<release>/<file>             an artifact of a private release (mode 0600; served
                                                         only on a URL signed for a node of its stream)
    streams/<stream>.json                                the stream metadata last synced for <stream>
    tmp/<sha256>.part                                    a resumable download in progress (never served)
    tmp/<sha256>.size                                    its full size in bytes, once upstream told it
    tmp/<file>.<random>.part                             a download that could not take the resumable name

Nothing below ``cache_dir`` is reached through a link (:mod:`bootserver.files`): a published file, its
sidecar, ``tmp/`` and what is written there are opened one real folder at a time from ``cache_dir``, so
a link planted by anyone who can write there is refused (:class:`~bootserver.files.LinkRefused`), never
followed, also when it is swapped in between two looks.

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

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import secrets
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO, NamedTuple

from ..errors import DiskFullError, IntegrityError
from ..files import LinkRefused, open_dir, open_file, read_file, write_atomic
from ..streams import SAFE_SEGMENT_RE, Artifact, Release
from .openpgp import SignatureError, StreamVerifier

log = logging.getLogger("bootserver.cache")


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
        """Where the published artifact lives (it may not exist yet): below ``artifacts/``, or ``private/``
        for a private release, which the public artifact route never opens."""
        return self.cache_dir / _root(release) / self.relpath(release, artifact)

    def open_published(self, segments: tuple[str, ...], *, quiet: bool = False,
                       root: str = "artifacts") -> Published | None:
        """Open the published file at URL segments ``(stream, arch, release, file)``: its descriptor (a
        regular file; the caller closes it) and the sha256 recorded when it was published, or ``None``
        when there is none.

        ``root``: ``artifacts`` (public releases) or ``private``. Every segment must be a plain name (no
        ``..``, no leading ``.``, no ``/``), and no link may
        stand in any place from ``cache_dir`` down to the file or its sidecar: raises
        :class:`~bootserver.files.LinkRefused` naming the link (one warning is logged, never its
        target; not with ``quiet``, for a look that serves nothing), so nothing outside the cache is served
        even when a link is swapped in after a look.
        """
        if len(segments) != 4 or not all(SAFE_SEGMENT_RE.match(s) for s in segments):
            return None
        rel = f"{root}/" + "/".join(segments)
        try:
            fd = open_file(self.cache_dir, rel)
        except LinkRefused as e:
            if not quiet:
                self.refused(e)
            raise
        except OSError:
            return None
        try:  # the sidecar's name as sidecar() makes it, without pathlib (per artifact answer)
            sha = self._recorded(f"{root}/{'/'.join(segments[:3])}/.{segments[3]}.sha256")
        except LinkRefused as e:
            os.close(fd)
            if not quiet:
                self.refused(e)
            raise
        return Published(fd, sha)

    def refused(self, e: LinkRefused) -> None:
        """Log the one warning of a link found in the cache (its path below ``cache_dir``, never the target)."""
        where = Path(e.filename)
        with contextlib.suppress(ValueError):
            where = where.relative_to(self.cache_dir)
        log.warning("cache_dir: %s is a link; refused (nothing below cache_dir is served or written through "
                    "a link)", where)

    @staticmethod
    def sidecar(path: Path) -> Path:
        """The file holding the sha256 of the published artifact at ``path``."""
        return path.with_name(f".{path.name}.sha256")

    def _recorded(self, rel: Path | str) -> str | None:
        """The sha256 in the sidecar ``rel`` (below ``cache_dir``), or ``None``. Raises ``LinkRefused``."""
        try:
            return read_file(self.cache_dir, rel).decode("ascii", "replace").strip() or None
        except LinkRefused:
            raise
        except OSError:
            return None

    def recorded_sha256(self, path: Path) -> str | None:
        """The sha256 recorded when ``path`` (below ``cache_dir``) was published, or ``None`` if none was
        recorded or a link stands in its way."""
        try:
            return self._recorded(self.sidecar(path).relative_to(self.cache_dir))
        except (LinkRefused, ValueError):
            return None

    def open_cached(self, release: Release, artifact: Artifact, *, quiet: bool = False) -> Published | None:
        """The published artifact opened (as :meth:`open_published`) when it was verified against the same
        sha256, else ``None``. Raises :class:`~bootserver.files.LinkRefused` for a link on its way."""
        found = self.open_published((release.stream, release.arch, release.version, artifact.filename),
                                    quiet=quiet, root=_root(release))
        if found is not None and found.sha256 != artifact.sha256:
            os.close(found.fd)
            return None
        return found

    def is_cached(self, release: Release, artifact: Artifact) -> bool:
        """True when the artifact is published and was verified against the same sha256 (never through a
        link: a link on its way counts as not cached; not logged here, where nothing is served)."""
        try:
            found = self.open_cached(release, artifact, quiet=True)
        except LinkRefused:
            return False
        if found is None:
            return False
        os.close(found.fd)
        return True

    def is_cached_at(self, dest: Path, artifact: Artifact) -> bool:
        """:meth:`is_cached` for the artifact's published path ``dest`` (below ``artifacts/`` or ``private/``)."""
        root, *segments = dest.relative_to(self.cache_dir).parts
        try:
            found = self.open_published(tuple(segments), quiet=True, root=root)
        except LinkRefused:
            return False
        if found is None:
            return False
        os.close(found.fd)
        return found.sha256 == artifact.sha256

    def size_of(self, release: Release, artifact: Artifact) -> int:
        """The published artifact's size in bytes (no link followed). Raises ``OSError``
        (``FileNotFoundError`` when it is not published)."""
        fd = open_file(self.cache_dir, self.path(release, artifact).relative_to(self.cache_dir))
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def tmp_dir(self) -> int:
        """A descriptor of ``tmp/`` (made when missing), a real folder below ``cache_dir``. Raises
        :class:`~bootserver.files.LinkRefused` (logged) when it is a link; the caller closes it."""
        try:
            return open_dir(self.cache_dir, "tmp", create=True)
        except LinkRefused as e:
            self.refused(e)
            raise

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
                              exclusive=exclusive, verifier=verifier, mode=0o600 if release.private else 0o644)

    def partial_path(self, artifact: Artifact) -> Path:
        """The deterministic name of the artifact's resumable download: ``tmp/<sha256>.part``."""
        return self.tmp / f"{artifact.sha256}.part"

    def expected_size(self, artifact: Artifact) -> int | None:
        """The full size (bytes) the writer of the artifact's partial recorded, or ``None``."""
        try:
            return int(read_file(self.cache_dir, f"tmp/{artifact.sha256}.size"))
        except (OSError, ValueError):
            return None

    def partial_state(self, artifact: Artifact) -> str:
        """``busy`` (a process holds the lock on ``tmp/<sha256>.part``: it is being downloaded),
        ``free`` (the file exists and nobody writes it) or ``absent``.

        Probing ``free`` takes the lock for a moment; a writer starting at that very moment falls back
        (or, when exclusive, sees :class:`PartialBusy` and retries)."""
        name = f"{artifact.sha256}.part"
        try:
            tmp = open_dir(self.cache_dir, "tmp")
        except OSError:  # no tmp/ (nothing is downloading), or a link (refused where it is written)
            return "absent"
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=tmp)
        except OSError:
            os.close(tmp)
            return "absent"
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return "busy"
            try:
                same = os.fstat(fd).st_ino == os.stat(name, dir_fd=tmp, follow_symlinks=False).st_ino
            except FileNotFoundError:
                return "absent"
            return "free" if same else "absent"
        finally:
            os.close(fd)
            os.close(tmp)

    def open_partial(self, artifact: Artifact) -> int | None:
        """A read descriptor of ``tmp/<sha256>.part`` (a download another process runs), or ``None`` when
        there is none; never through a link."""
        try:
            return open_file(self.cache_dir, f"tmp/{artifact.sha256}.part")
        except OSError:
            return None

    def clean_tmp(self, keep: Iterable[str] = ()) -> list[Path]:
        """Remove stale files from ``tmp/``; return what was removed.

        A file is stale when no process holds its lock (nobody is writing it). Resumable partials whose
        sha256 is in ``keep`` stay, so the next download resumes them. Never raises for a file that
        vanished meanwhile; other ``OSError`` propagate.
        """
        keep_names = {f"{sha}.part" for sha in keep}
        removed: list[Path] = []
        if self.tmp.is_symlink():
            self.refused(LinkRefused(self.tmp))
            return removed
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
            if entry.is_symlink():  # planted: removing the link itself is all it takes
                entry.unlink(missing_ok=True)
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

    def metadata_source_path(self, stream: str) -> Path:
        """Where the URL that copy was fetched from is kept (one line), written before the copy: a
        config that points the stream at another URL does not take the copy for its own."""
        return self.cache_dir / "streams" / f"{stream}.source"


def _root(release: Release) -> str:
    """The folder below ``cache_dir`` of ``release``'s artifacts."""
    return "private" if release.private else "artifacts"


class Published(NamedTuple):
    """A published artifact as opened (:meth:`ArtifactCache.open_published`): its read descriptor ``fd``
    (the caller closes it) and the ``sha256`` recorded when it was published (``None``: no record)."""

    fd: int
    sha256: str | None


def _lock(path: Path | str, flags: int = os.O_RDWR, dir_fd: int | None = None) -> int | None:
    """Open ``path`` (relative to ``dir_fd`` when given; never through a link at its name) and take an
    exclusive ``flock`` without waiting.

    Returns the file descriptor, or ``None`` when another process holds the lock, the path no
    longer names the inode we locked (it was renamed or removed meanwhile), or it is a link.
    """
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    except (FileNotFoundError, LinkRefused):
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            return None
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_ino != os.stat(path, dir_fd=dir_fd, follow_symlinks=False).st_ino:
            raise BlockingIOError
    except (BlockingIOError, FileNotFoundError):
        os.close(fd)
        return None
    return fd



class ArtifactWriter:
    """Write one artifact's bytes while hashing them; publish only complete, correct files.

    Use as a context manager; the published file gets ``mode`` (0600 for a private release). With
    ``resume=True`` the writer uses ``tmp/<sha256>.part`` and continues
    from its length (``bytes_written`` starts there, the hash covers the old bytes); when another process
    holds that file it falls back to a fresh uniquely named temp file. The temp file is locked (flock)
    while open.

    Every file is written relative to descriptors of real folders below ``cache_dir`` (``tmp/`` and the
    release folder, :mod:`bootserver.files`): a link in ``tmp/``, in the release folder's place or on its
    way raises :class:`~bootserver.files.LinkRefused` and nothing is written through it.

    Leaving the block without :meth:`commit` removes the temp file, except that a resumable partial is
    kept after a failure other than :class:`IntegrityError` or :class:`DiskFullError` (a dropped
    connection, a cancelled task), so the next download resumes it. ``bytes_written`` counts bytes.
    """

    def __init__(self, cache: ArtifactCache, dest: Path, artifact: Artifact, *, resume: bool = False,
                 exclusive: bool = False, verifier: StreamVerifier | None = None, mode: int = 0o644) -> None:
        self.cache = cache
        self.mode = mode
        self.verifier = verifier
        self.dest = dest
        self.artifact = artifact
        self.resume = resume
        self.exclusive = exclusive
        self.resumable = False
        self.bytes_written = 0
        self.resumed_from = 0
        self._expected_size: int | None = None
        self._size_file: str | None = None
        self._hash = hashlib.sha256()
        self._file: BinaryIO | None = None
        self._tmp: str | None = None  # the temp file's name in tmp/
        self._tmp_dir: int | None = None

    @property
    def expected_size(self) -> int | None:
        """The artifact's full size in bytes when known (set by the downloader), for disk-full errors;
        also recorded in ``tmp/<sha256>.size`` for processes following a resumable download."""
        return self._expected_size

    @expected_size.setter
    def expected_size(self, value: int | None) -> None:
        if value is not None and value != self._expected_size and self.resumable and self._tmp_dir is not None:
            size_file = f"{self.artifact.sha256}.size"
            tmp = f"{size_file}.{os.getpid()}"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                             dir_fd=self._tmp_dir)
                try:
                    os.write(fd, str(value).encode())
                finally:
                    os.close(fd)
                os.replace(tmp, size_file, src_dir_fd=self._tmp_dir, dst_dir_fd=self._tmp_dir)
                self._size_file = size_file
            except OSError:  # followers then learn the size when the file is published
                self._unlink(tmp)
        self._expected_size = value

    def _unlink(self, name: str) -> None:
        if self._tmp_dir is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=self._tmp_dir)

    def _drop_size_file(self) -> None:
        # The holder of the resumable partial's lock is the only writer of its size file, so it also
        # removes one left by a process killed mid-download, not only the one it wrote itself.
        if self._size_file is not None or self.resumable:
            self._unlink(f"{self.artifact.sha256}.size")
            self._size_file = None

    @property
    def path(self) -> Path:
        """The temp file being written (valid inside the ``with`` block, before :meth:`commit`)."""
        assert self._tmp is not None
        return self.cache.tmp / self._tmp

    @property
    def reader_path(self) -> str:
        """A path that opens the very temp file being written (``/proc/self/fd/N``: no name lookup, so no
        link can stand in), for readers following the download."""
        assert self._file is not None
        return f"/proc/self/fd/{self._file.fileno()}"

    def __enter__(self) -> ArtifactWriter:
        self._tmp_dir = self.cache.tmp_dir()
        try:
            self._open()
        except BaseException:
            os.close(self._tmp_dir)
            self._tmp_dir = None
            raise
        return self

    def _open(self) -> None:
        fd = None
        tmp_dir = self._tmp_dir
        assert tmp_dir is not None
        if self.resume:
            part = f"{self.artifact.sha256}.part"
            fd = _lock(part, os.O_RDWR | os.O_CREAT, dir_fd=tmp_dir)
            if fd is None and self.exclusive:
                raise PartialBusy(self.cache.tmp / part)
            if fd is not None and self.exclusive and self.cache.is_cached_at(self.dest, self.artifact):
                self._tmp = part
                self._unlink(part)  # published meanwhile: what is left here is of no use
                os.close(fd)
                self._tmp = None
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
            while True:
                name = f"{self.artifact.filename}.{secrets.token_hex(6)}.part"
                try:
                    fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                                 dir_fd=tmp_dir)
                    break
                except FileExistsError:
                    continue
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._tmp = name
        self._file = os.fdopen(fd, "r+b")
        self._file.seek(0, os.SEEK_END)

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
        Raises :class:`DiskFullError` when the fsync or the sidecar write hits a full disk, and
        :class:`~bootserver.files.LinkRefused` (logged) when a link stands where the release folder or a
        folder above it belongs: nothing is published through it.
        """
        assert self._file is not None and self._tmp is not None and self._tmp_dir is not None
        self.check(url)
        actual = self.artifact.sha256
        rel = self.dest.relative_to(self.cache.cache_dir)
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            os.fchmod(self._file.fileno(), self.mode)
            try:
                release_dir = open_dir(self.cache.cache_dir, rel.parent, create=True)
            except LinkRefused as e:
                self.cache.refused(e)
                raise
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise self._disk_full(0) from None
            raise
        try:
            try:
                write_atomic(self.dest.with_name(f".{self.dest.name}.sha256"), (actual + "\n").encode(),
                             root=self.cache.cache_dir)
            except OSError as e:
                if e.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise self._disk_full(0) from None
                raise
            # The size file goes before the publish: a process killed in between leaves a complete partial
            # (resumed next time), never a published artifact with a stale size file beside it.
            self._drop_size_file()
            os.replace(self._tmp, self.dest.name, src_dir_fd=self._tmp_dir, dst_dir_fd=release_dir)
            os.fsync(release_dir)
        finally:
            os.close(release_dir)
        self._file.close()  # releases the lock only after the rename
        self._tmp = None
        return self.dest

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        keep = (self.resumable and exc is not None
                and not isinstance(exc, (IntegrityError, DiskFullError, SignatureError)) and self.bytes_written > 0)
        if self.verifier is not None:
            self.verifier.close()
        if self._tmp is not None and not keep:
            self._unlink(self._tmp)
        self._drop_size_file()
        self._tmp = None
        if self._file is not None and not self._file.closed:
            self._file.close()
        if self._tmp_dir is not None:
            os.close(self._tmp_dir)
            self._tmp_dir = None
