"""Parse CoreOS stream metadata into releases and live PXE artifacts.

Format: the stream metadata JSON published by Fedora CoreOS (``streams/<stream>.json``) and shipped by
openshift/installer for RHCOS (``data/data/coreos/rhcos.json``), as parsed by coreos/stream-metadata-go:
``{"stream": ..., "metadata": {"last-modified": ...}, "architectures": {<arch>: {"artifacts":
{"metal": {"release": ..., "formats": {"pxe": {"kernel"|"initramfs"|"rootfs": {"location", "sha256",
"signature"?}}, "iso": {"disk": {...}}?}}}}}}``; the live ISO is optional. RHCOS files carry no
``signature``; FCOS files do. The pre-4.6 RHCOS format
(``baseURI``/``buildid``/``images``) is refused.

Artifact URLs always come from the metadata, never from a file-name pattern (FCOS renamed
``live-kernel-x86_64`` to ``live-kernel.x86_64`` in 2025).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any
from urllib.parse import unquote, urlsplit

from .errors import MetadataError

#: The live PXE artifacts of a release, in the order an iPXE script uses them.
ARTIFACT_KINDS = ("kernel", "initramfs", "rootfs")

_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
#: Release versions and file names become URL path segments and cache paths: keep them plain.
SAFE_SEGMENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


@dataclass(frozen=True, slots=True)
class Artifact:
    """One live PXE artifact of a release.

    ``kind`` is ``kernel``, ``initramfs`` or ``rootfs``; ``url`` the upstream location; ``sha256`` the
    lower-case hex digest of its bytes; ``signature`` the URL of its detached GPG signature (FCOS) or
    ``None`` (RHCOS); ``filename`` the last path segment of ``url``.
    """

    kind: str
    url: str
    sha256: str
    signature: str | None
    filename: str


@dataclass(frozen=True, slots=True)
class Release:
    """The live PXE artifacts of one release of one stream for one architecture.

    ``stream`` is the config's stream name (what we put in URLs and cache paths), ``version`` the
    release (e.g. ``416.94.202405291527-0``), ``arch`` e.g. ``x86_64``.
    """

    stream: str
    arch: str
    version: str
    kernel: Artifact
    initramfs: Artifact
    rootfs: Artifact
    #: The release's live ISO (``metal.formats.iso.disk``, kind ``iso``), where the vendor's signed boot
    #: loaders are (a Secure Boot image is made of them); ``None`` when the stream offers none.
    live_iso: Artifact | None = None
    #: Its artifacts are handed only to the nodes of its stream, on URLs signed per node, and kept below
    #: ``cache_dir/private/`` (``streams.<name>.private``: an OpenShift agent release, whose initrd holds the
    #: cluster's secrets).
    private: bool = False

    @property
    def artifacts(self) -> tuple[Artifact, Artifact, Artifact]:
        """``(kernel, initramfs, rootfs)``."""
        return (self.kernel, self.initramfs, self.rootfs)


@dataclass(frozen=True, slots=True)
class StreamMetadata:
    """A parsed stream metadata document.

    ``name`` is the config's stream name, ``upstream_name`` the document's own ``stream`` field
    (``stable``, ``rhcos-4.16``), and ``releases`` maps an architecture to its :class:`Release` (only
    the architectures asked for).
    """

    name: str
    upstream_name: str
    releases: Mapping[str, Release]


def _artifact(kind: str, raw: Any, source: str, path: str, local: bool = False) -> Artifact:
    if not isinstance(raw, dict):
        raise MetadataError(source, path, "missing or not an object")
    location = raw.get("location")
    if not isinstance(location, str) or not location:
        raise MetadataError(source, f"{path}.location", "missing or not a string")
    parts = urlsplit(location)
    if local and parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/") or parts.query:
            raise MetadataError(source, f"{path}.location", f"not a file:///absolute/path URL: {location!r}")
    elif parts.scheme not in ("http", "https") or not parts.hostname:
        raise MetadataError(source, f"{path}.location", f"not an http(s) URL: {location!r}"
                            + (" (file:// only in a metadata file of this machine)" if parts.scheme == "file" else ""))
    filename = unquote(parts.path.rsplit("/", 1)[-1])
    if not SAFE_SEGMENT_RE.match(filename):
        raise MetadataError(source, f"{path}.location", f"unusable file name {filename!r}")
    sha256 = raw.get("sha256")
    if not isinstance(sha256, str) or not _SHA256_RE.match(sha256.lower()):
        raise MetadataError(source, f"{path}.sha256", f"not a sha256 (64 hex digits): {sha256!r}")
    signature = raw.get("signature")
    if signature is not None and not isinstance(signature, str):
        raise MetadataError(source, f"{path}.signature", "not a string")
    return Artifact(kind=kind, url=location, sha256=sha256.lower(), signature=signature, filename=filename)


def parse_stream(data: bytes | str, *, name: str, source: str, architectures: tuple[str, ...],
                 local: bool = False, private: bool = False) -> StreamMetadata:
    """Parse stream metadata ``data`` into a :class:`StreamMetadata` for ``architectures``.

    ``source`` (file path or URL) and the JSON path appear in every error. ``local``: the document is a
    file of this machine (``streams.<name>.metadata`` a path), whose artifact locations may also be
    ``file:///absolute/path`` URLs (a release of local files, as ``bootserver openshift import`` writes
    for the agent's PXE files); never a document fetched from a URL. ``private``: its releases'
    :attr:`Release.private`. Raises
    :class:`MetadataError` for non-JSON input, the legacy pre-stream format, a missing ``metal`` PXE
    artifact for a requested architecture, a location that is not http(s), or a malformed sha256.
    """
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise MetadataError(source, "", f"not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise MetadataError(source, "", "not a JSON object")
    if "architectures" not in doc and ("baseURI" in doc or "images" in doc):
        raise MetadataError(source, "", "legacy pre-stream RHCOS metadata (baseURI/images, OpenShift < 4.6) "
                            "is not supported; use the stream metadata (data/data/coreos/rhcos.json)")
    arches = doc.get("architectures")
    if not isinstance(arches, dict):
        raise MetadataError(source, "architectures", "missing or not an object")
    releases: dict[str, Release] = {}
    for arch in architectures:
        base = f"architectures.{arch}"
        if arch not in arches:
            raise MetadataError(source, base, "architecture missing")
        metal = arches[arch].get("artifacts", {}).get("metal") if isinstance(arches[arch], dict) else None
        if not isinstance(metal, dict):
            raise MetadataError(source, f"{base}.artifacts.metal", "missing")
        version = metal.get("release")
        if not isinstance(version, str) or not SAFE_SEGMENT_RE.match(version):
            raise MetadataError(source, f"{base}.artifacts.metal.release", f"missing or malformed: {version!r}")
        formats = metal.get("formats")
        pxe = formats.get("pxe") if isinstance(formats, dict) else None
        if not isinstance(pxe, dict):
            raise MetadataError(source, f"{base}.artifacts.metal.formats.pxe", "missing")
        ppath = f"{base}.artifacts.metal.formats.pxe"
        kernel, initramfs, rootfs = (_artifact(k, pxe.get(k), source, f"{ppath}.{k}", local) for k in ARTIFACT_KINDS)
        iso = formats.get("iso") if isinstance(formats, dict) else None
        live_iso = None
        if iso is not None:
            ipath = f"{base}.artifacts.metal.formats.iso"
            if not isinstance(iso, dict):
                raise MetadataError(source, ipath, "not an object")
            live_iso = _artifact("iso", iso.get("disk"), source, f"{ipath}.disk")
        releases[arch] = Release(stream=name, arch=arch, version=version,
                                 kernel=kernel, initramfs=initramfs, rootfs=rootfs, live_iso=live_iso,
                                 private=private)
    return StreamMetadata(
        name=name,
        upstream_name=str(doc.get("stream", "")),
        releases=MappingProxyType(releases),
    )
