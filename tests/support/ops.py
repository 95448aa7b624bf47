"""Shared by the tests (moved out of tests/test_ops.py, which other test modules imported)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from bootserver.artifacts.cache import ArtifactCache
from bootserver.streams import parse_stream
from support.configs import config_doc, load, master_profile
from support.upstreams import payload

STREAM = "rhcos-stream-4.16.json"


def make_config(tmp_path: Path, **profile: object):
    """Install-mode nodes ``master-0`` (selectable by MAC) and ``master-1`` (profile ``master`` with
    ``profile``), live node ``live-0``."""
    return load(config_doc(
        server={"base_url": "http://127.0.0.1:8080"},
        profiles={"master": master_profile(**profile),
                  "live": {"stream": "rhcos-4.16", "mode": "live", "ignition": "master.ign"}},
        nodes={"master-0": {"profile": "master", "mac": "52:54:00:12:34:56", "selectable": True},
               "master-1": {"profile": "master"}, "live-0": {"profile": "live"}}), tmp_path)


def fill_cache(config, reference: Path) -> dict[str, tuple[str, bytes]]:
    """Publish stand-in kernel, initramfs and rootfs under the real file names: kind -> (path, bytes)."""
    meta = parse_stream((reference / STREAM).read_bytes(), name="rhcos-4.16", source="x",
                        architectures=("x86_64",))
    rel = meta.releases["x86_64"]
    cache = ArtifactCache(config.cache_dir)
    out = {}
    for kind in ("kernel", "initramfs", "rootfs"):
        real = getattr(rel, kind)
        data = payload(kind, 100_000)
        art = real.__class__(kind=kind, url="http://up/" + kind, sha256=hashlib.sha256(data).hexdigest(),
                             signature=None, filename=real.filename)
        with cache.writer(rel, art) as w:
            w.write(data)
            w.commit(art.url)
        out[kind] = (f"/artifacts/rhcos-4.16/x86_64/{rel.version}/{real.filename}", data)
    return out
