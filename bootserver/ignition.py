"""Build the merge-style Ignition stub bootserver serves to each node, and serve the real config.

The stub (Ignition config spec 3.1.0-3.5.0, https://coreos.github.io/ignition/specs/) is built from
the fragments in the repository's ``ignition/`` folder as JSON objects, never pasted as strings:

* ``stub.ign``: ``ignition.config.merge`` gets one entry, the node's real config (e.g. openshift-install's
  ``master.ign``) served by us, with ``verification.hash`` = ``sha512-<hex>`` of the exact bytes we serve;
* ``hostname.ign``: ``/etc/hostname`` for the node.

Stubs are serialised one way only (:func:`encode`), so the bytes ``render ignition`` prints are the
bytes the server sends.
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

from .resources import data_dir

#: Media type of an Ignition config (Ignition's ``Accept`` asks for it, with ``;version=X``).
MEDIA_TYPE = "application/vnd.coreos.ignition+json"


@functools.lru_cache(maxsize=None)
def fragment(name: str) -> dict[str, Any]:
    """Load ``ignition/<name>.ign`` (a complete spec 3.1.0 config). Callers get a deep copy to edit."""
    return json.loads((data_dir("ignition") / f"{name}.ign").read_text())


def sha512_hash(data: bytes) -> str:
    """Ignition's verification hash of ``data``: ``sha512-<128 hex digits>``."""
    return "sha512-" + hashlib.sha512(data).hexdigest()


def build_stub(*, version: str, hostname: str, config_url: str | None = None,
               config_hash: str | None = None, ca_pem: bytes | None = None) -> dict[str, Any]:
    """Return the stub config for a node as a JSON-ready dict.

    ``version`` is the spec version (``3.1.0`` to ``3.5.0``); ``config_url`` and ``config_hash`` (the
    :func:`sha512_hash` of the exact bytes served at that URL) give the merge entry, omitted when the
    profile has no real config;
    ``hostname`` is written to ``/etc/hostname``; ``ca_pem`` (a PEM CA certificate, RFC 7468), when
    given, goes into ``ignition.security.tls.certificateAuthorities`` as a base64 data URL (RFC 2397).
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
    return stub


def encode(config: dict[str, Any]) -> bytes:
    """Serialise a config the one way bootserver serves it: UTF-8 JSON, 2-space indent, final newline."""
    return (json.dumps(config, indent=2, ensure_ascii=False) + "\n").encode()


class RealConfigs:
    """Read real Ignition config files, re-reading a file only when its mtime, size or inode changes.

    The stub's hash and the served bytes come from the same read, so they always agree; the sha512 is
    computed once per read of the file, not once per stub served.
    """

    def __init__(self) -> None:
        self._cache: dict[Path, tuple[tuple[int, int, int], bytes, str]] = {}

    def read_pinned(self, path: Path) -> tuple[bytes, str]:
        """The file's current bytes and their :func:`sha512_hash`. Raises ``OSError``."""
        st = os.stat(path)
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        hit = self._cache.get(path)
        if hit and hit[0] == key:
            return hit[1], hit[2]
        data = path.read_bytes()
        digest = sha512_hash(data)
        self._cache[path] = (key, data, digest)
        return data, digest

    def read(self, path: Path) -> bytes:
        """The file's current bytes. Raises ``OSError`` when it cannot be read."""
        return self.read_pinned(path)[0]
