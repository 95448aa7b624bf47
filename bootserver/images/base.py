"""Base images: an ISO 9660 image built once per kind and inputs, whose node-dependent files all lie
side by side in one fixed-size **region** (docs/design.md, "Boot images").

The region's files have a fixed size (:data:`REGION_FILE_SIZE`, a whole number of ISO 9660 blocks) and
sit in one folder of the image (``/node``), so xorriso (libisofs) writes their data next to each other,
in the order of their names, and nothing else of the image (directory records, El Torito catalogue,
MBR, GPT) depends on their content. A node's file is its text padded with newlines to that size (GRUB
and ISOLINUX read empty lines as nothing). Where the region lies is asked from xorriso itself
(``-find ... -exec report_lba``) and checked against the placeholders' bytes, then kept beside the image.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import BootserverError
from .tools import ISOHYBRID_MBR, XORRISO, made_once, need, run

#: ISO 9660's logical block, in bytes.
BLOCK = 2048

#: Bytes of each file in the region: the node's text, padded with newlines (room for a GRUB config
#: with two 2048-byte kernel command lines and their quoting).
REGION_FILE_SIZE = 4 * BLOCK

#: The folder of the image that holds the region's files (a short ISO 9660 name: ISOLINUX reads
#: plain ISO 9660 names).
REGION_DIR = "node"

#: The first line of every region file in a base image: the base alone boots nothing.
PLACEHOLDER = "# bootserver: a base image's placeholder; a node's image holds its own config here\n"

#: ``-as mkisofs`` options of a hybrid image with two El Torito entries, BIOS (ISOLINUX) and UEFI (a FAT
#: image): ``{efi}`` is replaced by the FAT image's path in the tree (shared/DESIGN.md, "No-DHCP boot").
HYBRID_BOOT = ("-b", "isolinux/isolinux.bin", "-c", "isolinux/boot.cat", "-no-emul-boot", "-boot-load-size", "4",
               "-boot-info-table", "-eltorito-alt-boot", "-e", "{efi}", "-no-emul-boot", "-isohybrid-gpt-basdat")

#: ``-as mkisofs`` options of a UEFI-only image (arm64 machines have no BIOS): one El Torito entry, the
#: FAT image ``{efi}``.
UEFI_BOOT = ("-e", "{efi}", "-no-emul-boot")

_REPORT = re.compile(r"^File data lba:\s*\d+\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*'(.*)'$")


class RegionTooSmall(BootserverError):
    """A node's file does not fit its place in the region (exit 2; names the node, file and sizes)."""

    exit_code = 2


@dataclass(frozen=True)
class BaseImage:
    """A built base image. ``path``: the image file (never changed once built); ``size``: its bytes;
    ``offset``: the region's first byte in it; ``files``: the region's files (paths in the image,
    ``node/grub.cfg``), in the order of their data, each :data:`REGION_FILE_SIZE` bytes."""

    path: Path
    size: int
    offset: int
    files: tuple[str, ...]

    @property
    def name(self) -> str:
        """The base's cache name (``<kind>-<digest>``): it changes with every input of the base."""
        return self.path.parent.name

    @property
    def region_size(self) -> int:
        """The region's bytes: one :data:`REGION_FILE_SIZE` per file."""
        return len(self.files) * REGION_FILE_SIZE

    def region(self, texts: Mapping[str, str], node: str) -> bytes:
        """The region of node ``node``'s image: ``texts`` (a text per file of :attr:`files`, by path),
        each padded with newlines to :data:`REGION_FILE_SIZE`, in the order of :attr:`files`. Raises
        :class:`RegionTooSmall` naming the node and file when a text is longer, and ``KeyError`` when
        a file has no text."""
        out = []
        for file in self.files:
            data = texts[file].encode()
            if len(data) > REGION_FILE_SIZE:
                raise RegionTooSmall(f"node {node}: /{file} of its boot image is {len(data)} bytes, more than the "
                                     f"{REGION_FILE_SIZE} its image holds (shorten its kargs or network)")
            out.append(data + b"\n" * (REGION_FILE_SIZE - len(data)))
        return b"".join(out)

    @classmethod
    def load(cls, folder: Path) -> BaseImage:
        """The base image kept in ``folder`` (``image.iso`` and ``region.json``). Raises ``OSError`` and
        ``ValueError`` (a damaged ``region.json``)."""
        meta = json.loads((folder / "region.json").read_text())
        path = folder / "image.iso"
        return cls(path, path.stat().st_size, int(meta["offset"]), tuple(meta["files"]))


def locate_region(image: Path, files: Sequence[str]) -> tuple[int, tuple[str, ...]]:
    """Where ``files`` (paths in the image) lie in ``image``: ``(offset of the first, files in the order
    of their data)``, from ``xorriso -find -exec report_lba``. Raises
    :class:`~bootserver.errors.BootserverError` when one is missing, is not :data:`REGION_FILE_SIZE`
    bytes, or the files are not side by side."""
    report = run([str(need(XORRISO)), "-indev", str(image), "-find", f"/{REGION_DIR}", "-type", "f",
                  "-exec", "report_lba"], "xorriso -find")
    found = {}
    for line in report.splitlines():
        m = _REPORT.match(line.strip())
        if m:
            found[m[4].lstrip("/")] = (int(m[1]) * BLOCK, int(m[3]))
    missing = [f for f in files if f not in found]
    if missing:
        raise BootserverError(f"{image}: xorriso reports no data of /{missing[0]}")
    order = tuple(sorted(files, key=lambda f: found[f][0]))
    start = found[order[0]][0]
    for i, file in enumerate(order):
        offset, size = found[file]
        if size != REGION_FILE_SIZE or offset != start + i * REGION_FILE_SIZE:
            raise BootserverError(f"{image}: /{file} lies at byte {offset} with {size} bytes, not in one region "
                                  f"of {len(files)} x {REGION_FILE_SIZE} bytes from byte {start}")
    return start, order


def base_image(root: Path, name: str, populate: Callable[[Path], None], region: Sequence[str],
               efi_image: str, volume: str, boot_options: Sequence[str] = HYBRID_BOOT) -> BaseImage:
    """The base image ``root/name`` (``image.iso``, ``region.json``), built when missing (see
    :func:`~.tools.made_once`): ``populate(tree)`` puts the image's files into the folder ``tree``,
    the region's files (paths relative to the tree, all in :data:`REGION_DIR`) get placeholders, and
    ``xorriso -as mkisofs`` writes a hybrid image (``boot_options``: :data:`HYBRID_BOOT`, with the FAT
    image ``efi_image``; or :data:`UEFI_BOOT`, UEFI only, not hybrid) labelled ``volume``. Raises
    :class:`~.tools.IsoToolMissing`, :class:`~bootserver.errors.BootserverError` when a tool fails or the
    region is not where it must be, and ``OSError``."""
    if any(Path(f).parent != Path(REGION_DIR) for f in region):
        raise ValueError(f"region files must lie in /{REGION_DIR}: {region}")
    placeholder = (PLACEHOLDER.encode() + b"\n" * REGION_FILE_SIZE)[:REGION_FILE_SIZE]

    def make(folder: Path) -> None:
        tree = folder / "tree"
        (tree / REGION_DIR).mkdir(parents=True)
        populate(tree)
        for file in region:
            (tree / file).write_bytes(placeholder)
        image = folder / "image.iso"
        boot = [arg.replace("{efi}", efi_image) for arg in boot_options]
        hybrid = ["-isohybrid-mbr", str(need(ISOHYBRID_MBR))] if "-isohybrid-gpt-basdat" in boot else []
        run([str(need(XORRISO)), "-as", "mkisofs", "-quiet", "-o", str(image), "-V", volume, *hybrid, *boot,
             str(tree)], "xorriso")
        offset, order = locate_region(image, region)
        with open(image, "rb") as f:
            f.seek(offset)
            if f.read(len(order) * REGION_FILE_SIZE) != placeholder * len(order):
                raise BootserverError(f"{image}: the region's bytes at {offset} are not its placeholders")
        (folder / "region.json").write_text(json.dumps({"offset": offset, "files": list(order)}))
        shutil.rmtree(tree)

    return BaseImage.load(made_once(root, name, make))
