"""Signed, expiring per-node URLs: the one place that signs and verifies them.

A signed URL carries the query ``?exp=<unix seconds>&sig=<base64url>`` where ``sig`` is
HMAC-SHA256 (RFC 2104, stdlib :mod:`hmac`) under the server's key over the UTF-8 bytes of::

    <node> "\\n" <route path> "\\n" <exp>

``route path`` is the URL path below ``base_url`` (e.g. ``/ignition/master-0/config``), so a
prefix-stripping reverse proxy does not break signatures. ``sig`` is unpadded base64url (43 chars).

Expiries are rounded *up* to a whole hour (:func:`expiry`), so ``bootserver render`` and the server,
running the same code within the same hour, produce byte-identical URLs (and so identical stubs).

Keys live in ``<state_dir>/keys.json`` (mode 0600), created atomically with ``O_EXCL`` on first use so
two processes starting at once agree on one key; with ``state_store: postgresql://...`` they live in the
shared database instead (:mod:`bootserver.state.postgresql`, :meth:`Keyring.held`). ``bootserver keys
rotate`` makes a new current key and keeps the old ones, each with a retirement time (unix seconds),
until then still accepted.

A signature that no key in hand verifies is refused (403) while the key source answers. While it
cannot be read (``keys.json`` unreadable or unparsable, the database unreachable: :attr:`Keyring.stale`)
the signature may come from a key rotated in meanwhile by another process or replica, so
:meth:`Signer.check` raises :class:`KeysUnavailableError` (503 with ``Retry-After``: iPXE and Ignition
retry, and once the keys can be read again the answer is the truth, 200 or 403).
"""

from __future__ import annotations

import base64
import errno
import functools
import hashlib
import hmac
import json
import logging
import math
import os
import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .errors import BootserverError, InputError, UnavailableError
from .files import open_file, write_atomic
from .values import parse_duration  # noqa: F401  (re-exported: the one duration parser)

#: Expiries are rounded up to a multiple of this many seconds (one hour).
EXPIRY_ROUNDING = 3600
#: Size of a signing key in bytes (256 bits, the HMAC-SHA256 block-size-safe choice).
KEY_BYTES = 32
#: Name of the keys file inside ``state_dir``.
KEYS_FILE = "keys.json"
#: Query parameters that are secrets and never logged.
SECRET_PARAMS = frozenset({"sig", "token"})

_EXP_RE = re.compile(r"^[1-9][0-9]{0,11}$")  # canonical decimal only: one spelling per expiry
_SIG_RE = re.compile(r"^[A-Za-z0-9_-]{43}$")


log = logging.getLogger("bootserver.signing")

class KeyFileError(InputError):
    """The keys file is malformed (exit 2). The message names the file."""


class KeyStoreError(BootserverError):
    """The keys file cannot be read or written (exit 1). The message names the file."""


class KeysUnavailableError(UnavailableError):
    """A well-formed, unexpired signature that no key in hand verifies, while the key source cannot be
    read (:attr:`Keyring.stale`): a key rotated since may have made it, so the answer is 503 with
    ``Retry-After``, not a refusal. The message (log only) says why the keys cannot be read."""

    public = "signing keys cannot be read now; retry later"


def expiry(now: float, ttl: int) -> int:
    """The ``exp`` of a URL issued at ``now`` (unix seconds) valid for at least ``ttl`` seconds:
    ``now + ttl`` rounded up to the next whole hour (:data:`EXPIRY_ROUNDING`)."""
    return int(math.ceil((now + ttl) / EXPIRY_ROUNDING) * EXPIRY_ROUNDING)


def _message(node: str, path: str, exp: int) -> bytes:
    if "\n" in node or "\n" in path:
        raise ValueError("node and path must not contain a newline (the field separator)")
    return f"{node}\n{path}\n{exp}".encode()


def sign(key: bytes, node: str, path: str, exp: int) -> str:
    """HMAC-SHA256 of ``node \\n path \\n exp`` under ``key``, unpadded base64url.

    Raises ``ValueError`` if ``node`` or ``path`` contains a newline (the message would be ambiguous).
    """
    mac = _keyed(key).copy()  # a copy of the keyed state: OpenSSL 3 looks the digest up per new HMAC
    mac.update(_message(node, path, exp))
    return base64.urlsafe_b64encode(mac.digest()).rstrip(b"=").decode()


@functools.lru_cache(maxsize=16)
def _keyed(key: bytes) -> hmac.HMAC:
    """HMAC-SHA256 keyed with ``key``, nothing hashed yet (a few keys live at a time: current, retiring)."""
    return hmac.new(key, digestmod=hashlib.sha256)


def verify(keys: Sequence[bytes], node: str, path: str, exp: str | None, sig: str | None,
           now: float) -> bool:
    """True only if ``sig`` is the signature under one of ``keys`` of ``node``, ``path`` and ``exp``,
    and ``exp`` (decimal unix seconds) is later than ``now`` (unix seconds).

    Pure and total: any malformed or missing input is simply ``False``. Every key is tried with
    :func:`hmac.compare_digest`, so timing does not tell which key or which byte differed.
    """
    exp_s = unexpired(exp, sig, now)
    if exp_s is None or sig is None or "\n" in node or "\n" in path:
        return False
    ok = False
    for key in keys:
        ok |= hmac.compare_digest(sign(key, node, path, exp_s), sig)
    return ok


def unexpired(exp: str | None, sig: str | None, now: float) -> int | None:
    """``exp`` as unix seconds when ``exp`` and ``sig`` are well formed (canonical decimal, 43 base64url
    characters) and ``exp`` is later than ``now``; else ``None`` (no key could make them valid)."""
    if not exp or not sig or not _EXP_RE.match(exp) or not _SIG_RE.match(sig):
        return None
    exp_s = int(exp)
    return exp_s if exp_s > now else None


@dataclass(frozen=True)
class KeyEntry:
    """One signing key; ``retires`` is when it stops being accepted (unix seconds), ``None`` = current."""

    key: bytes
    created: int
    retires: int | None = None

    def to_json(self) -> dict[str, object]:
        return {"key": base64.urlsafe_b64encode(self.key).decode(), "created": self.created,
                "retires": self.retires}


class Keyring:
    """The keys file of a ``state_dir``: one current key and older keys until their retirement.

    Format (JSON)::

        {"version": 1, "keys": [{"key": "<base64url>", "created": <unix s>, "retires": null},
                                {"key": "...", "created": ..., "retires": <unix s>}, ...]}

    The first entry is the current key (``retires`` null). Raises :class:`KeyFileError` for a bad file.
    """

    def __init__(self, path: Path | None, entries: Sequence[KeyEntry],
                 stamp: tuple[int, int, int] | None = None) -> None:
        self.path = path
        self.entries = tuple(entries)
        #: (mtime_ns, size, inode) of the file the entries were read from; None: not read from a file
        self.stamp = stamp
        #: For keys held by a shared state store: returns the store's newest keyring (see :meth:`held`).
        self._latest: Callable[[], Keyring] | None = None
        #: For keys held by a state store: why the store's keys may be out of date (see :attr:`stale`).
        self._staleness: Callable[[], str | None] | None = None
        #: Why the keys file could not be read again at the last :meth:`refreshed`, else None.
        self._problem: str | None = None

    @classmethod
    def held(cls, entries: Sequence[KeyEntry], latest: Callable[[], Keyring],
             staleness: Callable[[], str | None] | None = None) -> Keyring:
        """Keys held by a state store rather than a file (the PostgreSQL store): :meth:`refreshed`
        returns ``latest()``, the newest keys the store has read; :attr:`stale` is ``staleness()``,
        why the store could not read them lately (one line, no secret) or ``None``."""
        ring = cls(None, entries)
        ring._latest = latest
        ring._staleness = staleness
        return ring

    @property
    def stale(self) -> str | None:
        """Why these keys may lack one made since (their source could not be read when last asked:
        the keys file unreadable or unparsable, the state store unreachable), as one line for the
        log; ``None`` while the source answers."""
        if self._staleness is not None:
            return self._staleness()
        return self._problem

    @classmethod
    def _read(cls, path: Path) -> Keyring:
        # never through a link in state_dir (files.LinkRefused): keys read from elsewhere would sign URLs
        with open(open_file(path.parent, path.name), "rb") as f:
            st = os.fstat(f.fileno())
            data = f.read()
        return cls(path, cls._parse(path, data), (st.st_mtime_ns, st.st_size, st.st_ino))

    def refreshed(self) -> Keyring:
        """This keyring, or the file's new contents when ``keys rotate`` (any process) replaced it.

        One ``stat`` per call. A file that vanished or no longer parses keeps the keys in hand, so a bad
        edit cannot lock every node out, and makes them :attr:`stale` until it reads again (logged
        once when it starts, once when it ends).
        """
        if self._latest is not None:
            return self._latest()
        if self.stamp is None or self.path is None:
            return self
        try:
            st = os.stat(self.path)
            same = (st.st_mtime_ns, st.st_size, st.st_ino) == self.stamp
            fresh = self if same else Keyring._read(self.path)
        except (OSError, KeyFileError) as e:
            problem = str(e) if isinstance(e, KeyFileError) else f"{self.path}: {e.strerror or e}"
            if self._problem is None:
                log.warning("keeping the signing keys in use: %s", problem)
            self._problem = problem
            return self
        if self._problem is not None:
            log.info("%s: signing keys read again", self.path)
            self._problem = None
        return fresh

    @property
    def current(self) -> bytes:
        """The key new URLs are signed with."""
        return self.entries[0].key

    def accepted(self, now: float) -> tuple[bytes, ...]:
        """Keys that verify signatures at ``now`` (unix seconds): current plus unretired old keys."""
        return tuple(e.key for e in self.entries if e.retires is None or e.retires > now)

    @staticmethod
    def _parse(path: Path, data: bytes) -> list[KeyEntry]:
        try:
            doc = json.loads(data)
            entries = [KeyEntry(base64.urlsafe_b64decode(e["key"]), int(e["created"]),
                                None if e["retires"] is None else int(e["retires"]))
                       for e in doc["keys"]]
        except (ValueError, KeyError, TypeError) as e:
            raise KeyFileError(f"{path}: not a bootserver keys file ({e})") from None
        if not entries or entries[0].retires is not None or any(len(e.key) < 16 for e in entries):
            raise KeyFileError(f"{path}: keys: the first key must be current and keys at least 16 bytes")
        return entries

    @classmethod
    def load_or_create(cls, state_dir: Path, now: Callable[[], float] = time.time) -> Keyring:
        """Load ``<state_dir>/keys.json``, creating it (mode 0600, ``O_EXCL``) with a fresh key if absent.

        Two processes racing both end up with the key of whichever created the file first.
        Raises :class:`KeyFileError` for a malformed file and :class:`KeyStoreError` for an unreadable
        file or an unwritable ``state_dir``.
        """
        path = Path(state_dir) / KEYS_FILE
        try:
            return cls._load_or_create(path, now)
        except OSError as e:
            raise KeyStoreError(f"{path}: cannot read or create the signing keys: "
                                f"{e.strerror or e}") from None

    @classmethod
    def _load_or_create(cls, path: Path, now: Callable[[], float]) -> Keyring:
        state_dir = path.parent
        try:
            return cls._read(path)
        except FileNotFoundError:
            pass
        Path(state_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
        entry = KeyEntry(secrets.token_bytes(KEY_BYTES), int(now()))
        data = _dump([entry])
        tmp = path.with_name(f".{KEYS_FILE}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)  # atomic and exclusive: fails if another process won the race
            except OSError as e:
                if e.errno != errno.EEXIST:
                    raise
        finally:
            tmp.unlink(missing_ok=True)
        return cls._read(path)

    def rotate(self, grace: int, now: Callable[[], float] = time.time) -> Keyring:
        """Write a new current key; the old current key retires ``grace`` seconds from now, and keys
        already retired are dropped. Atomic replace, mode 0600. Returns the new keyring."""
        if self.path is None:
            raise KeyStoreError("these keys are held by the state store: rotate them through it")
        t = int(now())
        old = [KeyEntry(e.key, e.created, t + grace if e.retires is None else e.retires)
               for e in self.entries]
        entries = [KeyEntry(secrets.token_bytes(KEY_BYTES), t)] + [
            e for e in old if e.retires is not None and e.retires > t]
        write_atomic(self.path, _dump(entries), mode=0o600, root=self.path.parent)
        return Keyring._read(self.path)


def _dump(entries: Sequence[KeyEntry]) -> bytes:
    return (json.dumps({"version": 1, "keys": [e.to_json() for e in entries]}, indent=2) + "\n").encode()


#: Seconds during which the keys last looked at (:meth:`Keyring.refreshed`, one ``stat`` of the keys
#: file) are used without looking again: under load requests arrive microseconds apart, and a
#: ``stat`` per request is a system call per request.
KEYS_REUSE = 0.001
#: Signatures a :class:`Signer` remembers as verified (forgotten all at once beyond this many).
VERIFIED_MAX = 4096


class Signer:
    """Sign and verify route paths with a :class:`Keyring` and a clock ``now`` (unix seconds).

    The keys are looked at again (:meth:`Keyring.refreshed`) at most every :data:`KEYS_REUSE` seconds,
    and at once for a signature the keys in hand do not verify: a URL signed with a key rotated in by
    another process verifies at its first request, and a key retired (``keys rotate --grace 0``)
    stops verifying within a millisecond.

    A signature once verified is remembered (up to :data:`VERIFIED_MAX`) until its ``exp`` or the next
    retirement of a key in hand, whichever comes first, and while the keys in hand are the same: the
    same URL coming again (a node's every boot, iPXE's retries) skips the HMAC. Only valid signatures
    are remembered, so the time a check takes tells nothing about a signature its sender does not hold."""

    def __init__(self, keyring: Keyring, now: Callable[[], float] = time.time) -> None:
        self.keyring = keyring
        self.now = now
        self._refreshed_at = -1.0  # time.monotonic() of the last look
        #: (node, path, exp, sig) -> until when (unix seconds) it stays verified, under ``_verified_by``
        self._verified: dict[tuple[str, str, str, str], float] = {}
        self._verified_by: Keyring | None = None

    def _remember(self, keyring: Keyring, node: str, path: str, exp: str, sig: str, now: float) -> None:
        if len(self._verified) >= VERIFIED_MAX:
            self._verified.clear()
        retiring = [e.retires for e in keyring.entries if e.retires is not None and e.retires > now]
        self._verified[(node, path, exp, sig)] = min([int(exp), *retiring])

    def _signing_keys(self) -> Keyring:
        t = time.monotonic()
        if t - self._refreshed_at >= KEYS_REUSE:
            self.keyring = self.keyring.refreshed()
            self._refreshed_at = t
        return self.keyring

    def query(self, node: str, path: str, ttl: int) -> str:
        """The query string ``exp=…&sig=…`` for ``node`` and ``path``, valid ``ttl`` seconds (at least)."""
        keyring = self._signing_keys()
        exp = expiry(self.now(), ttl)
        return urlencode({"exp": exp, "sig": sign(keyring.current, node, path, exp)})

    def state(self, ttl: int) -> tuple[int, bytes]:
        """``(expiry, current key)`` that :meth:`query` would sign with now for ``ttl`` seconds: URLs
        signed under the same state are identical, so a cache of signed text can key on it."""
        return expiry(self.now(), ttl), self._signing_keys().current

    def check(self, node: str, path: str, exp: str | None, sig: str | None) -> bool:
        """True when ``exp``/``sig`` from a request are valid for ``node`` and ``path`` now, False when
        they are not. Raises :class:`KeysUnavailableError` instead of False for a well-formed,
        unexpired signature while the keys are :attr:`~Keyring.stale` (it may come from a newer key)."""
        looked = self._refreshed_at
        keyring = self._signing_keys()
        now = self.now()
        if keyring is not self._verified_by:
            self._verified.clear()
            self._verified_by = keyring
        if exp is not None and sig is not None:
            until = self._verified.get((node, path, exp, sig))
            if until is not None and now < until:
                return True
        # (verify() is False when exp or sig is missing; testing them first tells mypy they are strings)
        if exp is not None and sig is not None and verify(keyring.accepted(now), node, path, exp, sig, now):
            self._remember(keyring, node, path, exp, sig, now)
            return True
        if self._refreshed_at == looked:  # the keys in hand were older: a newer key may verify it
            self._refreshed_at = time.monotonic()
            keyring = self.keyring = self.keyring.refreshed()
            if exp is not None and sig is not None and verify(keyring.accepted(now), node, path, exp, sig, now):
                self._verified.clear()
                self._verified_by = keyring
                self._remember(keyring, node, path, exp, sig, now)
                return True
        stale = keyring.stale
        if stale is not None and unexpired(exp, sig, now) is not None:
            raise KeysUnavailableError(f"a signature no key in hand verifies, and the signing keys cannot "
                                       f"be read to look for a newer one: {stale}")
        return False


def redact(url_or_query: str) -> str:
    """Replace the values of secret query parameters (``sig``, ``token``) with ``REDACTED``.

    Accepts a full URL, a path with query, or a bare query string; anything else is returned unchanged.
    """
    if "?" in url_or_query or "://" in url_or_query:
        parts = urlsplit(url_or_query)
        return urlunsplit(parts._replace(query=redact(parts.query))) if parts.query else url_or_query
    if "=" not in url_or_query:
        return url_or_query
    pairs = parse_qsl(url_or_query, keep_blank_values=True)
    return "&".join(f"{k}={'REDACTED' if k in SECRET_PARAMS else v}" for k, v in pairs)
