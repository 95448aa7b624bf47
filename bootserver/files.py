"""Files under the folders bootserver owns (``cache_dir``, ``state_dir``): opened and written without
following a link, and small files replaced whole.

**No links below a root.** A process that can write into ``cache_dir`` must not make the server send
``/etc/passwd`` under an artifact's name, or write artifacts into a folder elsewhere (docs/design.md,
"Identity and trust"). So every file the server serves or writes below such a root is reached one folder
at a time from a descriptor of the root (``openat`` with ``O_NOFOLLOW``, :func:`open_dir`,
:func:`open_file`): a link in the file's place or in any folder between the root and the file raises
:class:`LinkRefused`, also when it was swapped in after an earlier look, since what is checked is what
was opened. The root itself is taken as configured (an operator may point ``cache_dir`` at a link).

**Replaced whole** (:func:`write_atomic`): a temp file in the same folder, fsync, rename over the target,
fsync of the folder: after a crash (even ``kill -9`` or a power cut) the path holds the old file or the
whole new one (stream metadata copies, sha256 sidecars, signing keys, TLS files).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path, PurePath

#: Flags of every folder opened on the way down to a file.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class LinkRefused(OSError):
    """A symbolic link where bootserver expects a real file or folder below a root it owns; ``filename``
    is the path that is a link (never its target). An ``OSError`` with ``errno.ELOOP``."""

    def __init__(self, path: Path) -> None:
        super().__init__(errno.ELOOP, "a link where a real file or folder belongs; refused", str(path))


def _parts(rel: PurePath | str) -> tuple[str, ...]:
    # split as text: pathlib's parsing was most of a file's opening (two per artifact answer, issue 40)
    text = os.fspath(rel)
    parts = tuple(p for p in text.split("/") if p not in ("", "."))
    if text.startswith("/") or ".." in parts:
        raise ValueError(f"not a plain relative path: {rel}")
    return parts


def _refuse_link(dir_fd: int, name: str, path: Path, e: OSError) -> None:
    """Raise :class:`LinkRefused` for ``path`` when ``name`` in ``dir_fd`` is a link (why ``e`` came)."""
    if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        try:
            if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                raise LinkRefused(path) from None
        except FileNotFoundError:
            pass


def open_dir(root: Path, rel: PurePath | str = ".", *, create: bool = False, mode: int = 0o755) -> int:
    """A descriptor (``O_DIRECTORY``) of the folder ``root/rel``, reached one real folder at a time
    (``O_NOFOLLOW``); with ``create`` the missing folders (and ``root``) are made with ``mode``.

    Raises :class:`LinkRefused` for a link on the way, ``FileNotFoundError`` for a missing folder (without
    ``create``), ``NotADirectoryError`` for a file on the way, other ``OSError`` as the system does; the
    caller closes the descriptor."""
    return _open_dir(root if isinstance(root, Path) else Path(root), _parts(rel), create, mode)


def _open_dir(root: Path, parts: tuple[str, ...], create: bool, mode: int) -> int:
    """:func:`open_dir` of the folder ``root/parts...`` (``parts`` already checked by :func:`_parts`)."""
    if create:
        root.mkdir(parents=True, exist_ok=True, mode=mode)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts):
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, mode, dir_fd=fd)
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as e:
                    _refuse_link(fd, part, root.joinpath(*parts[:i + 1]), e)
                    raise
            except OSError as e:
                _refuse_link(fd, part, root.joinpath(*parts[:i + 1]), e)
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(root: Path, rel: PurePath | str, flags: int = os.O_RDONLY, mode: int = 0o644, *,
              create_dirs: bool = False) -> int:
    """A descriptor of the file ``root/rel`` opened with ``flags`` (``os.O_*``; ``O_NOFOLLOW`` added),
    no link in its place or in a folder between ``root`` and it (:func:`open_dir`); ``create_dirs``
    makes missing folders. Opened to read, it must be a regular file (else ``IsADirectoryError`` or
    ``OSError(EINVAL)``: a fifo or a device would block or lie; opened ``O_NONBLOCK`` so that a fifo's
    opening does not wait for a writer, which a regular file's reads ignore).

    Raises :class:`LinkRefused` for a link, else ``OSError`` as ``os.open`` does; the caller closes."""
    parts = _parts(rel)
    if not parts:
        raise ValueError(f"no file name in {rel}")
    root = root if isinstance(root, Path) else Path(root)
    dir_fd = _open_dir(root, parts[:-1], create_dirs, 0o755)
    reading = flags & (os.O_WRONLY | os.O_RDWR) == 0
    try:
        try:
            fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_NONBLOCK if reading else 0), mode,
                         dir_fd=dir_fd)
        except OSError as e:
            _refuse_link(dir_fd, parts[-1], root.joinpath(*parts), e)
            raise
    finally:
        os.close(dir_fd)
    if reading:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, "is a folder", str(root.joinpath(*parts)))
            raise OSError(errno.EINVAL, "not a regular file", str(root.joinpath(*parts)))
    return fd


def read_file(root: Path, rel: PurePath | str) -> bytes:
    """The bytes of the regular file ``root/rel`` (:func:`open_file`: no link). Raises as it does."""
    fd = open_file(root, rel)
    with open(fd, "rb") as f:
        return f.read()


def fsync_dir(path: Path) -> None:
    """fsync the folder ``path`` so a rename in it survives a crash. Raises ``OSError``."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, mode: int = 0o644, *, root: Path | None = None,
                 exclusive: bool = False) -> None:
    """Write ``data`` (bytes) to ``path`` with permissions ``mode``, so that readers see the old file or
    the whole new one, never a part. Creates the folder. With ``exclusive`` the file must not exist
    (it is linked into place, which fails when it does: of two writers exactly one wins): raises
    ``FileExistsError`` then.

    With ``root`` (a folder the server owns, such as ``cache_dir``; ``path`` below it) no link is
    followed below ``root`` (:func:`open_dir`; :class:`LinkRefused`): the file is written in the real
    folder, and a link at ``path`` itself is replaced, never written through. Raises ``OSError`` (nothing
    is left behind but the old file)."""
    path = Path(path)
    if root is None:
        root, rel = path.parent, PurePath(".")
    else:
        rel = path.parent.relative_to(root)
    dir_fd = open_dir(root, rel, create=True)
    try:
        tmp = f".{path.name}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
                os.fchmod(f.fileno(), mode)
            if exclusive:
                os.link(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
                os.unlink(tmp, dir_fd=dir_fd)
            else:
                os.replace(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_changed(path: Path, data: bytes, mode: int = 0o644) -> bool:
    """:func:`write_atomic` ``data`` to ``path`` unless ``path`` is a regular file (never read through a
    link) that holds ``data`` already with permissions ``mode``; returns whether it wrote. For files
    written again and again from the same source (a TFTP root's loaders at each engine start and
    reload): an unchanged file keeps its inode and costs one read, no copy and no ``fsync``. Raises
    ``OSError`` as :func:`write_atomic`."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if (stat.S_ISREG(st.st_mode) and st.st_size == len(data) and stat.S_IMODE(st.st_mode) == mode
                    and f.read() == data):
                return False
    write_atomic(path, data, mode)
    return True
