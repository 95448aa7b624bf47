"""Build the merge-style Ignition stub bootserver serves to each node, and serve the real config.

The stub (Ignition config spec 3.1.0-3.5.0, https://coreos.github.io/ignition/specs/) is built from
the fragments in the repository's ``ignition/`` folder as JSON objects, never pasted as strings:

* ``stub.ign``: ``ignition.config.merge`` gets one entry, the node's real config (e.g. openshift-install's
  ``master.ign``) served by us, with ``verification.hash`` = ``sha512-<hex>`` of the exact bytes we serve;
* ``hostname.ign``: ``/etc/hostname`` for the node;
* ``checkin.ign``: the check-in unit ``bootserver-checkin.service`` (systemd, enabled; unless the profile
  says ``checkin: false``): once the booted system is on the network (``After=`` and
  ``Wants=network-online.target``), on every boot, ``curl`` (shipped in FCOS and RHCOS) POSTs nothing
  to the node's signed check-in URL, retrying (:data:`CHECKIN_CURL`); the server records stage ``up``.
  It sends nothing but what the URL holds (node name, expiry, signature) and curl's ``User-Agent``.

Stubs are serialised one way only (:func:`encode`), so the bytes ``render ignition`` prints are the
bytes the server sends.

Version negotiation (:func:`negotiate_version`): Ignition's fetch names the newest spec it reads in its
``Accept`` header (``application/vnd.coreos.ignition+json;version=3.3.0, */*;q=0.1`` from Ignition 2.14),
and the server writes the stub in the newest spec both that client and the profile allow.
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .butane import is_butane, translate
from .errors import InputError
from .resources import data_dir

#: Media type of an Ignition config (Ignition's ``Accept`` asks for it, with ``;version=X``).
MEDIA_TYPE = "application/vnd.coreos.ignition+json"

#: The oldest spec a stub can be written in: it needs ``verification.hash`` on the merge entry and
#: ``httpHeaders``, both new in spec 3.1.0.
MIN_STUB_VERSION = "3.1.0"


class NotAcceptableError(InputError):
    """No Ignition spec version the profile allows is one the client accepts (HTTP 406; exit 2 for
    ``render ignition --version``). The message is one plain-text line fit for a response body."""


def _version_key(version: str) -> tuple[int, ...] | None:
    """``"3.4.0"`` -> ``(3, 4, 0)``; ``None`` for anything that is not three dot-separated integers
    (e.g. ``3.6.0-experimental``, which no stub is written in)."""
    parts = version.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def parse_accept(header: str) -> list[tuple[str, dict[str, str], float]]:
    """Parse an HTTP ``Accept`` header (RFC 9110 section 12.5.1) into ``[(media range, params, q)]``.

    A small parser (neither aiohttp nor our other dependencies offer one): the header is split into
    media ranges at commas, each range into ``type/subtype`` and ``;name=value`` parameters at
    semicolons; names and the range are lower-cased, double quotes around a value are dropped. ``q``
    (0 to 1, default 1) is taken out of the parameters; a malformed ``q`` counts as 1 and a range without
    a ``/`` is skipped, as lenient servers do. Quoted commas or semicolons inside parameter values are
    not supported (no Ignition or browser sends them).
    """
    ranges: list[tuple[str, dict[str, str], float]] = []
    for item in header.split(","):
        media, *raw_params = (part.strip() for part in item.split(";"))
        media = media.lower()
        if "/" not in media:
            continue
        params: dict[str, str] = {}
        for raw in raw_params:
            name, sep, value = raw.partition("=")
            if sep:
                params[name.strip().lower()] = value.strip().strip('"')
        q = 1.0
        if "q" in params:
            try:
                q = min(1.0, max(0.0, float(params.pop("q"))))
            except ValueError:
                q = 1.0
        ranges.append((media, params, q))
    return ranges


def _quality(version: str, ranges: list[tuple[str, dict[str, str], float]]) -> float:
    """The q the client gives a stub of spec ``version``: that of the most specific range that matches
    (RFC 9110: ``type/subtype;params`` over ``type/subtype`` over ``type/*`` over ``*/*``), 0 if none.

    ``MEDIA_TYPE;version=X`` matches every spec of X's major version up to X: Ignition reads every
    older spec of its major version (it translates them up), and names only its newest in ``Accept``.
    """
    want = _version_key(version)
    main_type = MEDIA_TYPE.split("/")[0]
    best: tuple[int, float] | None = None  # (specificity, q)
    for media, params, q in ranges:
        if media == MEDIA_TYPE and "version" in params:
            top = _version_key(params["version"])
            if top is None or want is None or top[0] != want[0] or want > top:
                continue
            specificity = 3
        elif media == MEDIA_TYPE:
            specificity = 2
        elif media == f"{main_type}/*":
            specificity = 1
        elif media == "*/*":
            specificity = 0
        else:
            continue
        if best is None or specificity > best[0] or (specificity == best[0] and q > best[1]):
            best = (specificity, q)
    return 0.0 if best is None else best[1]


def stub_versions(maximum: str, versions: tuple[str, ...]) -> list[str]:
    """The ``versions`` a stub can be written in for a profile whose ``ignition_version`` is
    ``maximum``: from :data:`MIN_STUB_VERSION` up to ``maximum``, in the order given."""
    low, top = _version_key(MIN_STUB_VERSION), _version_key(maximum)
    return [v for v in versions
            if (k := _version_key(v)) is not None and low is not None and top is not None and low <= k <= top]


@functools.lru_cache(maxsize=256)  # per stub request, the same few Accept headers (77 us of a cold boot, issue 40)
def negotiate_version(accept: str | None, maximum: str, versions: tuple[str, ...]) -> str:
    """The spec version to write a stub in for a client that sent ``accept`` (the ``Accept`` header,
    ``None`` when absent).

    Candidates are the ``versions`` (e.g. ``bootserver.config.IGNITION_VERSIONS``) from
    :data:`MIN_STUB_VERSION` up to ``maximum`` (the profile's ``ignition_version``). Without an
    ``Accept`` header the answer is ``maximum``; otherwise the candidate with the highest q (see
    :func:`parse_accept`), the newer on a tie, so ``*/*`` alone gives ``maximum`` and Ignition 2.14's
    ``...;version=3.3.0, */*;q=0.1`` gives 3.3.0 from a 3.4.0 profile. Raises
    :class:`NotAcceptableError` when every candidate has q 0.
    """
    if accept is None or not accept.strip():
        return maximum
    candidates = stub_versions(maximum, versions)
    ranges = parse_accept(accept)
    scored = [(_quality(v, ranges), _version_key(v), v) for v in candidates]
    acceptable = [s for s in scored if s[0] > 0]
    if not acceptable:
        raise NotAcceptableError(
            f"no Ignition config version this node can be served ({MIN_STUB_VERSION} to {maximum}) "
            f"is acceptable to the client (Accept: {accept.strip()[:200]})")
    return max(acceptable)[2]


@functools.cache
def fragment(name: str) -> dict[str, Any]:
    """Load ``ignition/<name>.ign`` (a complete spec 3.1.0 config). Callers get a deep copy to edit."""
    return json.loads((data_dir("ignition") / f"{name}.ign").read_text())


def sha512_hash(data: bytes) -> str:
    """Ignition's verification hash of ``data``: ``sha512-<128 hex digits>``."""
    return "sha512-" + hashlib.sha512(data).hexdigest()


#: The unit's curl options: fail on an HTTP error, quiet unless it fails; each try gives up after 30 s,
#: and failures to connect, timeouts and 408/429/5xx answers are tried again 30 times, 10 s apart
#: (``--retry-connrefused`` needs curl 7.52: RHCOS 4.x on RHEL 8 ships 7.61, FCOS 8.x). A 403 (a key
#: revoked by ``keys rotate``) is not retried.
CHECKIN_CURL = ("/usr/bin/curl", "--fail", "--silent", "--show-error", "--connect-timeout", "10",
                "--max-time", "30", "--retry", "30", "--retry-delay", "10", "--retry-connrefused",
                "-X", "POST")


def _systemd_word(word: str) -> str:
    """``word`` quoted as one argument of a systemd ``ExecStart=`` line (systemd.service(5), "Command
    lines"; systemd.unit(5), "Specifiers"): double quotes, ``\\`` and ``"`` escaped, ``%`` as ``%%``
    and ``$`` as ``$$`` so neither is expanded."""
    escaped = word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def checkin_unit(url: str) -> str:
    """The text of the check-in unit (``bootserver-checkin.service``, named in ``ignition/checkin.ign``)
    for check-in URL ``url``: a oneshot service ordered after
    ``network-online.target`` (and wanting it), wanted by ``multi-user.target``, whose ``ExecStart`` is
    :data:`CHECKIN_CURL` then ``url`` (quoted for systemd). ``url`` must not contain a newline
    (``ValueError``)."""
    if "\n" in url or "\r" in url:
        raise ValueError("a check-in URL cannot contain a line break")
    command = " ".join([*CHECKIN_CURL, _systemd_word(url)])
    return ("[Unit]\nDescription=Tell bootserver this node is up\n"
            "Wants=network-online.target\nAfter=network-online.target\n\n"
            "[Service]\nType=oneshot\nRemainAfterExit=yes\n"
            f"ExecStart={command}\n\n"
            "[Install]\nWantedBy=multi-user.target\n")


def build_stub(*, version: str, hostname: str, config_url: str | None = None,
               config_hash: str | None = None, ca_pem: bytes | None = None,
               checkin_url: str | None = None) -> dict[str, Any]:
    """Return the stub config for a node as a JSON-ready dict.

    ``version`` is the spec version (``3.1.0`` to ``3.5.0``); ``config_url`` and ``config_hash`` (the
    :func:`sha512_hash` of the exact bytes served at that URL) give the merge entry, omitted when the
    profile has no real config;
    ``hostname`` is written to ``/etc/hostname``; ``ca_pem`` (a PEM CA certificate, RFC 7468), when
    given, goes into ``ignition.security.tls.certificateAuthorities`` as a base64 data URL (RFC 2397);
    ``checkin_url``, when given, is what the check-in unit (:func:`checkin_unit`, in ``systemd.units``,
    enabled) calls.
    """
    stub = copy.deepcopy(fragment("stub"))
    stub["ignition"]["version"] = version
    merge = stub["ignition"]["config"]["merge"]
    if config_url is not None:
        if config_hash is None:
            raise ValueError("config_hash is needed to pin the merged config")
        merge.append({"source": config_url, "verification": {"hash": config_hash}})
    else:
        del stub["ignition"]["config"]
    if ca_pem is not None:
        source = "data:;base64," + base64.b64encode(ca_pem).decode()
        stub["ignition"]["security"] = {"tls": {"certificateAuthorities": [{"source": source}]}}
    files = copy.deepcopy(fragment("hostname")["storage"]["files"])
    files[0]["contents"]["source"] = "data:," + quote(hostname + "\n", safe="")
    stub.setdefault("storage", {}).setdefault("files", []).extend(files)
    if checkin_url is not None:
        units = copy.deepcopy(fragment("checkin")["systemd"]["units"])
        units[0]["contents"] = checkin_unit(checkin_url)
        stub.setdefault("systemd", {}).setdefault("units", []).extend(units)
    return stub


def encode(config: dict[str, Any]) -> bytes:
    """Serialise a config the one way bootserver serves it: UTF-8 JSON, 2-space indent, final newline."""
    return (json.dumps(config, indent=2, ensure_ascii=False) + "\n").encode()


#: Stand-ins for a node's own values in a :class:`StubTemplate` (ASCII letters only: no quoting, systemd
#: or JSON escaping changes them, and no other part of a stub contains them).
_HOSTNAME, _CONFIG_URL, _CHECKIN_URL = (f"BootserverNode{part}Xq7Zk"
                                        for part in ("Hostname", "ConfigUrl", "CheckinUrl"))


def _json_inner(text: str) -> bytes:
    """``text`` as it reads inside a JSON string of :func:`encode` (without the quotes)."""
    return json.dumps(text, ensure_ascii=False)[1:-1].encode()


class StubTemplate:
    """The encoded stub (:func:`encode` of :func:`build_stub`) of every node that shares its spec
    ``version``, real config hash, CA and whether it checks in, with the node's own values left out:
    :meth:`fill` writes in a node's hostname, real config URL and check-in URL, giving the same bytes
    as building and encoding that node's stub (about 3 us instead of about 260 us: the indented JSON
    encoder is Python's own)."""

    def __init__(self, *, version: str, config_hash: str | None, ca_pem: bytes | None, checkin: bool) -> None:
        self.with_config = config_hash is not None
        self.checkin = checkin
        self._bytes = encode(build_stub(
            version=version, hostname=_HOSTNAME, config_url=_CONFIG_URL if self.with_config else None,
            config_hash=config_hash, ca_pem=ca_pem, checkin_url=_CHECKIN_URL if checkin else None))

    def fill(self, *, hostname: str, config_url: str | None, checkin_url: str | None) -> bytes:
        """The node's stub bytes. ``config_url`` and ``checkin_url`` must be given exactly when the
        template has them (``ValueError`` otherwise, and for a check-in URL with a line break)."""
        if (config_url is not None) != self.with_config or (checkin_url is not None) != self.checkin:
            raise ValueError("a stub template is filled with the URLs it was made for")
        out = self._bytes.replace(_HOSTNAME.encode(), _json_inner(quote(hostname, safe="")))
        if config_url is not None:
            out = out.replace(_CONFIG_URL.encode(), _json_inner(config_url))
        if checkin_url is not None:
            if "\n" in checkin_url or "\r" in checkin_url:
                raise ValueError("a check-in URL cannot contain a line break")
            out = out.replace(_CHECKIN_URL.encode(), _json_inner(_systemd_word(checkin_url)[1:-1]))
        return out


class RealConfigs:
    """Read real Ignition config files, re-reading a file only when its mtime, size or inode changes.

    A Butane config (:func:`bootserver.butane.is_butane`) is translated by the ``butane`` binary on
    each such change, and its translation is what is served and pinned. The stub's hash and the served
    bytes come from the same read, so they always agree; the sha512 is computed once per read of the
    file, not once per stub served.
    """

    def __init__(self) -> None:
        self._cache: dict[Path, tuple[tuple[int, int, int], bytes, str]] = {}

    def read_pinned(self, path: Path) -> tuple[bytes, str]:
        """The file's current bytes (a Butane config's translation) and their :func:`sha512_hash`.
        Raises ``OSError``, or :class:`~bootserver.butane.ButaneError` for a Butane config that
        cannot be translated now."""
        st = os.stat(path)
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        hit = self._cache.get(path)
        if hit and hit[0] == key:
            return hit[1], hit[2]
        data = path.read_bytes()
        if is_butane(path, data):
            data = translate(path, data)
        digest = sha512_hash(data)
        self._cache[path] = (key, data, digest)
        return data, digest

    def read(self, path: Path) -> bytes:
        """The file's current bytes. Raises ``OSError`` when it cannot be read."""
        return self.read_pinned(path)[0]
