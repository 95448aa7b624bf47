"""OpenPGP signatures of artifacts, checked while they stream, in the same pass as their sha256
(docs/design.md, "Artifact signatures").

FCOS publishes a detached OpenPGP signature beside every artifact (``signature`` in the stream metadata);
coreos-installer pipes each download into ``gpg --verify SIG -`` against Fedora's keys. We do the same with
Debian's ``gpgv`` (package ``gpgv``; a 1 GB artifact verified from a pipe in about 8 s with 3 MB of
memory, shared/DESIGN.md): :class:`StreamVerifier` starts ``gpgv --status-fd 1 --keyring K SIG -`` and
is fed every byte the cache writer writes; the artifact is published only when both the sha256 and the
signature hold. The keyring: Fedora's keys as coreos-installer ships them (``keys/fedora-signing-keys.asc``,
docs/artifacts.md lists their source and fingerprints), or ``upstream.signature_keys``.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import logging
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BootserverError, FetchError
from ..resources import data_dir
from ..streams import Artifact, Release

log = logging.getLogger("bootserver.fetch")

#: The keyring shipped with the product: Fedora's (and Red Hat's release) keys from coreos-installer.
DEFAULT_KEYS = "fedora-signing-keys.asc"

#: Seconds gpgv may take, once the last byte is written, to give its verdict.
VERDICT_TIMEOUT = 120.0

#: Bytes of the pipe into gpgv (Linux ``F_SETPIPE_SZ``), so that a write rarely waits for it.
PIPE_SIZE = 1 << 20

_ARMOR = re.compile(r"-----BEGIN PGP PUBLIC KEY BLOCK-----\r?\n(.*?)-----END PGP PUBLIC KEY BLOCK-----", re.S)


class SignatureError(FetchError):
    """An artifact's OpenPGP signature does not hold (exit 1; 502 for a read-through client): the bytes
    or the signature were tampered with, the signature is missing, or it is by a key not in the keyring.
    Names the artifact and the key ID. Not retried: the same bytes give the same verdict."""


class GpgvMissing(BootserverError):
    """``gpgv`` (Debian package ``gpgv``) is not installed, but a stream's artifacts are to be verified."""


def default_keyring() -> Path:
    """The shipped keyring file (``keys/fedora-signing-keys.asc``). Raises ``FileNotFoundError``."""
    return data_dir("keys") / DEFAULT_KEYS


def binary_keyring(path: Path) -> bytes:
    """The keys of the keyring file ``path`` as binary OpenPGP packets, what ``gpgv --keyring`` reads:
    an ASCII-armored file (RFC 4880, section 6.2: one or more ``PUBLIC KEY BLOCK``\\ s) is decoded, a
    binary one is taken as it is. Raises ``OSError`` and ``ValueError`` (armor that is not base64)."""
    data = path.read_bytes()
    if b"-----BEGIN PGP" not in data[:4096]:
        return data
    out = []
    for block in _ARMOR.findall(data.decode("ascii", "replace")):
        lines = block.splitlines()
        body_start = lines.index("") + 1 if "" in lines else 0  # armor headers end at the first empty line
        body = [ln.strip() for ln in lines[body_start:] if ln.strip() and not ln.startswith("=")]
        out.append(base64.b64decode("".join(body), validate=True))
    if not out:
        raise ValueError(f"{path}: no PUBLIC KEY BLOCK in an armored file")
    return b"".join(out)


class StreamVerifier:
    """One artifact's detached signature, checked by ``gpgv`` over the bytes it is fed.

    ``what``: the artifact in messages (its stream, release and file name); ``signature``: the
    signature's bytes (armored or binary); ``keyring``: binary keys (:func:`binary_keyring`). Feed the
    artifact's bytes in order with :meth:`update`; :meth:`restart` throws them away; :meth:`verify`
    gives the verdict once (later calls repeat it); :meth:`close` stops gpgv and removes its files.
    """

    def __init__(self, what: str, signature: bytes, keyring: bytes) -> None:
        self.what = what
        self._signature = signature
        self._keyring = keyring
        self._dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._verdict: SignatureError | bool | None = False  # False: not given yet

    def _start(self) -> subprocess.Popen[bytes]:
        gpgv = shutil.which("gpgv")
        if gpgv is None:
            raise GpgvMissing(f"{self.what}: its OpenPGP signature needs gpgv (Debian package gpgv), which is "
                              "not installed")
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="bootserver-gpgv-"))
            (self._dir / "keyring.gpg").write_bytes(self._keyring)
            (self._dir / "artifact.sig").write_bytes(self._signature)
        proc = subprocess.Popen([gpgv, "--status-fd", "1", "--homedir", str(self._dir), "--keyring",
                                 str(self._dir / "keyring.gpg"), str(self._dir / "artifact.sig"), "-"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdin is not None
        with contextlib.suppress(OSError, AttributeError):  # a larger pipe where Linux allows it
            fcntl.fcntl(proc.stdin.fileno(), fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        return proc

    def update(self, chunk: bytes) -> None:
        """Feed the next ``chunk`` of the artifact to gpgv (started on the first call). Raises
        :class:`GpgvMissing`; a gpgv that stopped reading early is reported by :meth:`verify`."""
        if self._proc is None:
            self._proc = self._start()
        assert self._proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self._proc.stdin.write(chunk)

    def restart(self) -> None:
        """Throw away what was fed: the next :meth:`update` starts a new gpgv."""
        self._stop()
        self._verdict = False

    def verify(self) -> None:
        """The verdict on everything fed: returns when the signature is good (``VALIDSIG`` by a key of the
        keyring), else raises :class:`SignatureError` naming the artifact and, where gpgv told it, the key
        ID. Raises :class:`GpgvMissing`."""
        if self._verdict is False:
            self._verdict = self._judge()
        if isinstance(self._verdict, SignatureError):
            raise self._verdict

    def _judge(self) -> SignatureError | None:
        if self._proc is None:
            self._proc = self._start()
        proc, self._proc = self._proc, None
        try:
            out, err = proc.communicate(timeout=VERDICT_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return SignatureError(f"{self.what}: gpgv gave no verdict on its OpenPGP signature within "
                                  f"{VERDICT_TIMEOUT:.0f} s")
        status: dict[str, list[str]] = {}
        for line in out.decode("utf-8", "replace").splitlines():
            if line.startswith("[GNUPG:] "):
                word, _, rest = line[9:].partition(" ")
                status.setdefault(word, rest.split())
        if proc.returncode == 0 and "VALIDSIG" in status:
            fpr = status["VALIDSIG"][0] if status["VALIDSIG"] else "?"
            log.debug("%s: OpenPGP signature good, key %s", self.what, fpr)
            return None
        if "BADSIG" in status:
            key = status["BADSIG"][0] if status["BADSIG"] else "?"
            return SignatureError(f"{self.what}: BAD OpenPGP signature by key ID {key}: the artifact or its "
                                  "signature was tampered with")
        if "NO_PUBKEY" in status or "ERRSIG" in status:
            key = (status.get("NO_PUBKEY") or status.get("ERRSIG") or ["?"])[0]
            return SignatureError(f"{self.what}: signed by key ID {key}, which is not in the keyring "
                                  "(upstream.signature_keys, or Fedora's keys)")
        if "NODATA" in status:
            return SignatureError(f"{self.what}: its signature file holds no OpenPGP signature")
        last = (err.decode("utf-8", "replace").strip().splitlines() or ["no message"])[-1]
        return SignatureError(f"{self.what}: OpenPGP signature not verified (gpgv exit {proc.returncode}: {last})")

    def _stop(self) -> None:
        if self._proc is not None:
            proc, self._proc = self._proc, None
            proc.kill()
            with contextlib.suppress(OSError, ValueError):
                proc.communicate(timeout=10)

    def close(self) -> None:
        """Stop gpgv if it runs and remove its files."""
        self._stop()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


@dataclass
class SignaturePolicy:
    """Which artifacts are verified, and against which keys. ``keyring``: the keyring file
    (``upstream.signature_keys``, else :func:`default_keyring`); ``verify``: each stream's
    ``verify_signatures`` (``None``: where the stream carries signatures)."""

    keyring: Path
    verify: Mapping[str, bool | None]
    _keys: bytes | None = field(default=None, repr=False)
    _said: set[str] = field(default_factory=set, repr=False)

    def keys_for(self, release: Release, artifact: Artifact) -> bytes | None:
        """The binary keys ``artifact`` of ``release`` must be signed by, or ``None`` when it is checked
        by sha256 only (its stream says ``verify_signatures: false``, or it carries no signature: a debug
        line once per stream and process). Raises :class:`SignatureError` for an artifact without a
        signature of a stream that says ``verify_signatures: true``, and when the keyring cannot be read."""
        verify = self.verify.get(release.stream)
        what = f"{release.stream} {release.version} {artifact.filename}"
        if verify is False:
            return None
        if artifact.signature is None:
            if verify:
                raise SignatureError(f"{what}: streams.{release.stream}.verify_signatures is true, but the "
                                     "stream metadata names no signature for it")
            if release.stream not in self._said:
                self._said.add(release.stream)
                log.debug("stream %s carries no artifact signatures (RHCOS): its artifacts are checked by "
                          "their sha256 only", release.stream)
            return None
        if self._keys is None:
            try:
                self._keys = binary_keyring(self.keyring)
            except (OSError, ValueError) as e:
                raise SignatureError(f"{what}: the keyring {self.keyring} cannot be read: {e}") from None
        return self._keys
