"""A node's boot image as its base image with the node's region written over it (docs/design.md,
"Boot images"): nothing per node but the region (a few KiB) is ever written, and the image is sent or
written from the base's bytes and the region's, byte for byte the same either way."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..config import Config, ResolvedNode
from ..files import fsync_dir, read_file, write_atomic
from ..urls import Urls
from .base import BaseImage

#: Bytes read from the base at a time when an image is copied.
CHUNK = 1 << 20


@dataclass(frozen=True)
class NodeImage:
    """Node ``node``'s image: ``base`` with ``region`` (``base.region_size`` bytes) at ``base.offset``."""

    node: str
    base: BaseImage
    region: bytes

    def __post_init__(self) -> None:
        if len(self.region) != self.base.region_size:
            raise ValueError(f"a region of {len(self.region)} bytes for a base whose region is "
                             f"{self.base.region_size}")

    @property
    def size(self) -> int:
        """The image's bytes (the base's)."""
        return self.base.size

    @property
    def etag(self) -> str:
        """A strong validator of the image's bytes: the base's name (which changes with its inputs) and
        the region's sha256, hashed (hex, 32 digits)."""
        return hashlib.sha256(self.base.name.encode() + b"\0" + self.region).hexdigest()[:32]

    def pieces(self, start: int = 0, stop: int | None = None) -> Iterator[bytes | tuple[int, int]]:
        """The bytes ``[start, stop)`` of the image (``stop`` ``None``: to the end; both clipped to the
        image), in order, as pieces: ``(offset, count)`` for bytes to send from the base file as they
        are, ``bytes`` for bytes of the region. Empty pieces are left out."""
        stop = self.size if stop is None else min(stop, self.size)
        start = max(0, start)
        lo, hi = self.base.offset, self.base.offset + self.base.region_size
        if start < min(stop, lo):
            yield (start, min(stop, lo) - start)
        if max(start, lo) < min(stop, hi):
            yield self.region[max(start, lo) - lo:min(stop, hi) - lo]
        if max(start, hi) < stop:
            yield (max(start, hi), stop - max(start, hi))

    def read(self, start: int = 0, stop: int | None = None) -> bytes:
        """The bytes ``[start, stop)`` of the image, whole, in memory (see :meth:`pieces`). Raises
        ``OSError``."""
        out = []
        with open(self.base.path, "rb", buffering=0) as f:
            for piece in self.pieces(start, stop):
                out.append(piece if isinstance(piece, bytes) else os.pread(f.fileno(), piece[1], piece[0]))
        return b"".join(out)

    def write(self, path: Path) -> None:
        """Write the image to ``path`` whole: a temp file beside it (the base copied, the region
        written over it), fsync, rename; readers see the old file or the new one. Raises ``OSError``
        (nothing is left behind but the old file)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out, open(self.base.path, "rb") as base:
                for piece in self.pieces():
                    if isinstance(piece, bytes):
                        out.write(piece)
                        continue
                    offset, count = piece
                    base.seek(offset)
                    while count:
                        data = base.read(min(CHUNK, count))
                        if not data:
                            raise OSError(f"{self.base.path}: shorter than its {self.size} bytes")
                        out.write(data)
                        count -= len(data)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        fsync_dir(path.parent)


def cached_region(config: Config, urls: Urls, resolved: ResolvedNode, base: BaseImage, digest: str, exp: int,
                  texts: Callable[[], Mapping[str, str]]) -> NodeImage:
    """The image of a node (as resolved) over ``base`` from its cached region ``<node>-<digest>-<exp>.region`` in
    ``<cache_dir>/iso/nodes`` while one is valid for half of ``chain_ttl`` more, else from a new one
    made of ``texts()`` (a mapping of the base's region files to their texts), which replaces the
    node's older regions. Raises as :meth:`~.base.BaseImage.region` and ``OSError``."""
    node, folder = resolved.name, config.cache_dir / "iso" / "nodes"
    later = urls.signer.now() + config.server.signing.chain_ttl / 2
    for have in sorted(folder.glob(f"{node}-{digest}-*.region"), reverse=True):
        stamp = have.stem.rsplit("-", 1)[1]
        if stamp.isdigit() and int(stamp) > later:
            region = read_file(config.cache_dir, have.relative_to(config.cache_dir))  # no link (LinkRefused)
            if len(region) == base.region_size:
                return NodeImage(node, base, region)
    region = base.region(texts(), node)
    path = folder / f"{node}-{digest}-{exp}.region"
    write_atomic(path, region, root=config.cache_dir)
    for old in folder.glob(f"{node}-*.region"):
        if old != path and old.stem.count("-") == node.count("-") + 2:
            old.unlink(missing_ok=True)
    return NodeImage(node, base, region)
