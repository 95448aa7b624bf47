"""Small files replaced whole: the one way bootserver writes a file that readers must never see
half-written (stream metadata copies, sha256 sidecars, signing keys, TLS files, provider state).

A temp file in the same folder, fsync, rename over the target, fsync of the folder: after a crash
(even ``kill -9`` or a power cut) the path holds the old file or the whole new one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """fsync the folder ``path`` so a rename in it survives a crash. Raises ``OSError``."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` (bytes) to ``path`` with permissions ``mode``, so that readers see the old file or
    the whole new one, never a part. Creates the folder. Raises ``OSError`` (nothing is left behind but
    the old file)."""
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
    fsync_dir(path.parent)
